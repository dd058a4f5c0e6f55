//! What the API server accepts as an object's name and namespace, for every kind: the checks
//! that keep a name one segment of the object's URL path and a namespace a DNS label. Names
//! and namespaces that plugins or manifest files hand the host pass here before they reach a
//! URL or a cache key.

/// Longest namespace (a DNS-1123 label).
pub const MAX_NAMESPACE_BYTES: usize = 63;

/// Why `name` cannot name an object of any kind, or none when it can. The API server refuses
/// these for every kind (`path.IsValidPathSegmentName`): the name is a segment of the object's
/// URL, which `/`, `%` (an escaped `/` once decoded), `.` and `..` would leave.
pub fn name_problem(name: &str) -> Option<&'static str> {
    match name {
        "" => Some("is empty"),
        "." | ".." => Some("may not be `.` or `..`"),
        _ if name.contains(['/', '%']) => Some("may not contain `/` or `%`"),
        _ => None,
    }
}

/// Why `namespace` cannot be a namespace, or none when it can: a DNS-1123 label, at most 63
/// lowercase letters, digits and `-`, starting and ending with a letter or a digit.
pub fn namespace_problem(namespace: &str) -> Option<&'static str> {
    let bytes = namespace.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() {
        Some("is empty")
    } else if bytes.len() > MAX_NAMESPACE_BYTES {
        Some("is longer than 63 characters")
    } else if !bytes.iter().all(|b| alnum(b) || *b == b'-') {
        Some("may hold only lowercase letters, digits and `-`")
    } else if !bytes.first().is_some_and(alnum) || !bytes.last().is_some_and(alnum) {
        Some("must start and end with a letter or a digit")
    } else {
        None
    }
}

/// Refuses an object whose name or (non-empty) namespace the API server refuses, naming the
/// field.
pub fn check(name: &str, namespace: Option<&str>) -> Result<(), BadName> {
    let refused = |field, problem| Err(BadName { field, problem });
    if let Some(problem) = name_problem(name) {
        return refused("metadata.name", problem);
    }
    match namespace
        .filter(|ns| !ns.is_empty())
        .and_then(namespace_problem)
    {
        Some(problem) => refused("metadata.namespace", problem),
        None => Ok(()),
    }
}

/// A name or namespace the API server refuses for every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}` {problem}, which the API server refuses for every kind")]
pub struct BadName {
    /// `metadata.name` or `metadata.namespace`.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_field() {
        let check = |name, namespace| check(name, namespace).map_err(|e| e.to_string());
        assert_eq!(
            check("a/../b", Some("shop")),
            Err(
                "field `metadata.name` may not contain `/` or `%`, which the API server \
                 refuses for every kind"
                    .into()
            )
        );
        assert_eq!(
            check("a", Some("Shop")),
            Err(
                "field `metadata.namespace` may hold only lowercase letters, digits and `-`, \
                 which the API server refuses for every kind"
                    .into()
            )
        );
        assert_eq!(check("a", Some("")), Ok(()));
        assert_eq!(check("a", None), Ok(()));
    }

    #[test]
    fn names_that_would_leave_their_url_segment_are_refused() {
        for bad in ["", ".", "..", "a/b", "../kube-system", "x%2F..", "%"] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
        // Kinds differ beyond this (RBAC names hold `:`, some kinds allow capitals): only the
        // rules every kind shares are checked.
        for good in [
            "web-1",
            "system:controller:x",
            "Mixed_Case",
            "a.b",
            "...",
            "ñ",
        ] {
            assert_eq!(name_problem(good), None, "{good:?}");
        }
    }

    #[test]
    fn namespaces_are_dns_labels() {
        for bad in ["", "Shop", "a_b", "-a", "a-", "a/b", "a.b", &"a".repeat(64)] {
            assert!(namespace_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["shop", "kube-system", "a", "0", &"a".repeat(63)] {
            assert_eq!(namespace_problem(good), None, "{good:?}");
        }
    }
}
