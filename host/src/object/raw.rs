//! Objects decoded straight from the bytes a server sent: the metadata read without building a
//! JSON tree, dropped fields cut out of the text, everything else kept as sent.
//!
//! This is the fast path for well-formed input. Anything it does not expect (a field of the
//! wrong type, a duplicate key, an escaped key it must cut) makes it give up, and the caller
//! decodes the object through a JSON tree instead, which also names what is wrong.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use std::sync::Arc;

use crate::gvk::{Gvk, split_api_version};
use crate::object::{Fields, KubeObject, LAST_APPLIED_ANNOTATION, OwnerRef, Transform};

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Member<'a>,
    #[serde(borrow, default)]
    kind: Member<'a>,
    #[serde(borrow)]
    metadata: Mapping<Meta<'a>>,
}

/// A `T` read only from a JSON mapping (serde also reads a struct from a list).
struct Mapping<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Mapping<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, m: M) -> Result<T, M::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(m))
            }
        }
        d.deserialize_map(Visit(PhantomData)).map(Mapping)
    }
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    // `Text`, not `Cow`: serde borrows a `Cow` only when it is the field's whole type.
    #[serde(borrow, default)]
    namespace: Option<Text<'a>>,
    #[serde(borrow, default)]
    uid: Option<Text<'a>>,
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: Option<Text<'a>>,
    #[serde(borrow, default)]
    labels: Option<Labels<'a>>,
    #[serde(rename = "ownerReferences", borrow, default)]
    owner_references: Option<Vec<Mapping<Owner<'a>>>>,
    #[serde(rename = "managedFields", borrow, default)]
    managed_fields: Member<'a>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
}

/// A member's raw value, `null` included (an `Option` would read `null` as absent).
#[derive(Default)]
struct Member<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Member<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&'a RawValue>::deserialize(d).map(|raw| Member(Some(raw)))
    }
}

/// A string borrowed from the text unless it has escapes.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// Labels in the order sent.
struct Labels<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Labels<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Labels<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping of strings to strings")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Self::Value, M::Error> {
                let mut labels = Vec::with_capacity(m.size_hint().unwrap_or(0));
                while let Some((Text(k), Text(v))) = m.next_entry::<Text<'de>, Text<'de>>()? {
                    labels.push((k, v));
                }
                Ok(Labels(labels))
            }
        }
        d.deserialize_map(Visit)
    }
}

#[derive(Deserialize)]
struct Owner<'a> {
    #[serde(rename = "apiVersion", borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(default)]
    controller: Option<bool>,
}

/// The annotations as raw values: only their count and the last-applied one matter here.
struct Annotations<'a> {
    count: usize,
    last_applied: Option<&'a RawValue>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Annotations<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Annotations<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Self::Value, M::Error> {
                let mut out = Annotations {
                    count: 0,
                    last_applied: None,
                };
                while let Some(key) = m.next_key::<Cow<'de, str>>()? {
                    let value: &'de RawValue = m.next_value()?;
                    out.count += 1;
                    if key == LAST_APPLIED_ANNOTATION {
                        if out.last_applied.is_some() {
                            return Err(serde::de::Error::custom("duplicate annotation"));
                        }
                        out.last_applied = Some(value);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Decodes the object in `text`, whose type is `gvk` when the text does not say (list items
/// omit it); `None` when this path cannot.
pub(super) fn decode(
    text: &str,
    gvk: Option<&Arc<Gvk>>,
    transform: &Transform,
) -> Option<KubeObject> {
    let text = text.trim();
    // serde also reads a struct from a list: only mappings are objects and metadata.
    let mapping = |t: &str| t.starts_with('{');
    if !mapping(text) {
        return None;
    }
    let top: Top = serde_json::from_str(text).ok()?;
    let meta = top.metadata.0;
    let (api_version, kind) = (named(&top.api_version)?, named(&top.kind)?);
    let gvk = match (&api_version, &kind, gvk) {
        (Some(api_version), Some(kind), Some(gvk))
            if *kind == gvk.kind
                && split_api_version(api_version) == (&gvk.group, &gvk.version) =>
        {
            gvk.clone()
        }
        (Some(api_version), Some(kind), _) if !api_version.is_empty() && !kind.is_empty() => {
            Arc::new(Gvk::from_api_version(api_version, kind))
        }
        (None, None, Some(gvk)) => gvk.clone(),
        _ => return None,
    };
    if meta.name.is_empty() {
        return None;
    }
    // The members to drop: the type (the object's `gvk` keeps it), then what the transform
    // drops.
    let mut members: Vec<Range<usize>> = Vec::new();
    for (member, key) in [(&top.api_version, "apiVersion"), (&top.kind, "kind")] {
        if let Member(Some(raw)) = member {
            members.push(span(text, raw, key)?);
        }
    }
    if transform.drop_managed_fields
        && let Member(Some(managed)) = meta.managed_fields
    {
        members.push(span(text, managed, "managedFields")?);
    }
    if transform.drop_last_applied
        && let Some(raw) = meta.annotations
    {
        let annotations: Annotations = serde_json::from_str(raw.get()).ok()?;
        let others = annotations.count - usize::from(annotations.last_applied.is_some());
        if others == 0 {
            // The tree path removes an empty (or emptied) `annotations` too.
            members.push(span(text, raw, "annotations")?);
        } else if let Some(last_applied) = annotations.last_applied {
            members.push(span(text, last_applied, LAST_APPLIED_ANNOTATION)?);
        }
    }
    let cuts = with_commas(text, members)?;
    // Allocated at its final length, so keeping it as a boxed str copies nothing more.
    let cut: usize = cuts.iter().map(|c| c.len()).sum();
    let mut body = String::with_capacity(text.len().checked_sub(cut)?);
    let mut at = 0;
    for cut in &cuts {
        body.push_str(text.get(at..cut.start)?);
        at = cut.end;
    }
    body.push_str(text.get(at..)?);
    let labels: Vec<(&str, &str)> = meta
        .labels
        .iter()
        .flat_map(|l| l.0.iter())
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    let owners = meta.owner_references.unwrap_or_default();
    let fields = Fields {
        namespace: meta.namespace.as_ref().map(|t| t.0.as_ref()),
        name: &meta.name,
        uid: meta.uid.as_ref().map_or("", |t| t.0.as_ref()),
        resource_version: meta.resource_version.as_ref().map_or("", |t| t.0.as_ref()),
        labels,
        owners: owners
            .iter()
            .map(|Mapping(o)| OwnerRef {
                api_version: &o.api_version,
                kind: &o.kind,
                name: &o.name,
                uid: &o.uid,
                controller: o.controller == Some(true),
            })
            .collect(),
    };
    // Where a string borrowed from `text` lies in the stored text: less the cuts before it
    // (metadata strings are never inside a cut; one that is stays unlocated).
    let locate = |s: &str| -> Option<usize> {
        let start = (s.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
        let end = start.checked_add(s.len()).filter(|&e| e <= text.len())?;
        let mut stored = start;
        for cut in &cuts {
            if cut.end <= start {
                stored = stored.checked_sub(cut.len())?;
            } else if cut.start < end {
                return None;
            }
        }
        Some(stored)
    };
    KubeObject::assemble(gvk, fields, body.into_boxed_str(), locate).ok()
}

/// A type member's string: none when absent, `None` (not an object) when it is no string.
fn named<'a>(member: &Member<'a>) -> Option<Option<Cow<'a, str>>> {
    match member.0 {
        None => Some(None),
        Some(raw) => serde_json::from_str::<Text<'a>>(raw.get())
            .ok()
            .map(|t| Some(t.0)),
    }
}

/// Where the member whose value is `value` (a slice of `text`) and whose key is `key` lies,
/// from its key to the end of its value.
fn span(text: &str, value: &RawValue, key: &str) -> Option<Range<usize>> {
    let value = value.get();
    let start = (value.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start + value.len();
    if end > text.len() {
        return None;
    }
    let before = text.get(..start)?.trim_end();
    let before = before.strip_suffix(':')?.trim_end();
    let quoted = format!("\"{key}\"");
    let key_start = before.len().checked_sub(quoted.len())?;
    if before.get(key_start..)? != quoted {
        // An escaped key: leave it to the slow path.
        return None;
    }
    Some(key_start..end)
}

/// The bytes to cut to drop `members` (spans of `text`), each with one separating comma: the
/// one before it, or the one after it when it is the first member of its mapping, or the
/// first left after the cut before it (whose comma after is the one before this).
fn with_commas(text: &str, mut members: Vec<Range<usize>>) -> Option<Vec<Range<usize>>> {
    members.sort_by_key(|r| r.start);
    let mut cuts: Vec<Range<usize>> = Vec::with_capacity(members.len());
    for m in members {
        let ahead = text.get(..m.start)?.trim_end();
        let taken = cuts.last().map_or(0, |c| c.end);
        if taken > m.start {
            return None;
        }
        let cut = if ahead.ends_with(',') && ahead.len() > taken {
            ahead.len() - 1..m.end
        } else if ahead.ends_with('{') || ahead.ends_with(',') {
            let after = text.get(m.end..)?;
            match after.trim_start().strip_prefix(',') {
                Some(following) => m.start..m.end + (after.len() - following.len()),
                None => m.start..m.end,
            }
        } else {
            return None;
        };
        cuts.push(cut);
    }
    Some(cuts)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The object the JSON tree path makes of `text` (stamped with `gvk` if it names none).
    fn by_tree(text: &str, gvk: &Gvk, t: &Transform) -> KubeObject {
        let Value::Object(mut map) = serde_json::from_str(text).expect("json") else {
            panic!("an object");
        };
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(gvk.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(gvk.kind.clone()));
        KubeObject::from_value(Value::Object(map), t).expect("valid")
    }

    /// Decodes `text` both ways and asserts the same object (JSON compared as values).
    fn same(text: &str, t: &Transform) {
        let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
        let fast = decode(text, Some(&gvk), t).unwrap_or_else(|| panic!("fast path: {text}"));
        let tree = by_tree(text, &gvk, t);
        let value = |s: &str| serde_json::from_str::<Value>(s).expect("stored JSON parses");
        let json = fast.json();
        assert_eq!(value(&json), value(&tree.json()), "{text}\n{json}");
        assert!(json.starts_with(r#"{"apiVersion":"#), "{json}");
        // The stored text leaves the type to `gvk`, both ways.
        for o in [&fast, &tree] {
            let body = value(&o.body);
            assert!(
                body.get("apiVersion").is_none() && body.get("kind").is_none(),
                "{body}"
            );
        }
        assert_eq!(metadata(&fast), metadata(&tree), "{text}");
        if !text.contains('\\') {
            assert!(fast.meta.in_json(), "strings copied from {text}");
        }
    }

    /// Everything but the JSON text, as read through the accessors.
    fn metadata(o: &KubeObject) -> String {
        format!(
            "{:?} {:?} {:?} {} {} {:?} {:?}",
            o.gvk(),
            o.namespace(),
            o.name(),
            o.uid(),
            o.resource_version(),
            o.labels().collect::<Vec<_>>(),
            o.owners().collect::<Vec<_>>()
        )
    }

    #[test]
    fn the_fast_path_makes_the_object_the_tree_path_makes() {
        let drop = Transform::default();
        let keep = Transform::keep_everything();
        let cases = [
            // Managed fields first, in the middle, last; annotations alone and with others.
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"managedFields":[{"manager":"k"}],"name":"a","namespace":"ns","uid":"u","resourceVersion":"3"},"spec":{}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":[],"labels":{"b":"2","a":"1"}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":[{"x":{"y":"}"}}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":null,"annotations":null}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{},"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"a\":1}"}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":{"x":"1","kubectl.kubernetes.io/last-applied-configuration":"{}","y":"2"},"managedFields":[]}}"#,
            // Whitespace as a pretty-printer writes it.
            "{\n  \"apiVersion\": \"v1\",\n  \"kind\": \"Pod\",\n  \"metadata\": {\n    \"managedFields\" : [ ] ,\n    \"name\": \"a\"\n  }\n}\n",
            // A list item: no type, stamped; empty metadata members.
            r#"{"metadata":{"name":"a","namespace":"","labels":null,"ownerReferences":null}}"#,
            // A list item whose metadata strings lie after a cut and the type stamped in.
            r#"{"metadata":{"managedFields":[{"m":"x"}],"name":"a","uid":"u-1","labels":{"k":"v"},"ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"n","uid":"u-n"}]}}"#,
            // The type in other places: kind first, last, around other members, alone.
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#,
            r#"{"metadata":{"name":"a"},"apiVersion":"v1","kind":"Pod"}"#,
            r#"{"apiVersion":"v1","spec":{},"kind":"Pod","metadata":{"name":"a"},"status":{}}"#,
            r#"{ "metadata" : {"name":"a"} , "kind" : "Pod" , "x" : 1 , "apiVersion" : "v1" }"#,
            // Escapes and non-ASCII text in values, and an owner.
            r#"{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"w\u00e9b","labels":{"k":"v\"q\\"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"1","controller":true,"blockOwnerDeletion":true}]}}"#,
        ];
        for text in cases {
            same(text, &drop);
            same(text, &keep);
        }
    }

    #[test]
    fn generated_pods_decode_the_same_both_ways() {
        // The last one is over 32 KiB: its metadata's spans take their long form.
        for i in 0..21 {
            let size = if i == 20 { 80_000 } else { 1024 + 200 * i };
            let pod = kubewasm_testenv::generate::pod(i, size, 7);
            let text = pod.to_string();
            same(&text, &Transform::default());
            same(&text, &Transform::keep_everything());
        }
    }

    #[test]
    fn what_the_fast_path_does_not_expect_is_left_to_the_tree_path() {
        let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
        let t = Transform::default();
        for text in [
            // An escaped key it would have to cut.
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managed\u0046ields":[]}}"#,
            // Duplicate keys, wrong types, a missing or empty name, half a type.
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","name":"b"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"k":1}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"k":"1","k":"2"}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[{"kind":"X"}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":""}}"#,
            r#"{"kind":"Pod","metadata":{"name":"a"}}"#,
            r#"[1,2]"#,
            // Lists where mappings belong (serde would read a struct from them).
            r#"["v1","Pod",{"name":"a"}]"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":["a"]}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[["v1","X","n","u"]]}}"#,
            "not json",
        ] {
            assert!(decode(text, Some(&gvk), &t).is_none(), "{text}");
        }
        // Through the public entry point the tree path still decodes what is valid, and
        // names what is not.
        let escaped =
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managed\u0046ields":[]}}"#;
        let o = KubeObject::from_server_json(escaped, &gvk, &t).expect("valid");
        assert!(!o.json().contains("managed"), "{}", o.json());
        let wrong = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"k":1}}}"#;
        let err = KubeObject::from_server_json(wrong, &gvk, &t).expect_err("labels");
        assert!(err.to_string().contains("metadata.labels"), "{err}");
    }
}
