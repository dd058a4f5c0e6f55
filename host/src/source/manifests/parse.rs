//! Manifest files into documents, the way kubectl reads them: YAML streams split on `---`
//! lines (each document on its own, so one bad document costs only itself), JSON files as a
//! stream of values, `kind: List` expanded. Scalars resolve as kubectl's YAML reader resolves
//! them (`0644` is octal, `yes` and `on` are booleans, `<<` merges). As with kubectl, a YAML
//! syntax error ends the file: the documents before it are read, those after it are not. A
//! `List` with an item that is not an object is refused whole, as kubectl refuses it.
//!
//! A deliberate difference: a key written twice in one mapping, YAML or JSON, is an error
//! naming it, where kubectl (1.32) keeps the last value; a reader that keeps one of the two
//! would pick for the author.
//!
//! One known difference: in a flow sequence, a plain scalar ending in `:` just before `]` or
//! `,` (`[fd00::]`) is read the YAML 1.2 way, as a one-entry mapping; quote such values.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// One object (or the reason it is not one) at a place in a file.
#[derive(Debug)]
pub struct Item {
    /// Where it is: `document N (line L)`, with `item M` inside a list.
    pub place: String,
    /// The object, or why the document or item could not be read.
    pub value: Result<Value, String>,
    /// For an item that is not an object: what it may stand for (each document it costs, with
    /// the kind and name its text names, where it names them); empty for an object.
    pub names: Vec<Named>,
}

/// The kind and name a document names, each where it can be read: `(None, None)` may be any
/// object.
pub type Named = (Option<String>, Option<String>);

/// Whether `path`'s `text` is read as JSON: a `.json` file whose content starts as JSON does
/// (kubectl decides by content, so a `.json` file holding YAML is read as YAML).
pub fn is_json(path: &std::path::Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "json")
        && text
            .trim_start_matches('\u{feff}')
            .trim_start()
            .starts_with(['{', '['])
}

/// An `apiVersion` as the API server takes it: `version`, or `group/version` with both parts.
pub fn check_api_version(api_version: &str) -> Result<(), BadApiVersion> {
    let parts: Vec<&str> = api_version.split('/').collect();
    let well_formed = match parts.as_slice() {
        [version] => !version.is_empty(),
        [group, version] => !group.is_empty() && !version.is_empty(),
        _ => false,
    };
    if well_formed {
        Ok(())
    } else {
        Err(BadApiVersion(crate::text::cut(api_version.to_owned(), 80)))
    }
}

/// An `apiVersion` the API server would not take (its first 80 bytes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("apiVersion {0:?} is not `version` or `group/version` (for example v1 or apps/v1)")]
pub struct BadApiVersion(pub String);

/// One document: its first line, its value or why not, and (when it could not be read) what
/// it may stand for.
type Document = (usize, Result<Value, String>, Vec<Named>);

/// The kind and name a YAML document's text names at its top level, read line by line
/// without parsing it (it may not parse).
fn names(chunk: &str) -> Named {
    let scalar = |v: &str| {
        let v = v.split(" #").next().unwrap_or("").trim();
        let v = v.trim_matches(['"', '\'']);
        (!v.is_empty()).then(|| v.to_owned())
    };
    let (mut kind, mut name, mut in_metadata) = (None, None, false);
    for line in chunk.lines() {
        let indent = line.len() - line.trim_start().len();
        let content = line.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        if indent == 0 {
            in_metadata = content.starts_with("metadata:");
            if let Some(v) = content.strip_prefix("kind:") {
                kind = scalar(v);
            }
        } else if in_metadata
            && name.is_none()
            && let Some(v) = content.strip_prefix("name:")
        {
            name = scalar(v);
        }
    }
    (kind, name)
}

/// What a parsed document that is not a valid object names.
pub fn names_of(value: &Value) -> Named {
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).map(str::to_owned);
    (text("/kind"), text("/metadata/name"))
}

/// Every item of a manifest file's text, in order; `json` picks the JSON reader.
pub fn items(text: &str, json: bool) -> Vec<Item> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let documents = if json {
        json_documents(text)
    } else {
        yaml_documents(text)
    };
    let mut out = Vec::new();
    for (n, (line, parsed, named)) in documents.into_iter().enumerate() {
        let place = format!("document {} (line {line})", n + 1);
        match parsed {
            Ok(Value::Null) => {}
            Ok(Value::Object(mut map)) if is_list(&map) => {
                let Some(Value::Array(list)) = map.remove("items") else {
                    continue;
                };
                if let Some((m, item)) = list.iter().enumerate().find(|(_, i)| !i.is_object()) {
                    let names = list
                        .iter()
                        .filter(|i| i.is_object())
                        .map(names_of)
                        .collect();
                    out.push(Item {
                        place,
                        value: Err(format!(
                            "item {} of the {} is not an object but {}: the whole list is refused, as kubectl refuses it",
                            m + 1,
                            map.get("kind").and_then(Value::as_str).unwrap_or("List"),
                            crate::object::json_type(item)
                        )),
                        names,
                    });
                    continue;
                }
                for (m, item) in list.into_iter().enumerate() {
                    out.push(Item {
                        place: format!("{place} item {}", m + 1),
                        value: Ok(item),
                        names: Vec::new(),
                    });
                }
            }
            Ok(value) => out.push(Item {
                place,
                value: Ok(value),
                names: Vec::new(),
            }),
            Err(e) => out.push(Item {
                place,
                value: Err(e),
                names: named,
            }),
        }
    }
    out
}

/// The JSON values of `text` one after another, each with its first line; reading stops at
/// the first error (JSON has no separator to resume at).
fn json_documents(text: &str) -> Vec<Document> {
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Strict>();
    // Lines are counted on from the previous document, not from the top each time.
    let (mut counted, mut line) = (0, 1);
    loop {
        let rest = &text[stream.byte_offset()..];
        let start = text.len() - rest.trim_start().len();
        line += text[counted..start].matches('\n').count();
        counted = start;
        match stream.next() {
            None => return out,
            Some(Ok(Strict(value))) => out.push((line, Ok(value), Vec::new())),
            Some(Err(e)) => {
                // What follows cannot be read: it may stand for anything.
                out.push((line, Err(e.to_string()), vec![(None, None)]));
                return out;
            }
        }
    }
}

/// A JSON value read with a key written twice in one object refused, naming the key.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(Strict(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate mapping key: {key}{}",
                    crate::yaml::DUPLICATE_NOTE
                )));
            }
            let Strict(value) = map.next_value()?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// The YAML documents of `text`, split on separator lines as kubectl's reader does, each
/// parsed on its own, up to the first YAML syntax error (kubectl stops there too: what follows
/// is not read). Documents holding only comments or blanks are left out.
fn yaml_documents(text: &str) -> Vec<Document> {
    let mut out = Vec::new();
    let chunks = split_documents(text);
    for (i, (line, chunk)) in chunks.iter().enumerate() {
        let (line, chunk) = (*line, *chunk);
        if blank(chunk) {
            continue;
        }
        // Only a separator line with more on it starts a piece with `---`.
        let parsed = if chunk.starts_with("---") {
            Err(format!(
                "line {line}: content after `---` on the separator line (kubectl refuses it \
                 too): start the document on the next line"
            ))
        } else {
            crate::yaml::from_str_at::<Value>(chunk, line)
        };
        let Err(e) = parsed else {
            out.push((line, parsed, Vec::new()));
            continue;
        };
        if chunk.starts_with("---") || crate::yaml::well_formed(chunk) {
            out.push((line, Err(e), vec![names(chunk)]));
            continue;
        }
        // A syntax error: the documents after it are not read, and may stand for what they
        // name.
        let rest = &chunks[i + 1..];
        let unread = rest.iter().filter(|(_, c)| !blank(c)).count();
        let e = if unread == 0 {
            e
        } else {
            format!(
                "{e}; the {unread} document{} after it {} not read (kubectl stops at a YAML syntax error too)",
                if unread == 1 { "" } else { "s" },
                if unread == 1 { "is" } else { "are" },
            )
        };
        let named = std::iter::once(chunk)
            .chain(rest.iter().map(|(_, c)| *c))
            .map(names)
            .collect();
        out.push((line, Err(e), named));
        break;
    }
    out
}

/// Whether a document holds only comments and blank lines.
fn blank(chunk: &str) -> bool {
    chunk
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
}

/// Splits at lines that start with `---`, as kubectl's reader does. One followed by blanks or
/// a comment only separates; one with more on it (which kubectl refuses) also starts the next
/// piece, so that piece alone is refused. Each piece comes with the line (from 1) it starts on.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut start, mut start_line, mut offset) = (0, 1, 0);
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if let Some(rest) = line.strip_prefix("---") {
            out.push((start_line, &text[start..offset]));
            let rest = rest.trim();
            if rest.is_empty() || rest.starts_with('#') {
                start = offset + line.len();
                start_line = n + 2;
            } else {
                start = offset;
                start_line = n + 1;
            }
        }
        offset += line.len();
    }
    out.push((start_line, &text[start..]));
    out
}

/// True for `kind: List` (or any `*List`) documents with an `items` array.
fn is_list(map: &serde_json::Map<String, Value>) -> bool {
    map.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && map.get("items").is_some_and(Value::is_array)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(text: &str) -> Vec<Result<Value, String>> {
        items(text, false).into_iter().map(|i| i.value).collect()
    }

    #[test]
    fn content_after_a_separator_costs_only_its_document() {
        let text = "a: 1\n---\nb: 2\n--- {c: 3}\nd: 4\n---\ne: 5\n";
        let items = items(text, false);
        let values: Vec<_> = items.iter().map(|i| i.value.clone()).collect();
        assert_eq!(values.len(), 4, "{values:?}");
        assert_eq!(values[0], Ok(json!({"a": 1})));
        assert_eq!(values[1], Ok(json!({"b": 2})));
        let error = values[2].clone().expect_err("the `--- {c: 3}` document");
        assert!(
            error.starts_with("line 4: content after `---` on the separator line"),
            "{error}"
        );
        assert_eq!(items[2].place, "document 3 (line 4)");
        assert_eq!(values[3], Ok(json!({"e": 5})));
    }

    #[test]
    fn a_syntax_error_ends_the_file_as_kubectl_stops_there() {
        let text = "a: 1\n---\nkind: Secret\nb: [oops\n--- # a comment\nkind: ConfigMap\nmetadata:\n  name: c\n";
        let items = items(text, false);
        assert_eq!(items.len(), 2, "{items:?}");
        assert_eq!(items[0].value, Ok(json!({"a": 1})));
        assert_eq!(items[1].place, "document 2 (line 3)");
        let error = items[1].value.clone().expect_err("the syntax error");
        assert!(
            error.ends_with(
                "; the 1 document after it is not read (kubectl stops at a YAML syntax error too)"
            ),
            "{error}"
        );
        // It may stand for what it and the unread documents name.
        assert_eq!(
            items[1].names,
            [
                (Some("Secret".to_owned()), None),
                (Some("ConfigMap".to_owned()), Some("c".to_owned()))
            ]
        );
    }

    #[test]
    fn a_document_that_is_yaml_but_no_object_costs_only_itself() {
        let text = "a: 1\n---\nmetadata:\n  name: x\n  name: y\n---\nc: 3\n";
        let items = items(text, false);
        assert_eq!(items.len(), 3, "{items:?}");
        assert!(items[1].value.is_err());
        assert_eq!(items[2].value, Ok(json!({"c": 3})));
    }

    #[test]
    fn a_list_with_an_item_that_is_no_object_is_refused_whole() {
        let text = "kind: List\nitems:\n- {kind: ConfigMap, metadata: {name: a}}\n- just text\n";
        let items = items(text, false);
        assert_eq!(items.len(), 1, "{items:?}");
        let error = items[0].value.clone().expect_err("refused");
        assert!(
            error.starts_with("item 2 of the List is not an object but a string"),
            "{error}"
        );
        assert_eq!(
            items[0].names[0],
            (Some("ConfigMap".into()), Some("a".into()))
        );
    }

    #[test]
    fn scalars_resolve_as_kubectl_resolves_them() {
        let text = "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\nflag: yes\nips: [1.2.3.4, 2001:db8::1]\nmode: 0755\nport: 8080\n";
        assert_eq!(
            values(text),
            [Ok(json!({
                "base": {"x": 1, "y": 2},
                "derived": {"x": 1, "y": 3},
                "flag": true,
                "ips": ["1.2.3.4", "2001:db8::1"],
                "mode": 0o755,
                "port": 8080,
            }))]
        );
    }

    #[test]
    fn a_duplicate_key_is_an_error_naming_it_and_its_line() {
        let [Err(e)] = &values("---\nmetadata:\n  name: a\n  name: b\n")[..] else {
            panic!("one error");
        };
        assert!(
            e.starts_with("line 4 column ")
                && e.contains("duplicate mapping key: name (kubectl keeps the last value;"),
            "{e}"
        );
    }

    #[test]
    fn a_duplicate_json_key_is_an_error_naming_it_and_its_place() {
        let text = "{\"a\": 1}\n{\"metadata\": {\"name\": \"a\",\n \"name\": \"b\"}}\n";
        let read = items(text, true);
        assert_eq!(read.len(), 2, "{read:?}");
        assert_eq!(read[0].value, Ok(json!({"a": 1})));
        assert_eq!(read[1].place, "document 2 (line 2)");
        let e = read[1].value.clone().expect_err("the duplicate");
        assert!(
            e.starts_with("duplicate mapping key: name (kubectl keeps the last value;")
                && e.contains(" at line 3 column "),
            "{e}"
        );
        // Every value kind still reads as serde_json reads it.
        let all = r#"{"n": null, "b": true, "i": -3, "u": 18446744073709551615, "f": 1.5,
            "big": 123456789012345678901234, "s": "x\u00e9", "l": [1, [2], {}]}"#;
        assert_eq!(
            items(all, true)[0].value,
            Ok(serde_json::from_str::<Value>(all).expect("valid"))
        );
    }

    #[test]
    fn a_byte_order_mark_and_empty_files_are_fine() {
        assert_eq!(values("\u{feff}a: 1\n"), [Ok(json!({"a": 1}))]);
        assert!(items("", true).is_empty());
        assert!(items(" \n", true).is_empty());
        assert!(items("# nothing\n---\n", false).is_empty());
    }

    #[test]
    fn json_streams_and_lists_are_expanded() {
        let list = r#"{"kind": "List", "items": [{"a": 1}, {"b": 2}]}
{"c": 3}"#;
        let items = items(list, true);
        let places: Vec<&str> = items.iter().map(|i| i.place.as_str()).collect();
        assert_eq!(
            places,
            [
                "document 1 (line 1) item 1",
                "document 1 (line 1) item 2",
                "document 2 (line 2)"
            ]
        );
    }
}
