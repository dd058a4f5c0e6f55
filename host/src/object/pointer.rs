//! Reading one value out of an object's JSON text by RFC 6901 pointer, without building the
//! rest: the parser walks to the value, skipping everything else, and stops there.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Longest pointer a plugin may pass.
pub const MAX_POINTER_BYTES: usize = 4096;

/// Why a pointer was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PointerError {
    /// The pointer is not empty and does not start with `/`.
    #[error("JSON pointer {0:?} must be empty or start with '/'")]
    NoSlash(String),
    /// A `~` not followed by `0` or `1`.
    #[error("JSON pointer {0:?} has a '~' not followed by 0 or 1")]
    BadEscape(String),
    /// Over [`MAX_POINTER_BYTES`].
    #[error("JSON pointer of {0} bytes is longer than {MAX_POINTER_BYTES}")]
    TooLong(usize),
}

/// The reference tokens of an RFC 6901 pointer, unescaped.
pub fn tokens(pointer: &str) -> Result<Vec<Cow<'_, str>>, PointerError> {
    if pointer.len() > MAX_POINTER_BYTES {
        return Err(PointerError::TooLong(pointer.len()));
    }
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PointerError::NoSlash(pointer.to_owned()));
    };
    rest.split('/')
        .map(|t| {
            if !t.contains('~') {
                return Ok(Cow::Borrowed(t));
            }
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => out.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(PointerError::BadEscape(pointer.to_owned())),
                    },
                }
            }
            Ok(Cow::Owned(out))
        })
        .collect()
}

/// The value at `tokens` in `json`, or none when nothing is there. `json` must be valid JSON
/// (the cache's objects are).
pub fn lookup(json: &str, tokens: &[Cow<'_, str>]) -> Option<Value> {
    if tokens.is_empty() {
        return serde_json::from_str(json).ok();
    }
    find(json, tokens)
}

/// The JSON text of the value at `tokens` in `json`, as it is written there: what a change
/// filter compares (the API server writes an object's fields in a fixed order, so equal values
/// are equal text).
///
/// `json` must be valid JSON (a stored object's text): members and elements before the one
/// sought are skipped with the decoder's block skipper (`skip.rs`), not parsed, and the walk
/// stops at the value. A key written with escapes on the way is compared by a parse instead.
pub fn raw<'j>(json: &'j str, tokens: &[Cow<'_, str>]) -> Option<&'j str> {
    use crate::object::scan::{self, Refused};
    use crate::object::skip::skip_end;
    if tokens.is_empty() {
        return Some(json);
    }
    let b = json.as_bytes();
    let mut at = scan::skip_ws(b, 0);
    for token in tokens {
        let mut found = None;
        match b.get(at)? {
            b'{' => {
                let mut escaped_key = false;
                // Ended early on purpose (found, or a key to compare by parsing).
                let _ = scan::members_read(json, at, |key, escaped, _, value| {
                    if escaped {
                        escaped_key = true;
                        return Err(Refused);
                    }
                    if key == token.as_ref() {
                        found = Some(value);
                        return Err(Refused);
                    }
                    skip_end(b, value)
                });
                if escaped_key {
                    return raw_parsed(json, tokens);
                }
            }
            b'[' => {
                let index = array_index(token)?;
                let mut n = 0;
                let _ = scan::elements_read(b, at, |element| {
                    if n == index {
                        found = Some(element);
                        return Err(Refused);
                    }
                    n += 1;
                    skip_end(b, element)
                });
            }
            _ => return None,
        }
        at = found?;
    }
    let end = skip_end(b, at).ok()?;
    json.get(at..end)
}

/// An RFC 6901 array index: digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    match token {
        "0" => Some(0),
        t if !t.starts_with('0') && t.bytes().all(|b| b.is_ascii_digit()) => t.parse().ok(),
        _ => None,
    }
}

/// [`raw`] by a parse of the text up to the value.
fn raw_parsed<'j>(json: &'j str, tokens: &[Cow<'_, str>]) -> Option<&'j str> {
    find::<&serde_json::value::RawValue>(json, tokens).map(serde_json::value::RawValue::get)
}

/// The value of type `T` at the non-empty `tokens` in `json`.
fn find<'j, T: de::Deserialize<'j>>(json: &'j str, tokens: &[Cow<'_, str>]) -> Option<T> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(json);
    // Finding the value ends the parse early with an error on purpose: the rest is not read.
    let _ = At {
        tokens,
        found: &found,
    }
    .deserialize(&mut de);
    found.into_inner()
}

/// Walks one level down `tokens`; puts the value found into `found`.
struct At<'t, 'f, T> {
    tokens: &'t [Cow<'t, str>],
    found: &'f RefCell<Option<T>>,
}

/// The error that ends the parse once the value is found.
const FOUND: &str = "found";

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for At<'_, '_, T> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.tokens.split_first() {
            None => {
                *self.found.borrow_mut() = Some(serde::Deserialize::deserialize(d)?);
                Err(de::Error::custom(FOUND))
            }
            Some(_) => d.deserialize_any(self),
        }
    }
}

impl<'de, T: de::Deserialize<'de>> Visitor<'de> for At<'_, '_, T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (first, rest) = self
            .tokens
            .split_first()
            .ok_or_else(|| de::Error::custom(""))?;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == *first {
                return map.next_value_seed(At {
                    tokens: rest,
                    found: self.found,
                });
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (first, rest) = self
            .tokens
            .split_first()
            .ok_or_else(|| de::Error::custom(""))?;
        let Some(index) = array_index(first) else {
            return Ok(());
        };
        for _ in 0..index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(At {
            tokens: rest,
            found: self.found,
        })
        .map(drop)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(json: &Value, pointer: &str) -> Option<Value> {
        let text = json.to_string();
        lookup(&text, &tokens(pointer).expect("valid pointer"))
    }

    #[test]
    fn finds_what_serde_json_pointer_finds() {
        let doc = json!({
            "metadata": {"name": "web", "labels": {"app/name": "x", "t~": "y"}},
            "spec": {"containers": [{"image": "a"}, {"image": "b", "ports": [80, 443]}]},
            "status": {"phase": "Running", "ready": true, "count": 3, "ratio": 0.5, "none": null},
            "": {"empty key": 1}
        });
        for pointer in [
            "",
            "/metadata/name",
            "/metadata/labels/app~1name",
            "/metadata/labels/t~0",
            "/spec/containers/1/image",
            "/spec/containers/1/ports/1",
            "/spec/containers/1/ports/2",
            "/spec/containers/01",
            "/spec/containers/-",
            "/spec",
            "/status/phase",
            "/status/ready",
            "/status/count",
            "/status/ratio",
            "/status/none",
            "/status/phase/deeper",
            "/missing",
            "/",
            "//empty key",
        ] {
            assert_eq!(
                at(&doc, pointer),
                doc.pointer(pointer).cloned(),
                "pointer {pointer:?}"
            );
        }
    }

    #[test]
    fn raw_text_is_the_value_as_written() {
        let text = r#"{"spec":{"a": [1, 2]},"status":{"phase":"Running"}}"#;
        let raw = |p: &str| raw(text, &tokens(p).expect("valid"));
        assert_eq!(raw("/spec"), Some(r#"{"a": [1, 2]}"#));
        assert_eq!(raw("/status/phase"), Some(r#""Running""#));
        assert_eq!(raw("/spec/a/1"), Some("2"));
        assert_eq!(raw("/missing"), None);
    }

    #[test]
    fn skipping_finds_what_parsing_finds() {
        let docs = [
            r#"{"metadata":{"name":"web","labels":{"app/name":"x","t~":"y"}},"spec":{"containers":[{"image":"a"},{"image":"b","ports":[80,443]}]},"status":{"phase":"Running","s":"a \" } ] {","n":null}}"#,
            "{ \"a\" : [ {\"b\" : { \"c\" : [ 1 , \"}\" , [ ] ] } } , 2 ] ,\n \"d\" : {} }",
            r#"{"k\u0065y":1,"key":2,"x":{"\n":3}}"#,
            r#"{"dup":1,"dup":2,"e":[],"f":{},"g":"\\"}"#,
        ];
        let pointers = [
            "",
            "/metadata",
            "/metadata/labels/app~1name",
            "/metadata/labels/t~0",
            "/spec/containers/1/ports/1",
            "/spec/containers/2",
            "/spec/containers/01",
            "/status/s",
            "/status/n",
            "/status/phase/x",
            "/a/0/b/c/1",
            "/a/0/b/c/2",
            "/a/1",
            "/a/-",
            "/d",
            "/key",
            "/x/\n",
            "/dup",
            "/e/0",
            "/f/x",
            "/g",
            "/nothing",
        ];
        for doc in docs {
            for p in pointers {
                let t = tokens(p).expect("valid");
                let expected = if t.is_empty() {
                    Some(doc)
                } else {
                    raw_parsed(doc, &t)
                };
                assert_eq!(raw(doc, &t), expected, "{p} in {doc}");
            }
        }
    }

    #[test]
    fn malformed_pointers_are_refused() {
        assert_eq!(
            tokens("status").expect_err("no slash"),
            PointerError::NoSlash("status".into())
        );
        assert!(matches!(tokens("/a~2"), Err(PointerError::BadEscape(_))));
        assert!(matches!(
            tokens(&"/a".repeat(MAX_POINTER_BYTES)),
            Err(PointerError::TooLong(_))
        ));
    }
}
