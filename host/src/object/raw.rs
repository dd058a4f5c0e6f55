//! Objects decoded straight from the bytes a server sent: the metadata read without building a
//! JSON tree, dropped fields cut out of the text, everything else kept as sent.
//!
//! This is the fast path for well-formed input. It checks all of the text it keeps (`scan`),
//! so it takes nothing the tree path would refuse there; managedFields it drops are checked
//! only as far as finding their end needs (`skip`). Anything it does not expect (a member of
//! the wrong type, a repeated one, an escaped key where keys are compared, a number serde_json
//! may not hold) makes it give up, and the caller decodes the object through a JSON tree
//! instead, which also names what is wrong.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use crate::gvk::{Gvk, split_api_version};
use crate::object::compact::{self, read};
use crate::object::scan::{self, Member, Refused, Scan};
use crate::object::skip;
use crate::object::{
    Fields, Keep, KubeObject, LAST_APPLIED_ANNOTATION, OwnerRef, Sections, Transform,
};

/// An owner reference as the decoder reads it.
struct Owner<'a> {
    api_version: Cow<'a, str>,
    kind: Cow<'a, str>,
    name: Cow<'a, str>,
    uid: Cow<'a, str>,
    controller: bool,
}

/// The top-level members the decoder reads, each at most once.
#[derive(Default)]
struct Top<'a> {
    api_version: Option<Member<'a>>,
    kind: Option<Member<'a>>,
    /// What was read from `metadata`.
    metadata: Option<Meta<'a>>,
}

/// What the decoder reads from `metadata`, borrowed from the text where it has no escapes.
#[derive(Default)]
struct Meta<'a> {
    name: Option<Cow<'a, str>>,
    namespace: Option<Cow<'a, str>>,
    uid: Option<Cow<'a, str>>,
    resource_version: Option<Cow<'a, str>>,
    /// Labels in the order sent.
    labels: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    owners: Vec<Owner<'a>>,
    /// The `managedFields` member, key to value.
    managed_fields: Option<Range<usize>>,
    /// What was read from the `annotations` member, when a mapping.
    annotations: Option<Annotations>,
    /// Members read so far, one bit each, so a repeated one is refused.
    seen: u8,
    /// Where the whole `metadata` value lies in the text.
    span: Range<usize>,
}

/// What the decoder reads from `annotations`: where the member lies, how many there are and
/// where the last-applied one lies.
#[derive(Default)]
struct Annotations {
    /// From the key's opening quote to the end of the mapping.
    span: Range<usize>,
    count: usize,
    last_applied: Option<Range<usize>>,
}

/// Puts `member` into `slot`, refusing a second one.
fn once<'a>(slot: &mut Option<Member<'a>>, member: Member<'a>) -> Scan<()> {
    if slot.replace(member).is_some() {
        return Err(Refused);
    }
    Ok(())
}

/// A member's key, refused when it has escapes: keys are compared as written, so an escaped
/// `kind` must not pass for some other key.
fn key<'a>(member: &Member<'a>) -> Scan<&'a str> {
    if member.escaped {
        Err(Refused)
    } else {
        Ok(member.key)
    }
}

/// Member keys to store as the one byte standing for their name, in text order.
type Names = Vec<(Range<usize>, u8)>;

/// The byte standing for the name of the member whose unescaped key `key` starts at `at` and
/// whose value starts at `value` (see `compact`), when it has one; the member is added to
/// `names` when its key is also written plainly (no space before the colon). Members are then
/// told apart by that byte, without comparing their key again. Callers refuse escaped keys
/// first.
fn name(names: &mut Names, key: &str, at: usize, value: usize) -> Option<u8> {
    let code = compact::code(key)?;
    if value - at == compact::written_len(key) {
        names.push((at..value, code));
    }
    Some(code)
}

/// Makes the key just noted in `names`, of the member from `at` to `end`, the whole member,
/// standing for `code`.
fn whole(names: &mut Names, at: usize, end: usize, code: u8) {
    if let Some(last) = names.last_mut()
        && last.0.start == at
    {
        *last = (at..end, code);
    }
}

/// True when a string read is written plainly and is not empty: the object's key then holds
/// it as written.
fn in_key(value: Option<&Cow<str>>) -> bool {
    matches!(value, Some(Cow::Borrowed(v)) if !v.is_empty())
}

/// Reads the members of the `metadata` mapping at `at`, checking all of it once (but
/// `managedFields` only as far as finding its end needs when `skip_managed_fields`: it is
/// dropped), noting the names to store as one byte in `names`; where it ends.
fn meta<'a>(
    text: &'a str,
    at: usize,
    skip_managed_fields: bool,
    names: &mut Names,
) -> Scan<(Meta<'a>, usize)> {
    let b = text.as_bytes();
    let mut meta = Meta::default();
    let null = |value: usize| b.get(value..value + 4) == Some(b"null");
    let end = scan::members_read(text, at, |key, escaped, at, value| {
        // Keys are compared as written, so an escaped one must not pass for another.
        if escaped {
            return Err(Refused);
        }
        let bit = match name(names, key, at, value) {
            Some(read::NAME) => 0,
            Some(read::NAMESPACE) => 1,
            Some(read::UID) => 2,
            Some(read::RESOURCE_VERSION) => 3,
            Some(read::LABELS) => 4,
            Some(read::OWNER_REFERENCES) => 5,
            Some(read::MANAGED_FIELDS) => 6,
            Some(read::ANNOTATIONS) => 7,
            _ => return scan::value_end(b, value),
        };
        if meta.seen & (1 << bit) != 0 {
            return Err(Refused);
        }
        meta.seen |= 1 << bit;
        // Strings, labels, owners and annotations are read as they are checked; every other
        // value is checked first.
        let end = match bit {
            0..=3 if !null(value) => {
                let (read, end) = scan::string_value(text, value)?;
                let slot = match bit {
                    0 => &mut meta.name,
                    1 => &mut meta.namespace,
                    2 => &mut meta.uid,
                    _ => &mut meta.resource_version,
                };
                *slot = Some(read);
                end
            }
            0 => return Err(Refused),
            4 if !null(value) => labels(text, value, &mut meta.labels)?,
            5 if !null(value) => owners(text, value, &mut meta.owners, names)?,
            7 if !null(value) => {
                let (read, end) = annotations(text, value)?;
                meta.annotations = Some(Annotations {
                    span: at..end,
                    ..read
                });
                end
            }
            6 if skip_managed_fields => skip::skip_end(b, value)?,
            _ => scan::value_end(b, value)?,
        };
        match bit {
            0 if in_key(meta.name.as_ref()) => whole(names, at, end, compact::OBJECT_NAME),
            1 if in_key(meta.namespace.as_ref()) => {
                whole(names, at, end, compact::OBJECT_NAMESPACE);
            }
            6 => meta.managed_fields = Some(at..end),
            _ => {}
        }
        Ok(end)
    })?;
    Ok((meta, end))
}

/// Reads the owner references list at `at` into `owners`, noting the names to store as one
/// byte in `names`; where it ends. Each is a mapping with the four strings, `controller` a
/// boolean or null, every key at most once and none escaped (the tree path reads what this
/// refuses).
fn owners<'a>(
    text: &'a str,
    at: usize,
    owners: &mut Vec<Owner<'a>>,
    names: &mut Names,
) -> Scan<usize> {
    scan::elements_read(text.as_bytes(), at, |item| {
        let mut strings: [Option<Cow<'a, str>>; 4] = Default::default();
        let mut controller = None;
        let b = text.as_bytes();
        let end = scan::members_read(text, item, |key, escaped, at, value| {
            if escaped {
                return Err(Refused);
            }
            let code = name(names, key, at, value);
            let slot = match code {
                Some(read::API_VERSION) => 0,
                Some(read::KIND) => 1,
                Some(read::NAME) => 2,
                Some(read::UID) => 3,
                Some(read::CONTROLLER) if controller.is_none() => {
                    let end = scan::value_end(b, value)?;
                    controller = match text.get(value..end) {
                        Some("true") => Some(true),
                        Some("false" | "null") => Some(false),
                        _ => return Err(Refused),
                    };
                    if controller == Some(true) {
                        whole(names, at, end, compact::CONTROLLER);
                    }
                    return Ok(end);
                }
                Some(read::CONTROLLER) => return Err(Refused),
                Some(read::BLOCK_OWNER_DELETION) => {
                    let end = scan::value_end(b, value)?;
                    if text.get(value..end) == Some("true") {
                        whole(names, at, end, compact::BLOCKS_DELETION);
                    }
                    return Ok(end);
                }
                _ => return scan::value_end(b, value),
            };
            if strings[slot].is_some() {
                return Err(Refused);
            }
            let (read, end) = scan::string_value(text, value)?;
            strings[slot] = Some(read);
            Ok(end)
        })?;
        let [Some(api_version), Some(kind), Some(name), Some(uid)] = strings else {
            return Err(Refused);
        };
        owners.push(Owner {
            api_version,
            kind,
            name,
            uid,
            controller: controller == Some(true),
        });
        Ok(end)
    })
}

/// Reads the labels mapping at `at` into `labels` (strings to strings, keys unescaped);
/// where it ends.
fn labels<'a>(
    text: &'a str,
    at: usize,
    labels: &mut Vec<(Cow<'a, str>, Cow<'a, str>)>,
) -> Scan<usize> {
    scan::members_read(text, at, |key, escaped, at, value| {
        let key = if escaped {
            let quoted = at..at + key.len() + 2;
            scan::string_at(text, quoted)?
        } else {
            Cow::Borrowed(key)
        };
        let (value, end) = scan::string_value(text, value)?;
        labels.push((key, value));
        Ok(end)
    })
}

/// Reads the annotations mapping at `at` (its span left empty); where it ends. Every value
/// must be a string (the tree path names any other) and no key may have escapes (keys are
/// compared as written).
fn annotations(text: &str, at: usize) -> Scan<(Annotations, usize)> {
    let mut read = Annotations::default();
    let end = scan::members(text, at, |m| {
        if text.as_bytes().get(m.value.start) != Some(&b'"') {
            return Err(Refused);
        }
        read.count += 1;
        if key(&m)? == LAST_APPLIED_ANNOTATION && read.last_applied.replace(m.span).is_some() {
            return Err(Refused);
        }
        Ok(())
    })?;
    Ok((read, end))
}

/// Decodes the object in `text`, whose type is `gvk` when the text does not say (list items
/// omit it); `None` when this path cannot.
pub(super) fn decode(
    text: &str,
    gvk: Option<&Arc<Gvk>>,
    transform: &Transform,
) -> Option<KubeObject> {
    let text = text.trim_matches([' ', '\t', '\n', '\r']);
    decode_at(text, 0, gvk, transform)
        .filter(|(_, end)| *end == text.len())
        .map(|(object, _)| object)
}

/// Decodes the object that starts at `start` in `text` (an item of a list page, say), with
/// where it ends; `None` when this path cannot.
pub(crate) fn decode_at(
    text: &str,
    start: usize,
    gvk: Option<&Arc<Gvk>>,
    transform: &Transform,
) -> Option<(KubeObject, usize)> {
    let b = text.as_bytes();
    let mut top = Top::default();
    // Where `spec` and `status` lie in `text` (metadata's span is kept with what was read).
    let mut spec = None;
    let mut status = None;
    // What the transform keeps besides metadata (`None`: everything), and the members it
    // cuts; a `spec` or `status` cut whole is absent.
    let kept = transform.keep.paths();
    let kept: Option<Vec<&[String]>> = kept
        .as_ref()
        .map(|paths| paths.iter().map(Vec::as_slice).collect());
    let mut projected: Vec<Range<usize>> = Vec::new();
    let (mut spec_cut, mut status_cut) = (false, false);
    // Room for a pod's names, so the list is not grown as they are noted.
    let mut names = Names::with_capacity(32);
    // Checks the whole object, each byte once: what the decoder does not read is still JSON
    // serde_json takes.
    let end = scan::members_read(text, start, |key, escaped, at, value| {
        if escaped {
            return Err(Refused);
        }
        let slot = match key {
            "apiVersion" => &mut top.api_version,
            "kind" => &mut top.kind,
            "metadata" if top.metadata.is_some() => return Err(Refused),
            "metadata" => {
                name(&mut names, key, at, value);
                let (mut meta, end) = meta(text, value, transform.drop_managed_fields, &mut names)?;
                meta.span = value..end;
                top.metadata = Some(meta);
                return Ok(end);
            }
            "spec" | "status" => {
                name(&mut names, key, at, value);
                let end = scan::value_end(b, value)?;
                let (slot, cut) = if key == "spec" {
                    (&mut spec, &mut spec_cut)
                } else {
                    (&mut status, &mut status_cut)
                };
                if slot.replace(value..end).is_some() {
                    return Err(Refused);
                }
                if let Some(kept) = &kept {
                    *cut = project(text, key, at..end, value, kept, &mut projected)?;
                }
                return Ok(end);
            }
            _ => {
                let end = scan::value_end(b, value)?;
                if let Some(kept) = &kept {
                    project(text, key, at..end, value, kept, &mut projected)?;
                }
                return Ok(end);
            }
        };
        let end = scan::value_end(b, value)?;
        let member = Member {
            key,
            escaped,
            span: at..end,
            value: value..end,
        };
        once(slot, member)?;
        Ok(end)
    })
    .ok()?;
    // A type member's string: none when absent, `None` (not an object) when it is no string.
    let type_name = |m: &Option<Member>| -> Option<Option<Cow<str>>> {
        match m {
            None => Some(None),
            Some(m) => scan::string_at(text, m.value.clone()).ok().map(Some),
        }
    };
    let (api_version, kind) = (type_name(&top.api_version)?, type_name(&top.kind)?);
    let gvk = match (&api_version, &kind, gvk) {
        // A metadata watch's objects say `PartialObjectMetadata`: they are of the type asked.
        (_, _, Some(gvk)) if transform.keep == Keep::MetadataOnly => gvk.clone(),
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
    let meta = top.metadata?;
    let name = meta.name.as_ref()?;
    if name.is_empty() {
        return None;
    }
    // The members to drop: the type (the object's `gvk` keeps it), then what the transform
    // drops.
    let mut members: Vec<Range<usize>> = [&top.api_version, &top.kind]
        .into_iter()
        .flatten()
        .map(|m| m.span.clone())
        .collect();
    if transform.drop_managed_fields {
        members.extend(meta.managed_fields.clone());
    }
    // The last-applied one, or the whole member when nothing else is left in it (as the tree
    // path does).
    if transform.drop_last_applied
        && let Some(a) = &meta.annotations
    {
        if a.count == usize::from(a.last_applied.is_some()) {
            members.push(a.span.clone());
        } else {
            members.extend(a.last_applied.clone());
        }
    }
    members.extend(projected);
    if spec_cut {
        spec = None;
    }
    if status_cut {
        status = None;
    }
    let cuts = with_commas(text, members)?;
    let edits = edits(cuts, names);
    // Allocated at its final length, so keeping it as a boxed str copies nothing more.
    let cut: usize = edits.iter().map(Edit::shrinks).sum();
    let mut body = String::with_capacity((end - start).checked_sub(cut)?);
    let mut at = start;
    for edit in &edits {
        body.push_str(text.get(at..edit.range.start)?);
        if let Some(code) = edit.code {
            body.push(char::from(code));
        }
        at = edit.range.end;
    }
    body.push_str(text.get(at..end)?);
    let labels: Vec<(&str, &str)> = meta
        .labels
        .iter()
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    let fields = Fields {
        namespace: meta.namespace.as_deref(),
        name,
        uid: meta.uid.as_deref().unwrap_or(""),
        resource_version: meta.resource_version.as_deref().unwrap_or(""),
        labels,
        owners: meta
            .owners
            .iter()
            .map(|o| OwnerRef {
                api_version: &o.api_version,
                kind: &o.kind,
                name: &o.name,
                uid: &o.uid,
                controller: o.controller,
            })
            .collect(),
    };
    // Bytes the edits ending at or before `at` took, and the first edit after them. The
    // edits are apart and in order, and strings are looked up near the last one (the labels
    // all in one gap between edits, an owner's strings a few edits apart), so the count is
    // walked from the last one's.
    let last_gap = std::cell::Cell::new(0);
    let before = |at: usize| -> (usize, Option<&Edit>) {
        let mut i = last_gap.get();
        while i > 0 && edits.get(i - 1).is_some_and(|e| e.range.end > at) {
            i -= 1;
        }
        while edits.get(i).is_some_and(|e| e.range.end <= at) {
            i += 1;
        }
        last_gap.set(i);
        let next = edits.get(i);
        (next.map_or(cut, |e| e.taken_before), next)
    };
    // Where a string borrowed from the object's text lies in the stored text: less what the
    // edits before it took (metadata strings are never inside an edit; one that is stays
    // unlocated).
    let locate = |s: &str| -> Option<usize> {
        let at = (s.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
        let until = at.checked_add(s.len()).filter(|&e| e <= end)?;
        let (taken, next) = before(at);
        if next.is_some_and(|e| e.range.start < until) {
            return None;
        }
        at.checked_sub(start)?.checked_sub(taken)
    };
    // A span of `text` in the stored text: less what the edits before it took (none falls
    // inside a section's start, and those inside metadata are before its end).
    let stored = |span: &Range<usize>| -> Option<Range<usize>> {
        let from = span
            .start
            .checked_sub(start)?
            .checked_sub(before(span.start).0)?;
        let to = span
            .end
            .checked_sub(start)?
            .checked_sub(before(span.end).0)?;
        Some(from..to)
    };
    let mut sections = Sections::default();
    for (name, span) in [
        ("metadata", Some(meta.span.clone())),
        ("spec", spec),
        ("status", status),
    ] {
        match span {
            // A span that cannot be placed stays unknown: lookups read the whole text.
            Some(span) => {
                if let Some(range) = stored(&span) {
                    sections.note(name, Some(range));
                }
            }
            None => sections.note(name, None),
        }
    }
    let mut object =
        KubeObject::assemble(gvk, fields, body.into_boxed_str(), locate, sections).ok()?;
    object.compact = edits.iter().any(|e| e.code.is_some());
    Some((object, end))
}

/// Adds to `cuts` the member `key` (spanning `span`, its value at `value`) when `kept` (paths
/// from this level down) has nothing under it, or its own members that none of the paths
/// reach; true when the whole member is cut. Only a mapping is cut into: an array or a
/// scalar on a path is kept whole.
fn project(
    text: &str,
    key: &str,
    span: Range<usize>,
    value: usize,
    kept: &[&[String]],
    cuts: &mut Vec<Range<usize>>,
) -> Scan<bool> {
    let below: Vec<&[String]> = kept
        .iter()
        .filter(|p| p.first().is_some_and(|t| t == key))
        .map(|p| &p[1..])
        .collect();
    if below.is_empty() {
        cuts.push(span);
        return Ok(true);
    }
    if below.iter().any(|p| p.is_empty()) || text.as_bytes().get(value) != Some(&b'{') {
        return Ok(false);
    }
    scan::members(text, value, |m| {
        // Keys are compared as written.
        if m.escaped {
            return Err(Refused);
        }
        project(text, m.key, m.span, m.value.start, &below, cuts).map(drop)
    })?;
    Ok(false)
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

/// A range of the object's text that is not stored as it is: cut, or a member's key written
/// as the one byte standing for its name (`compact`).
struct Edit {
    range: Range<usize>,
    code: Option<u8>,
    /// Bytes the edits before this one took.
    taken_before: usize,
}

impl Edit {
    /// Bytes fewer in the stored text.
    fn shrinks(&self) -> usize {
        self.range.len() - usize::from(self.code.is_some())
    }
}

/// The cuts (sorted, apart) and the names (in text order) as one list in text order; a name
/// inside a cut is cut with it.
fn edits(cuts: Vec<Range<usize>>, names: Names) -> Vec<Edit> {
    let mut edits: Vec<Edit> = Vec::with_capacity(cuts.len() + names.len());
    let mut taken = 0;
    let mut push = |range: Range<usize>, code: Option<u8>| {
        let edit = Edit {
            range,
            code,
            taken_before: taken,
        };
        taken += edit.shrinks();
        edits.push(edit);
    };
    let mut n = 0;
    for cut in cuts {
        while let Some((range, code)) = names.get(n).filter(|(r, _)| r.start < cut.start) {
            push(range.clone(), Some(*code));
            n += 1;
        }
        while names.get(n).is_some_and(|(r, _)| r.start < cut.end) {
            n += 1;
        }
        push(cut, None);
    }
    for (range, code) in names.into_iter().skip(n) {
        push(range, Some(code));
    }
    edits
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
            let body = value(&o.text());
            assert!(
                body.get("apiVersion").is_none() && body.get("kind").is_none(),
                "{body}"
            );
        }
        assert_eq!(metadata(&fast), metadata(&tree), "{text}");
        // Every section is noted by the fast path, and lookups that start at one find what a
        // parse of the whole stored text finds, present or absent.
        for o in [&fast, &tree] {
            for name in ["metadata", "spec", "status"] {
                assert!(o.section(name).is_some(), "{name} noted: {text}");
            }
        }
        for p in [
            "/metadata",
            "/metadata/name",
            "/metadata/labels",
            "/metadata/annotations",
            "/metadata/managedFields",
            "/spec",
            "/spec/containers/0/image",
            "/status",
            "/status/phase",
            "/status/conditions/0",
            "/x",
        ] {
            let tokens = crate::object::pointer::tokens(p).expect("pointer");
            for o in [&fast, &tree] {
                let text = o.text();
                assert_eq!(
                    o.raw_field(&tokens).as_deref(),
                    crate::object::pointer::raw(&text, &tokens),
                    "{p} in {text}"
                );
            }
        }
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
            r#"{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"w\u00e9b","labels":{"k":"v\"q\\","e\u0073caped/key":"\u00e9"},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"1","controller":true,"blockOwnerDeletion":true}]}}"#,
            // Owners: a null controller, members the decoder does not read, two of them.
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[{"x":[{}],"uid":"1","name":"n","kind":"K","apiVersion":"v1","controller":null},{"apiVersion":"v1","kind":"K","name":"m","uid":"2","controller":false}]}}"#,
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
    fn projections_cut_the_same_both_ways_and_keep_the_metadata() {
        let keeps = [
            Keep::MetadataOnly,
            Keep::fields(&["/status/phase", "/spec/nodeName"]),
            Keep::fields(&["/status/conditions"]),
            Keep::fields(&["/spec/containers/0/image", "/status"]),
            Keep::fields(&["/nothing/here"]),
        ];
        let mut cases: Vec<String> = (0..6)
            .map(|i| kubewasm_testenv::generate::pod(i, 1024 + 900 * i, 7).to_string())
            .collect();
        cases.push(
            r#"{"apiVersion":"v1","kind":"Pod","spec":{"nodeName":"n"},"metadata":{"name":"a"},"status":{"phase":"P","x":{"y":1}},"z":[1]}"#
                .into(),
        );
        cases
            .push(r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"status":{}}"#.into());
        for keep in &keeps {
            let t = Transform::default().keeping(keep.clone());
            for text in &cases {
                same(text, &t);
                let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
                let o = decode(text, Some(&gvk), &t).expect("decodes");
                let v: Value = serde_json::from_str(&o.json()).expect("json");
                let whole: Value = serde_json::from_str(text).expect("json");
                assert_eq!(v["metadata"]["name"], whole["metadata"]["name"]);
                if *keep == Keep::MetadataOnly {
                    assert!(v.get("spec").is_none() && v.get("status").is_none(), "{v}");
                }
                if keep.holds("/status/phase") {
                    assert_eq!(v["status"]["phase"], whole["status"]["phase"]);
                }
                if !keep.holds("/spec") {
                    assert!(
                        v["spec"].get("containers").is_none()
                            || keep.holds("/spec/containers/0/image"),
                        "{v}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_metadata_watch_object_is_of_the_type_asked() {
        let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
        let t = Transform::default().keeping(Keep::MetadataOnly);
        let text = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","namespace":"n","resourceVersion":"5"}}"#;
        let fast = decode(text, Some(&gvk), &t).expect("decodes");
        assert_eq!(fast.gvk(), &*gvk);
        assert!(
            fast.json()
                .starts_with(r#"{"apiVersion":"v1","kind":"Pod","metadata""#),
            "{}",
            fast.json()
        );
        // The tree path (an escaped key sends it there) says the same.
        let escaped = text.replace(r#""name":"a""#, r#""name":"a","xA":1"#);
        let tree = KubeObject::from_server_json(&escaped, &gvk, &t).expect("decodes");
        assert_eq!(tree.gvk(), &*gvk);
    }

    #[test]
    fn the_fast_path_takes_no_text_serde_json_refuses_but_in_what_it_drops() {
        // Pods with bytes changed at random: whatever the fast path decodes, serde_json parses
        // and the tree path decodes to the same object; or what serde_json refuses lies in the
        // dropped managedFields, checked only as far as finding their end needs (`skip`), and
        // the object is that of the text with them as they were.
        let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
        let t = Transform::default();
        let pod = kubewasm_testenv::generate::pod(3, 2048, 7).to_string();
        let managed = {
            let start = pod.find(r#""managedFields":"#).expect("managedFields") + 16;
            start..scan::value_end(pod.as_bytes(), start).expect("valid")
        };
        let mut next = crate::object::scan::tests::random_below();
        let bytes = b"\"\\{}[],:0-.eE1tfnu \x01\x1f";
        let value = |s: &str| serde_json::from_str::<Value>(s).expect("stored");
        let (mut taken, mut refused, mut dropped) = (0, 0, 0);
        for _ in 0..4000 {
            let mut text = pod.clone().into_bytes();
            let mut changed = Vec::new();
            for _ in 0..1 + next(3) {
                let at = next(text.len());
                text[at] = bytes[next(bytes.len())];
                changed.push(at);
            }
            let Ok(text) = String::from_utf8(text) else {
                continue;
            };
            let Some(fast) = decode(&text, Some(&gvk), &t) else {
                refused += 1;
                continue;
            };
            taken += 1;
            if serde_json::from_str::<Value>(&text).is_err() {
                // The same text with managedFields as they were: valid, and the same object.
                let mut restored = text.clone().into_bytes();
                restored[managed.clone()].copy_from_slice(&pod.as_bytes()[managed.clone()]);
                let restored = String::from_utf8(restored).expect("UTF-8");
                assert!(
                    serde_json::from_str::<Value>(&restored).is_ok(),
                    "the fast path took invalid JSON outside managedFields: {text}"
                );
                let tree = by_tree(&restored, &gvk, &t);
                assert_eq!(value(&fast.json()), value(&tree.json()), "{text}");
                assert_eq!(metadata(&fast), metadata(&tree), "{text}");
                dropped += 1;
                continue;
            }
            let tree = by_tree(&text, &gvk, &t);
            assert_eq!(value(&fast.json()), value(&tree.json()), "{text}");
            assert_eq!(metadata(&fast), metadata(&tree), "{text}");
        }
        assert!(
            taken > 100 && refused > 100 && dropped > 10,
            "taken {taken}, refused {refused}, dropped {dropped}"
        );
        // Keeping managedFields, all of them is checked again.
        let keep = Transform::keep_everything();
        let broken = pod.replacen(r#""fieldsType":"#, r#""fieldsType" "#, 1);
        assert!(decode(&broken, Some(&gvk), &t).is_some());
        assert!(decode(&broken, Some(&gvk), &keep).is_none());
    }

    #[test]
    fn values_serde_json_refuses_in_unread_members_fail_the_object() {
        // serde_json skips these without complaint but will not parse them into a tree.
        let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
        let t = Transform::default();
        let long = "9".repeat(400);
        for number in [
            "1e400",
            "-1e999",
            "123456789e305",
            &long,
            r#""\ud800""#,
            r#""\udc00x""#,
        ] {
            let text = format!(
                r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"a"}},"spec":{{"x":{number}}}}}"#
            );
            assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
            assert!(decode(&text, Some(&gvk), &t).is_none(), "{text}");
            assert!(
                KubeObject::from_server_json(&text, &gvk, &t).is_err(),
                "{text}"
            );
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
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[{"apiVersion":"v1","kind":"K","name":"n","uid":"1","uid":"2"}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[{"apiVersion":"v1","kind":"K","name":"n","u\u0069d":"1"}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[{"apiVersion":"v1","kind":"K","name":"n","uid":"1","controller":"yes"}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":""}}"#,
            r#"{"kind":"Pod","metadata":{"name":"a"}}"#,
            r#"[1,2]"#,
            // Lists where mappings belong (serde would read a struct from them).
            r#"["v1","Pod",{"name":"a"}]"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":["a"]}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","ownerReferences":[["v1","X","n","u"]]}}"#,
            "not json",
            // Escaped keys where keys are compared, members twice, what follows the object.
            r#"{"apiVersion":"v1","kin\u0064":"Pod","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","n\u0061me":"b"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":"x"}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":{"x":true}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":{"x":"1","\u0078":"2"}}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}} {}"#,
            // Invalid JSON in a member the decoder does not read.
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"x":01}}"#,
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
        let wrong =
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","annotations":{"k":1}}}"#;
        let err = KubeObject::from_server_json(wrong, &gvk, &t).expect_err("annotations");
        assert!(err.to_string().contains("annotation `k`"), "{err}");
    }
}
