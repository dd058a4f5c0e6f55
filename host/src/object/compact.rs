//! Member names every object repeats, stored as one byte each.
//!
//! JSON text never holds a raw byte below 0x20 other than tab, newline and return: strings
//! must escape them and nothing else may be one. So those bytes are free to stand for the
//! names written in every object's metadata: `"ownerReferences":` takes one byte of the
//! stored text instead of 18. The raw decoder writes them where a key is written plainly (no
//! escape, no space before the colon), outside the `spec` and `status` values; every reader
//! that needs JSON text gets it back, byte for byte, through [`expand`]. Four more bytes stand
//! for whole members: `name` and `namespace` of `metadata`, whose values the object's key
//! holds already, and an owner reference's `"controller":true` and
//! `"blockOwnerDeletion":true`.
//!
//! A metadata-only pod as the benchmarks generate it is stored in 312 bytes instead of 513
//! (docs/BENCHMARKS.md, section 4).

use std::borrow::Cow;

/// Declares the names and their bytes, both ways, and a constant in [`read`] for each name
/// given one.
macro_rules! names {
    ($($byte:literal => $name:literal $(as $id:ident)?,)*) => {
        /// The bytes of the names the decoder reads members by.
        pub(super) mod read {
            $($(pub(in crate::object) const $id: u8 = $byte;)?)*
        }

        /// The byte standing for the member name `name`, when it has one: the name's length
        /// and first letter pick the one name it can be, then it is compared once.
        pub(super) fn code(name: &str) -> Option<u8> {
            let (len, first) = (name.len(), *name.as_bytes().first()?);
            let byte = $(if len == $name.len() && first == $name.as_bytes()[0] {
                $byte
            } else)* {
                return None;
            };
            same(self::name(byte)?.as_bytes(), name.as_bytes()).then_some(byte)
        }

        /// The member name byte `byte` stands for, when it stands for one.
        fn name(byte: u8) -> Option<&'static str> {
            match byte {
                $($byte => Some($name),)*
                _ => None,
            }
        }
    };
}

// Bytes 0x01 to 0x19 but tab (0x09), newline (0x0a) and return (0x0d), which may be
// whitespace between tokens; 0x00 is left alone.
names! {
    0x01 => "metadata",
    0x02 => "spec",
    0x03 => "status",
    0x04 => "name" as NAME,
    0x05 => "generateName",
    0x06 => "namespace" as NAMESPACE,
    0x07 => "uid" as UID,
    0x08 => "resourceVersion" as RESOURCE_VERSION,
    0x0b => "generation",
    0x0c => "creationTimestamp",
    0x0e => "deletionTimestamp",
    0x0f => "deletionGracePeriodSeconds",
    0x10 => "labels" as LABELS,
    0x11 => "annotations" as ANNOTATIONS,
    0x12 => "ownerReferences" as OWNER_REFERENCES,
    0x13 => "finalizers",
    0x14 => "managedFields" as MANAGED_FIELDS,
    0x15 => "apiVersion" as API_VERSION,
    0x16 => "kind" as KIND,
    0x17 => "controller" as CONTROLLER,
    0x18 => "blockOwnerDeletion" as BLOCK_OWNER_DELETION,
    0x19 => "selfLink",
}

/// True when `a` and `b` are the same bytes, compared eight at a time without a call (names
/// are short; a call to `memcmp` per member cost more than the comparison).
fn same(a: &[u8], b: &[u8]) -> bool {
    let word = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
    };
    if a.len() != b.len() {
        return false;
    }
    if a.len() < 8 {
        return a.iter().zip(b).all(|(x, y)| x == y);
    }
    // Words from the start, and the last (overlapping) one.
    (0..a.len() - 7)
        .step_by(8)
        .chain([a.len() - 8])
        .all(|at| word(a, at) == word(b, at))
}

/// Stands for `metadata.name` with its value, the object's name.
pub(super) const OBJECT_NAME: u8 = 0x1a;
/// Stands for `metadata.namespace` with its value, the object's namespace (never empty).
pub(super) const OBJECT_NAMESPACE: u8 = 0x1b;
/// Stands for the member `"controller":true`.
pub(super) const CONTROLLER: u8 = 0x1c;
/// Stands for the member `"blockOwnerDeletion":true`.
pub(super) const BLOCKS_DELETION: u8 = 0x1d;

/// The whole member `byte` stands for, when it stands for one with a fixed value.
fn fixed_member(byte: u8) -> Option<&'static str> {
    match byte {
        CONTROLLER => Some(r#""controller":true"#),
        BLOCKS_DELETION => Some(r#""blockOwnerDeletion":true"#),
        _ => None,
    }
}

/// The object a text belongs to: what [`OBJECT_NAME`] and [`OBJECT_NAMESPACE`] stand for.
#[derive(Clone, Copy)]
pub(super) struct Whose<'a> {
    /// The object's name.
    pub name: &'a str,
    /// The object's namespace, empty when cluster-scoped.
    pub namespace: &'a str,
}

/// True when `byte` may stand for a name (is not something JSON text holds).
fn is_code(byte: u8) -> bool {
    byte < 0x20 && !matches!(byte, b'\t' | b'\n' | b'\r')
}

/// The bytes a name's key takes written out: `"name":`.
pub(super) fn written_len(name: &str) -> usize {
    name.len() + 3
}

/// Where the first byte standing for a name is in `b`: 16 bytes at a time, so the long
/// stretches without one (the `spec` and `status` values) cost about a copy.
#[cfg(target_arch = "x86_64")]
fn first_code(b: &[u8]) -> Option<usize> {
    use crate::object::scan::sse;
    let mut at = 0;
    while let Some(chunk) = b.get(at..).and_then(<[u8]>::first_chunk::<16>) {
        let mut below = sse::below_0x20(sse::load(chunk));
        while below != 0 {
            let k = below.trailing_zeros() as usize;
            if is_code(chunk[k]) {
                return Some(at + k);
            }
            below &= below - 1;
        }
        at += 16;
    }
    let rest = b.get(at..)?;
    rest.iter().position(|&c| is_code(c)).map(|k| at + k)
}

/// Where the first byte standing for a name is in `b`.
#[cfg(not(target_arch = "x86_64"))]
fn first_code(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| is_code(c))
}

/// `text` (of the object `whose`) with every byte standing for a name written out;
/// borrowed when it has none.
pub(super) fn expand<'a>(text: &'a str, whose: Whose<'_>) -> Cow<'a, str> {
    match first_code(text.as_bytes()) {
        None => Cow::Borrowed(text),
        Some(first) => {
            let mut out = String::with_capacity(text.len() + 256);
            out.push_str(&text[..first]);
            expand_into(&text[first..], whose, &mut out);
            Cow::Owned(out)
        }
    }
}

/// Appends `text` (of the object `whose`) to `out` with every byte standing for a name
/// written out.
pub(super) fn expand_into(text: &str, whose: Whose<'_>, out: &mut String) {
    let mut rest = text;
    while let Some(at) = first_code(rest.as_bytes()) {
        out.push_str(&rest[..at]);
        let byte = rest.as_bytes()[at];
        let member = match byte {
            OBJECT_NAME => Some(("name", whose.name)),
            OBJECT_NAMESPACE => Some(("namespace", whose.namespace)),
            _ => None,
        };
        match (member, name(byte)) {
            _ if let Some(member) = fixed_member(byte) => out.push_str(member),
            (Some((key, value)), _) => {
                out.push('"');
                out.push_str(key);
                out.push_str("\":\"");
                out.push_str(value);
                out.push('"');
            }
            (None, Some(name)) => {
                out.push('"');
                out.push_str(name);
                out.push_str("\":");
            }
            // Never written by the decoder; kept as it is.
            (None, None) => out.push_str(&rest[at..=at]),
        }
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_has_its_own_byte_that_json_never_holds() {
        let mut seen = std::collections::BTreeSet::new();
        for byte in 0..=u8::MAX {
            if let Some(n) = name(byte) {
                assert!(is_code(byte), "{byte:#x} may be in JSON text");
                assert_eq!(code(n), Some(byte), "{n}");
                assert!(seen.insert(n), "{n} twice");
            }
        }
        assert!(seen.len() >= 22);
        for (byte, n) in [
            (read::NAME, "name"),
            (read::NAMESPACE, "namespace"),
            (read::UID, "uid"),
            (read::RESOURCE_VERSION, "resourceVersion"),
            (read::LABELS, "labels"),
            (read::ANNOTATIONS, "annotations"),
            (read::OWNER_REFERENCES, "ownerReferences"),
            (read::MANAGED_FIELDS, "managedFields"),
            (read::API_VERSION, "apiVersion"),
            (read::KIND, "kind"),
            (read::CONTROLLER, "controller"),
            (read::BLOCK_OWNER_DELETION, "blockOwnerDeletion"),
        ] {
            assert_eq!(code(n), Some(byte), "{n}");
        }
        // Same length and first letter, other bytes: no name.
        for other in [
            "nbme",
            "namespacf",
            "resourceVersioo",
            "metadatb",
            "deletionGracePeriodSecondz",
        ] {
            assert_eq!(code(other), None, "{other}");
        }
        for byte in [OBJECT_NAME, OBJECT_NAMESPACE, CONTROLLER, BLOCKS_DELETION] {
            assert!(is_code(byte) && name(byte).is_none());
        }
        assert_eq!(code("nodeName"), None);
    }

    #[test]
    fn expanding_writes_each_key_back() {
        let whose = Whose {
            name: "web-1",
            namespace: "shop",
        };
        let coded = format!(
            "{{{}{{{},{},{}[{{{}\"a\",{},{}\"b\"}}]}},\"x\":\"\\t\"}}",
            char::from(0x01),
            char::from(OBJECT_NAME),
            char::from(OBJECT_NAMESPACE),
            char::from(0x12),
            char::from(0x04),
            char::from(CONTROLLER),
            char::from(0x07)
        );
        assert_eq!(
            expand(&coded, whose),
            r#"{"metadata":{"name":"web-1","namespace":"shop","ownerReferences":[{"name":"a","controller":true,"uid":"b"}]},"x":"\t"}"#
        );
        let plain = "{\n\t\"a\": 1\r\n}";
        assert!(matches!(expand(plain, whose), Cow::Borrowed(p) if p == plain));
        // Found at every offset against the 16-byte chunks, among blanks.
        for at in 0..40 {
            let mut text = " \t\n\r".repeat(12);
            text.insert(at, char::from(0x07));
            assert_eq!(first_code(text.as_bytes()), Some(at));
        }
        assert_eq!(first_code(" \t\n\r".repeat(12).as_bytes()), None);
    }
}
