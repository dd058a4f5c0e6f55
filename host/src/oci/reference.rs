//! `oci://registry/repository[:tag][@sha256:digest]`: where a plugin artifact lives.

use std::fmt;

/// A content digest, `sha256:` and 64 lowercase hex digits (the only algorithm accepted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 hex>`; anything else is refused with what was wrong.
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(ReferenceError::NotSha256(truncate(text).to_owned()));
        };
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(ReferenceError::NotHex(truncate(text).to_owned()));
        }
        Ok(Self(text.to_owned()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        let hash = sha2::Sha256::digest(bytes);
        let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
        Self(format!("sha256:{hex}"))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why text is not a digest or an `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// A digest of another algorithm, or none.
    #[error("{0:?} is not a digest: expected sha256:<64 hex digits>")]
    NotSha256(String),
    /// A sha256 digest of the wrong length or case.
    #[error("{0:?} is not a digest: expected sha256:<64 lowercase hex digits>")]
    NotHex(String),
    /// A reference with a part out of shape.
    #[error("{text:?}: {why}")]
    Malformed {
        /// The reference, shortened.
        text: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// A parsed `oci://` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `host` or `host:port`.
    pub registry: String,
    /// `path/to/repo`, lowercase.
    pub repository: String,
    /// The tag, when the reference names one (`latest` when it names neither tag nor digest).
    pub tag: Option<String>,
    /// The digest, when the reference pins one.
    pub digest: Option<Digest>,
}

impl Reference {
    /// Parses `oci://host[:port]/repo[:tag][@sha256:...]` (the `oci://` prefix is optional).
    pub fn parse(text: &str) -> Result<Self, ReferenceError> {
        let fail = |why: &'static str| {
            Err(ReferenceError::Malformed {
                text: truncate(text).to_owned(),
                why,
            })
        };
        if text.len() > 1024 {
            return fail("longer than 1024 bytes");
        }
        let rest = text.strip_prefix("oci://").unwrap_or(text);
        let (rest, digest) = match rest.split_once('@') {
            Some((name, digest)) => (name, Some(Digest::parse(digest)?)),
            None => (rest, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return fail("expected registry/repository, as in oci://ghcr.io/org/plugin:1.0");
        };
        if !valid_registry(registry) {
            return fail("the registry must be a host name or address, with an optional :port");
        }
        // A tag follows the last ':' after the last '/'.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => (repo, Some(tag)),
            _ => (path, None),
        };
        if !valid_repository(repository) {
            return fail(
                "the repository must be lowercase letters, digits and separators (. _ __ - /)",
            );
        }
        if let Some(tag) = tag
            && !valid_tag(tag)
        {
            return fail("a tag is 1 to 128 of letters, digits, _ . - and starts with no . or -");
        }
        let tag = match (tag, &digest) {
            (None, None) => Some("latest".to_owned()),
            (tag, _) => tag.map(str::to_owned),
        };
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// What to ask the registry for: the digest when pinned, else the tag.
    pub fn target(&self) -> &str {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => digest.as_str(),
            (None, Some(tag)) => tag,
            (None, None) => "latest",
        }
    }

    /// This repository at `digest` (tag dropped).
    pub fn at(&self, digest: &Digest) -> Self {
        Self {
            tag: None,
            digest: Some(digest.clone()),
            ..self.clone()
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

fn truncate(text: &str) -> &str {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn valid_registry(registry: &str) -> bool {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || registry.starts_with('[') => {
            (host, Some(port))
        }
        _ => (registry, None),
    };
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    };
    host_ok && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

/// Distribution's path grammar: components of `[a-z0-9]+` joined by `.`, `_`, `__` or `-`+.
fn valid_repository(repository: &str) -> bool {
    !repository.is_empty()
        && repository.len() <= 255
        && repository.split('/').all(|component| {
            let bytes = component.as_bytes();
            let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            if bytes.is_empty() || !alnum(&bytes[0]) || !alnum(&bytes[bytes.len() - 1]) {
                return false;
            }
            let mut i = 0;
            while i < bytes.len() {
                if alnum(&bytes[i]) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < bytes.len() && !alnum(&bytes[i]) {
                    i += 1;
                }
                let separator = &component[start..i];
                let dashes = separator.bytes().all(|b| b == b'-');
                if !(matches!(separator, "." | "_" | "__") || dashes) {
                    return false;
                }
            }
            true
        })
}

fn valid_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_name_registry_repository_tag_and_digest() {
        let r = Reference::parse("oci://ghcr.io/org/team/pod-phase:1.2.0").expect("tag");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("ghcr.io", "org/team/pod-phase", Some("1.2.0"))
        );
        assert_eq!(r.target(), "1.2.0");
        let r = Reference::parse(&format!("127.0.0.1:5000/plugins/a@sha256:{HEX}")).expect("pin");
        assert_eq!(
            (r.registry.as_str(), r.tag.as_deref(), r.target()),
            ("127.0.0.1:5000", None, format!("sha256:{HEX}").as_str())
        );
        let r = Reference::parse("oci://localhost:5000/a").expect("no tag");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let r = Reference::parse(&format!("oci://h/a:v1@sha256:{HEX}")).expect("both");
        assert_eq!(r.target(), format!("sha256:{HEX}"));
        assert_eq!(r.to_string(), format!("oci://h/a:v1@sha256:{HEX}"));
        assert_eq!(
            r.at(&Digest::of(b"x")).to_string(),
            format!("oci://h/a@{}", Digest::of(b"x"))
        );
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        for (text, expected) in [
            ("oci://ghcr.io", "expected registry/repository"),
            ("oci://gh cr.io/a", "the registry must be"),
            ("oci://h:99999/a", "the registry must be"),
            ("oci://h/Upper", "the repository must be"),
            ("oci://h/a//b", "the repository must be"),
            ("oci://h/a-:1", "the repository must be"),
            ("oci://h/a:.bad", "a tag is"),
            ("oci://h/a@sha256:abc", "not a digest"),
            ("oci://h/a@md5:abc", "not a digest"),
        ] {
            let error = Reference::parse(text).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let long = format!("oci://h/{}", "a".repeat(2000));
        assert!(
            Reference::parse(&long)
                .expect_err("long")
                .to_string()
                .contains("longer than 1024")
        );
    }

    #[test]
    fn digests_are_sha256_in_lowercase_hex() {
        assert_eq!(
            Digest::of(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert!(Digest::parse(&format!("sha256:{}", HEX.to_uppercase())).is_err());
        assert_eq!(
            Digest::parse(&format!("sha256:{HEX}")).expect("ok").hex(),
            HEX
        );
    }
}
