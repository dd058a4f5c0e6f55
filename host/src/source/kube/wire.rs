//! What the API server sends, decoded straight into cached objects: list pages and watch lines.
//!
//! Objects are decoded once, from the response bytes: their metadata read and dropped fields
//! cut out of the text as sent (no JSON tree, no detour through typed or dynamic objects), and
//! stamped with their apiVersion and kind, which list items omit.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::gvk::Gvk;
use crate::object::scan::{self, Refused, Scan};
use crate::object::{KubeObject, Transform};

/// The annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One page of a list response, its items decoded.
#[derive(Debug)]
pub struct Page {
    /// resourceVersion and continue token.
    pub metadata: ListMeta,
    /// Each item as a cached object, or why it is not one.
    pub objects: Decoded,
}

/// A page as serde_json reads it, each item copied.
#[derive(Deserialize)]
struct Copied {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

impl Page {
    /// Reads a list response whose items are of type `gvk`. Each item is decoded from the
    /// response's own text as the page is read, in one pass. A page the scanner refuses (say
    /// an item holds a number too large for an `f64`) is read by serde_json instead, so the
    /// items that decode still do, and each other one says what is wrong with it.
    pub fn parse(
        text: &str,
        gvk: &Arc<Gvk>,
        transform: &Transform,
    ) -> Result<Self, serde_json::Error> {
        if let Ok(page) = in_place(text, gvk, transform) {
            return Ok(page);
        }
        let page: Copied = serde_json::from_str(text)?;
        Ok(Page {
            metadata: page.metadata,
            objects: page
                .items
                .iter()
                .map(|i| object(gvk, i.get(), transform))
                .collect(),
        })
    }
}

/// The page in `text`, read by the scanner with its items decoded where they lie.
fn in_place(text: &str, gvk: &Arc<Gvk>, transform: &Transform) -> Scan<Page> {
    let b = text.as_bytes();
    let (mut metadata, mut objects) = (None, None);
    let end = scan::members_read(text, scan::skip_ws(b, 0), |key, escaped, _, value| {
        match (escaped, key) {
            (false, "metadata") if metadata.is_none() => {
                let end = scan::value_end(b, value)?;
                let meta = text.get(value..end).ok_or(Refused)?;
                metadata = Some(serde_json::from_str(meta).map_err(|_| Refused)?);
                Ok(end)
            }
            (false, "items") if objects.is_none() => {
                let (items, end) = items(text, value, gvk, transform)?;
                objects = Some(items);
                Ok(end)
            }
            (false, "metadata" | "items") | (true, _) => Err(Refused),
            _ => scan::value_end(b, value),
        }
    })?;
    if scan::skip_ws(b, end) != b.len() {
        return Err(Refused);
    }
    Ok(Page {
        metadata: metadata.unwrap_or_default(),
        objects: objects.unwrap_or_default(),
    })
}

/// Items decoded, or why each is not an object.
type Decoded = Vec<Result<Arc<KubeObject>, DecodeError>>;

/// The items of the list at `at`, each decoded in place, and the end of the list.
fn items(text: &str, at: usize, gvk: &Arc<Gvk>, transform: &Transform) -> Scan<(Decoded, usize)> {
    let b = text.as_bytes();
    if b.get(at..at + 4) == Some(b"null") {
        return Ok((Vec::new(), at + 4));
    }
    let mut out = Vec::new();
    let end = scan::elements_read(b, at, |item| {
        let (decoded, end) = match KubeObject::from_server_json_at(text, item, gvk, transform) {
            Some((object, end)) => (Ok(Arc::new(object)), end),
            // The tree path decodes it, or names what is wrong.
            None => {
                let end = scan::value_end(b, item)?;
                (
                    object(gvk, text.get(item..end).ok_or(Refused)?, transform),
                    end,
                )
            }
        };
        out.push(decoded);
        Ok(end)
    })?;
    Ok((out, end))
}

/// A list's metadata.
#[derive(Debug, Default, Deserialize)]
pub struct ListMeta {
    /// The version the list is consistent at.
    #[serde(default, rename = "resourceVersion")]
    pub resource_version: Option<String>,
    /// Token for the next page; empty or absent on the last.
    #[serde(default, rename = "continue")]
    pub continue_token: Option<String>,
    /// Present when the server applied the request's shard selector (KEP-5866).
    #[serde(default, rename = "shardInfo")]
    pub shard_info: Option<serde::de::IgnoredAny>,
}

/// One line of a watch stream.
#[derive(Debug, Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// A decoded watch line.
#[derive(Debug)]
pub enum WatchEvent {
    /// ADDED.
    Added(Arc<KubeObject>),
    /// MODIFIED.
    Modified(Arc<KubeObject>),
    /// DELETED, with the object's final state.
    Deleted(Arc<KubeObject>),
    /// BOOKMARK: the stream is current up to this version.
    Bookmark {
        /// The version.
        resource_version: String,
        /// True on the bookmark that ends a streaming list's initial events.
        initial_events_end: bool,
    },
    /// ERROR, carrying a Status.
    Error(Status),
}

/// The parts of a `Status` the reflector acts on.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct Status {
    /// HTTP-like code: 410 is Gone, 403 Forbidden...
    #[serde(default)]
    pub code: u16,
    /// Machine-readable reason, such as `Expired`.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

/// Why a line or item could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON of the expected shape.
    #[error("malformed watch line: {0}")]
    Json(serde_json::Error),
    /// A type this decoder does not know.
    #[error("unknown watch event type {0:?}")]
    UnknownType(String),
    /// The object is not a valid Kubernetes object.
    #[error("{0}")]
    Object(String),
}

/// Makes a cached object of a list item or watched object of type `gvk`.
pub fn object(
    gvk: &Arc<Gvk>,
    text: &str,
    transform: &Transform,
) -> Result<Arc<KubeObject>, DecodeError> {
    KubeObject::from_server_json(text, gvk, transform)
        .map(Arc::new)
        .map_err(|e| DecodeError::Object(e.to_string()))
}

/// Decodes one watch line.
pub fn watch_line(
    gvk: &Arc<Gvk>,
    line: &str,
    transform: &Transform,
) -> Result<WatchEvent, DecodeError> {
    // The layout the API server writes is split without reading the object twice; the object
    // is then read (and checked) once, by its own decoder. Anything else, or an object that
    // does not decode that way, is read as a whole.
    if let Some((kind, text)) = split_line(line)
        && let Ok(event) = event(gvk, kind, text, transform)
    {
        return Ok(event);
    }
    let Line { kind, object: raw } = serde_json::from_str(line).map_err(DecodeError::Json)?;
    event(gvk, &kind, raw.get(), transform)
}

/// The type and object text of a line laid out as `{"type":"T","object":{...}}`, as the API
/// server writes it; `None` for any other layout. The object text is not checked here.
fn split_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim_end().strip_prefix(r#"{"type":""#)?;
    let (kind, rest) = rest.split_once('"')?;
    if kind.contains('\\') {
        return None;
    }
    let object = rest.strip_prefix(r#","object":"#)?.strip_suffix('}')?;
    Some((kind, object))
}

/// The event of type `kind` carrying the object in `text`.
fn event(
    gvk: &Arc<Gvk>,
    kind: &str,
    text: &str,
    transform: &Transform,
) -> Result<WatchEvent, DecodeError> {
    Ok(match kind {
        "ADDED" => WatchEvent::Added(object(gvk, text, transform)?),
        "MODIFIED" => WatchEvent::Modified(object(gvk, text, transform)?),
        "DELETED" => WatchEvent::Deleted(object(gvk, text, transform)?),
        "BOOKMARK" => {
            let map: Map<String, Value> = serde_json::from_str(text).map_err(DecodeError::Json)?;
            let meta = map.get("metadata");
            let resource_version = meta
                .and_then(|m| m.get("resourceVersion"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let initial_events_end = meta
                .and_then(|m| m.get("annotations"))
                .and_then(|a| a.get(INITIAL_EVENTS_END))
                .and_then(Value::as_str)
                == Some("true");
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            }
        }
        "ERROR" => WatchEvent::Error(serde_json::from_str(text).map_err(DecodeError::Json)?),
        _ => return Err(DecodeError::UnknownType(kind.to_owned())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> Arc<Gvk> {
        Arc::new(Gvk::new("", "v1", "ConfigMap"))
    }

    #[test]
    fn lines_in_other_layouts_decode_alike_and_broken_ones_are_refused() -> Result<(), DecodeError>
    {
        let t = Transform::default();
        let object = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"}}"#;
        let key = |line: &str| match watch_line(&cm(), line, &t) {
            Ok(WatchEvent::Modified(o)) => Ok(format!("{}@{}", o.key(), o.resource_version())),
            Ok(other) => panic!("not a modification: {other:?}"),
            Err(e) => Err(e),
        };
        for line in [
            format!(r#"{{"type":"MODIFIED","object":{object}}}"#),
            format!("{{\"type\":\"MODIFIED\",\"object\":{object}}}\r\n"),
            format!(r#"{{ "type" : "MODIFIED", "object" : {object} }}"#),
            format!(r#"{{"object":{object},"type":"MODIFIED"}}"#),
            format!(r#"{{"type":"MODIFIED","object":{object},"extra":{{"a":1}}}}"#),
            format!(r#"{{"type":"MODIFI\u0045D","object":{object}}}"#),
        ] {
            assert_eq!(key(&line)?, "ns/a@5", "{line}");
        }
        for line in [
            format!(r#"{{"type":"MODIFIED","object":{object}}}}}"#),
            format!(r#"{{"type":"MODIFIED","object":{object}}} x"#),
            format!(r#"{{"type":"MODIFIED","object":{object}"#),
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"a"}},"#.to_owned(),
        ] {
            assert!(key(&line).is_err(), "accepted {line}");
        }
        Ok(())
    }

    #[test]
    fn decodes_every_kind_of_watch_line() -> Result<(), DecodeError> {
        let t = Transform::default();
        let added = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"5","managedFields":[{"manager":"x"}]}}}"#;
        let WatchEvent::Added(o) = watch_line(&cm(), added, &t)? else {
            panic!("an add");
        };
        assert_eq!((o.key(), o.resource_version()), ("ns/a", "5"));
        assert!(
            !o.json().contains("managedFields"),
            "transformed: {}",
            o.json()
        );

        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        assert!(matches!(
            watch_line(&cm(), bookmark, &t)?,
            WatchEvent::Bookmark { resource_version, initial_events_end: true } if resource_version == "9"
        ));

        let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        let WatchEvent::Error(status) = watch_line(&cm(), gone, &t)? else {
            panic!("an error");
        };
        assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));

        assert!(matches!(
            watch_line(&cm(), r#"{"type":"WHAT","object":{}}"#, &t),
            Err(DecodeError::UnknownType(_))
        ));
        assert!(matches!(
            watch_line(&cm(), "not json", &t),
            Err(DecodeError::Json(_))
        ));
        Ok(())
    }

    #[test]
    fn pages_are_read_in_place_or_by_serde_json_when_the_scanner_refuses()
    -> Result<(), Box<dyn std::error::Error>> {
        let t = Transform::default();
        let names = |page: &Page| -> Vec<Result<String, String>> {
            page.objects
                .iter()
                .map(|o| match o {
                    Ok(o) => Ok(o.name().to_owned()),
                    Err(e) => Err(e.to_string()),
                })
                .collect()
        };
        let good = r#" {"kind":"ConfigMapList","metadata":{"resourceVersion":"9"},"items":[
            {"metadata":{"name":"a"}}, {"metadata":{"name":"b","labels":{"k":1}}},
            {"metadata":{"name":"c"}}]} "#;
        let page = Page::parse(good, &cm(), &t)?;
        assert_eq!(page.metadata.resource_version.as_deref(), Some("9"));
        let read = names(&page);
        assert_eq!(
            (&read[0], &read[2]),
            (&Ok("a".to_owned()), &Ok("c".to_owned()))
        );
        // An item the fast path refuses is named by the tree path; the others still decode.
        assert!(
            matches!(&read[1], Err(e) if e.contains("labels")),
            "{read:?}"
        );
        // An item with a number no f64 holds: serde_json reads the page, the item is named.
        let huge = r#"{"metadata":{"resourceVersion":"9"},"items":[{"metadata":{"name":"a"}},
            {"metadata":{"name":"b"},"data":{"x":1e400}}]}"#;
        let page = Page::parse(huge, &cm(), &t)?;
        assert_eq!(page.metadata.resource_version.as_deref(), Some("9"));
        let read = names(&page);
        assert_eq!(read[0], Ok("a".to_owned()));
        assert!(read[1].is_err(), "{read:?}");
        // No items, null items, and what is no page.
        for empty in [r#"{"metadata":{}}"#, r#"{"metadata":{},"items":null}"#] {
            assert!(Page::parse(empty, &cm(), &t)?.objects.is_empty(), "{empty}");
        }
        for broken in [
            "",
            r#"{"items":[1,]}"#,
            r#"{"items":{}}"#,
            r#"{"metadata":{}} x"#,
        ] {
            assert!(Page::parse(broken, &cm(), &t).is_err(), "{broken}");
        }
        Ok(())
    }

    #[test]
    fn list_items_get_their_type_stamped() -> Result<(), Box<dyn std::error::Error>> {
        let page = Page::parse(
            r#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"7","continue":"abc"},
                "items":[{"metadata":{"name":"a","namespace":"ns"}}]}"#,
            &cm(),
            &Transform::default(),
        )?;
        assert_eq!(page.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(page.metadata.continue_token.as_deref(), Some("abc"));
        let o = page.objects.into_iter().next().ok_or("an item")??;
        assert_eq!(*o.gvk(), *cm());
        assert!(o.json().contains(r#""kind":"ConfigMap""#), "{}", o.json());
        Ok(())
    }
}
