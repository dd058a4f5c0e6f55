//! Kubernetes objects as the cache holds them: parsed once, shared by `Arc`, never re-serialized.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::gvk::Gvk;
use meta::Meta;

mod compact;
mod keep;
mod meta;
pub mod names;
pub mod pointer;
pub use keep::Keep;
mod raw;
pub(crate) mod scan;
mod skip;

/// The annotation `kubectl apply` writes: a full copy of the object, dropped by default.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Why a JSON value is not a Kubernetes object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ObjectError {
    /// The value is not a JSON object.
    #[error("not an object (a mapping with apiVersion, kind and metadata)")]
    NotAnObject,
    /// A required field is absent or empty.
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// Path of the field, for example `metadata.labels`.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A label's or annotation's value is not a string: YAML reads unquoted `yes`, `on` or
    /// `1.10` as a boolean or a number, which Kubernetes refuses there.
    #[error(
        "field `{field}`: {what} `{key}` must be a string, not {found}{}",
        quote_hint(found)
    )]
    NotAString {
        /// `metadata.labels` or `metadata.annotations`.
        field: &'static str,
        /// `label` or `annotation`.
        what: &'static str,
        /// The key, cut to [`MAX_ECHOED_KEY`] characters.
        key: String,
        /// The JSON type found instead, with its article: `a boolean`.
        found: &'static str,
    },
    /// The metadata is larger than an object's metadata can be (2 GiB).
    #[error("metadata larger than 2 GiB")]
    TooLarge,
}

/// A reference to an owner, from `metadata.ownerReferences[]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    /// The owner's `apiVersion`.
    pub api_version: &'a str,
    /// The owner's kind.
    pub kind: &'a str,
    /// The owner's name.
    pub name: &'a str,
    /// The owner's uid.
    pub uid: &'a str,
    /// True when this owner is the managing controller.
    pub controller: bool,
}

/// What to drop from every object before it is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transform {
    /// Drop `metadata.managedFields` (often half of a pod's bytes).
    pub drop_managed_fields: bool,
    /// Drop the `kubectl.kubernetes.io/last-applied-configuration` annotation.
    pub drop_last_applied: bool,
    /// What is kept besides the metadata. With [`Keep::MetadataOnly`] the object's type is
    /// the one it is decoded as, whatever the text says (`PartialObjectMetadata`).
    pub keep: Keep,
}

impl Default for Transform {
    fn default() -> Self {
        Self {
            drop_managed_fields: true,
            drop_last_applied: true,
            keep: Keep::Whole,
        }
    }
}

impl Transform {
    /// Keeps every object as received.
    pub fn keep_everything() -> Self {
        Self {
            drop_managed_fields: false,
            drop_last_applied: false,
            keep: Keep::Whole,
        }
    }

    /// The same transform, keeping only what `keep` says besides the metadata.
    pub fn keeping(&self, keep: Keep) -> Self {
        Self {
            keep,
            ..self.clone()
        }
    }

    /// Removes what this transform drops from an object's JSON value.
    pub fn apply(&self, value: &mut Map<String, Value>) {
        self.keep.apply(value);
        let Some(Value::Object(meta)) = value.get_mut("metadata") else {
            return;
        };
        if self.drop_managed_fields {
            meta.remove("managedFields");
        }
        if self.drop_last_applied
            && let Some(Value::Object(annotations)) = meta.get_mut("annotations")
        {
            annotations.remove(LAST_APPLIED_ANNOTATION);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
}

/// One Kubernetes object: the metadata handlers filter on, plus the JSON text.
#[derive(Debug)]
pub struct KubeObject {
    gvk: Arc<Gvk>,
    /// `namespace/name`, or `name` when cluster-scoped; shared with the store's indexes.
    key: Key,
    /// Bytes of `key` that are the namespace (0 when cluster-scoped).
    namespace_len: u32,
    /// Read through [`Meta::view`] with `body`, where its strings usually lie; also says
    /// where `metadata`, `spec` and `status` lie in `body`, when the decoder noted it.
    meta: Meta,
    /// The JSON text after the transform, less `apiVersion` and `kind`: `gvk` says them, and
    /// [`Self::json`] writes them back in front (about 30 bytes fewer per object). When
    /// `compact`, the keys of `metadata`, `spec` and `status` and of the members of
    /// `metadata` are each one byte: read it through [`Self::text`].
    body: Box<str>,
    /// Whether `body` has keys written as one byte (see `compact`); never inside the `spec`
    /// or `status` value.
    compact: bool,
}

/// Byte ranges of an object's `metadata`, `spec` and `status` values in its stored text, noted
/// while decoding (no extra pass), so a lookup under them, a change filter's above all,
/// starts there instead of parsing the text from its start. A range `0..0` is not known; an
/// empty range elsewhere means the member is absent (no JSON value is empty, and the text
/// starts with `{`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sections {
    /// Per name in [`Self::NAMES`]: start and end, `(0, 0)` when not known, `(1, 1)` when
    /// absent.
    spans: [(u32, u32); 3],
}

impl Sections {
    /// The top-level members with a section.
    const NAMES: [&'static str; 3] = ["metadata", "spec", "status"];

    /// Notes that member `name` lies at `range` of the stored text (`None`: it is absent).
    pub(crate) fn note(&mut self, name: &str, range: Option<std::ops::Range<usize>>) {
        let Some(i) = Self::NAMES.iter().position(|n| *n == name) else {
            return;
        };
        self.spans[i] = match range {
            Some(r) => match (u32::try_from(r.start), u32::try_from(r.end)) {
                (Ok(start), Ok(end)) if start > 0 && end > start => (start, end),
                _ => (0, 0),
            },
            None => (1, 1),
        };
    }

    /// The place of member `name` in [`Self::NAMES`].
    fn index(name: &str) -> Option<usize> {
        Self::NAMES.iter().position(|n| *n == name)
    }

    /// A noted span as a range: `Some(None)` when the member is absent, `None` when not known.
    fn range(span: (u32, u32)) -> Option<Option<std::ops::Range<usize>>> {
        match span {
            (0, 0) => None,
            (start, end) if start == end => Some(None),
            (start, end) => Some(Some(start as usize..end as usize)),
        }
    }
}

impl PartialEq for KubeObject {
    fn eq(&self, other: &Self) -> bool {
        self.gvk == other.gvk
            && self.key == other.key
            && self.namespace_len == other.namespace_len
            && self.body == other.body
            && self.uid() == other.uid()
            && self.resource_version() == other.resource_version()
            && self.labels().eq(other.labels())
            && self.owners().eq(other.owners())
    }
}

impl Eq for KubeObject {}

/// An object's cache key, shared by its versions and by every index entry filing it; one
/// pointer wide (so the indexes' sets hold twice as many keys as with `Arc<str>`), to one
/// allocation holding the count, length and text (so comparing two keys follows one pointer
/// each).
#[derive(Clone, Debug)]
pub struct Key(arcstr::ArcStr);

impl Key {
    /// A key holding `key`.
    pub fn new(key: String) -> Self {
        Self(arcstr::ArcStr::from(key))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when both are the same allocation (and so the same key).
    pub fn same(&self, other: &Self) -> bool {
        arcstr::ArcStr::ptr_eq(&self.0, &other.0)
    }
}

impl From<&str> for Key {
    fn from(key: &str) -> Self {
        Self(arcstr::ArcStr::from(key))
    }
}

impl std::ops::Deref for Key {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.same(other) || self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The metadata an object is assembled from, borrowed from wherever it was read.
struct Fields<'a> {
    namespace: Option<&'a str>,
    name: &'a str,
    uid: &'a str,
    resource_version: &'a str,
    /// In any order; no key twice.
    labels: Vec<(&'a str, &'a str)>,
    owners: Vec<OwnerRef<'a>>,
}

impl kubewasm_sdk::selector::Labels for KubeObject {
    fn label(&self, key: &str) -> Option<&str> {
        KubeObject::label(self, key)
    }
}

/// The cache key of an object: `namespace/name`, or `name` when cluster-scoped.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// The namespace and name of a cache key (`namespace/name`, or `name`).
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// Calls `f` with [`object_key`]`(namespace, name)`, built on the stack when it is short
/// (every real key is): a lookup by name allocates nothing.
pub fn with_object_key<R>(namespace: Option<&str>, name: &str, f: impl FnOnce(&str) -> R) -> R {
    const ROOM: usize = 320;
    let ns = namespace.filter(|ns| !ns.is_empty());
    let Some(ns) = ns else {
        return f(name);
    };
    let len = ns.len() + 1 + name.len();
    if len > ROOM {
        return f(&object_key(Some(ns), name));
    }
    let mut buf = [0u8; ROOM];
    buf[..ns.len()].copy_from_slice(ns.as_bytes());
    buf[ns.len()] = b'/';
    buf[ns.len() + 1..len].copy_from_slice(name.as_bytes());
    match std::str::from_utf8(&buf[..len]) {
        Ok(key) => f(key),
        // Two strings and a '/' are valid UTF-8; this arm is never taken.
        Err(_) => f(&object_key(Some(ns), name)),
    }
}

impl KubeObject {
    /// Bytes of the stored JSON text (without the type, which `gvk` says).
    pub fn text_len(&self) -> usize {
        self.body.len()
    }

    /// Parses JSON text into an object, applying `transform`.
    pub fn from_json(text: &str, transform: &Transform) -> Result<Self, ObjectError> {
        let value: Value = serde_json::from_str(text).map_err(|_| ObjectError::NotAnObject)?;
        Self::from_value(value, transform)
    }

    /// Decodes an object from JSON text as an API server sends it, of type `gvk` when the
    /// text names none (list items), applying `transform`. Plain text is read without
    /// building a JSON tree and kept as sent, less what the transform cuts. An object of type
    /// `gvk` shares its allocation.
    pub fn from_server_json(
        text: &str,
        gvk: &Arc<Gvk>,
        transform: &Transform,
    ) -> Result<Self, ObjectError> {
        if let Some(object) = raw::decode(text, Some(gvk), transform) {
            return Ok(object);
        }
        let value: Value = serde_json::from_str(text).map_err(|_| ObjectError::NotAnObject)?;
        let Value::Object(mut map) = value else {
            return Err(ObjectError::NotAnObject);
        };
        if transform.keep == Keep::MetadataOnly {
            // A metadata watch says `PartialObjectMetadata`: the object is of the type asked.
            map.insert("apiVersion".into(), Value::String(gvk.api_version()));
            map.insert("kind".into(), Value::String(gvk.kind.clone()));
        }
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(gvk.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(gvk.kind.clone()));
        let mut object = Self::from_value(Value::Object(map), transform)?;
        if *object.gvk == **gvk {
            object.gvk = gvk.clone();
        }
        Ok(object)
    }

    /// Decodes the object that starts at `start` in `text` (an item of a list page) the way
    /// [`Self::from_server_json`] first tries to, with where it ends; `None` when only a JSON
    /// tree can decode it, or say what is wrong.
    pub(crate) fn from_server_json_at(
        text: &str,
        start: usize,
        gvk: &Arc<Gvk>,
        transform: &Transform,
    ) -> Option<(Self, usize)> {
        raw::decode_at(text, start, Some(gvk), transform)
    }

    /// Builds an object from a parsed JSON value, applying `transform`.
    pub fn from_value(value: Value, transform: &Transform) -> Result<Self, ObjectError> {
        let Value::Object(mut map) = value else {
            return Err(ObjectError::NotAnObject);
        };
        transform.apply(&mut map);
        let api_version = required_str(&map, "apiVersion", "apiVersion")?;
        let kind = required_str(&map, "kind", "kind")?;
        let gvk = Arc::new(Gvk::from_api_version(api_version, kind));
        map.remove("apiVersion");
        map.remove("kind");
        let meta = match map.get("metadata") {
            Some(Value::Object(meta)) => meta,
            Some(_) => {
                return Err(ObjectError::WrongType {
                    field: "metadata",
                    expected: "a mapping",
                });
            }
            None => return Err(ObjectError::Missing("metadata")),
        };
        let fields = Fields {
            name: required_str(meta, "name", "metadata.name")?,
            namespace: optional_str(meta, "namespace", "metadata.namespace")?,
            uid: optional_str(meta, "uid", "metadata.uid")?.unwrap_or_default(),
            resource_version: optional_str(meta, "resourceVersion", "metadata.resourceVersion")?
                .unwrap_or_default(),
            labels: parse_labels(meta)?,
            owners: parse_owners(meta)?,
        };
        // Not kept apart from the text, but refused as Kubernetes refuses them.
        string_map(meta, "annotations", "metadata.annotations", "annotation")?;
        // Written as serde_json writes the map, member by member, noting the sections.
        let mut body = String::from("{");
        let mut sections = Sections::default();
        for name in Sections::NAMES {
            sections.note(name, None);
        }
        for (i, (key, value)) in map.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            let key = serde_json::to_string(key).map_err(|_| ObjectError::NotAnObject)?;
            body.push_str(&key);
            body.push(':');
            let start = body.len();
            let value = serde_json::to_string(value).map_err(|_| ObjectError::NotAnObject)?;
            body.push_str(&value);
            if let Some(name) = key.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
                sections.note(name, Some(start..body.len()));
            }
        }
        body.push('}');
        let body = body.into_boxed_str();
        // Written again from the tree: the strings are copied rather than looked for.
        Self::assemble(gvk, fields, body, |_| None, sections)
    }

    /// Packs decoded metadata and the stored text (without `apiVersion` and `kind`) into an
    /// object; `locate` says where in `body` a metadata string lies, when it can.
    fn assemble(
        gvk: Arc<Gvk>,
        mut fields: Fields<'_>,
        body: Box<str>,
        locate: impl Fn(&str) -> Option<usize>,
        sections: Sections,
    ) -> Result<Self, ObjectError> {
        let namespace = fields.namespace.filter(|ns| !ns.is_empty());
        fields.labels.sort_unstable_by(|a, b| a.0.cmp(b.0));
        if fields.labels.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(ObjectError::WrongType {
                field: "metadata.labels",
                expected: "a mapping with each key once",
            });
        }
        let meta = Meta::new(
            &body,
            locate,
            (fields.uid, fields.resource_version),
            &fields.labels,
            &fields.owners,
            &sections,
        )?;
        let namespace_len = match namespace {
            Some(ns) => u32::try_from(ns.len()).map_err(|_| ObjectError::TooLarge)?,
            None => 0,
        };
        Ok(Self {
            gvk,
            key: with_object_key(namespace, fields.name, |k| Key::from(k)),
            namespace_len,
            meta,
            body,
            compact: false,
        })
    }

    /// Resource type.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// Cache key: `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key's shared allocation.
    pub fn shared_key(&self) -> &Key {
        &self.key
    }

    /// Makes this object use `key`'s allocation when it is the same key (the store keeps one
    /// allocation per object across its versions).
    pub fn share_key(&mut self, key: &Key) {
        if self.key == *key {
            self.key = key.clone();
        }
    }

    /// `metadata.namespace`, none for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        match self.namespace_len as usize {
            0 => None,
            len => self.key.get(..len),
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        match self.namespace_len as usize {
            0 => &self.key,
            len => self.key.get(len + 1..).unwrap_or_default(),
        }
    }

    /// `metadata.uid` (empty when absent).
    pub fn uid(&self) -> &str {
        self.meta.view(&self.body).uid()
    }

    /// `metadata.resourceVersion` (empty when absent).
    pub fn resource_version(&self) -> &str {
        self.meta.view(&self.body).resource_version()
    }

    /// `metadata.labels`, sorted by key.
    pub fn labels(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        let view = self.meta.view(&self.body);
        (0..view.label_count()).map(move |i| view.label_at(i))
    }

    /// The value of a label, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.meta.view(&self.body).label(key)
    }

    /// `metadata.ownerReferences`, in order.
    pub fn owners(&self) -> impl ExactSizeIterator<Item = OwnerRef<'_>> + '_ {
        let view = self.meta.view(&self.body);
        (0..view.owner_count()).map(move |i| view.owner_at(i))
    }

    /// The owner reference marked as the managing controller.
    pub fn controller(&self) -> Option<OwnerRef<'_>> {
        self.owners().find(|o| o.controller)
    }

    /// The object cut to what `keep` keeps (itself when that is all of it); itself, were the
    /// cut to fail: more than asked, never less.
    pub fn kept(self: &Arc<Self>, keep: &Keep) -> Arc<Self> {
        if keep.is_whole() {
            return self.clone();
        }
        let transform = Transform {
            keep: keep.clone(),
            ..Transform::keep_everything()
        };
        match Self::from_json(&self.json(), &transform) {
            Ok(cut) => Arc::new(cut),
            Err(_) => self.clone(),
        }
    }

    /// The object as JSON text, after the transform: `apiVersion` and `kind` first, then the
    /// rest as stored.
    pub fn json(&self) -> String {
        let quoted = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned());
        let api_version = quoted(&self.gvk.api_version());
        let kind = quoted(&self.gvk.kind);
        let rest = self
            .body
            .strip_prefix('{')
            .unwrap_or(&self.body)
            .trim_start();
        let names = if self.compact { 256 } else { 0 };
        let mut json =
            String::with_capacity(26 + api_version.len() + kind.len() + rest.len() + names);
        json.push_str("{\"apiVersion\":");
        json.push_str(&api_version);
        json.push_str(",\"kind\":");
        json.push_str(&kind);
        if !rest.starts_with('}') {
            json.push(',');
        }
        if self.compact {
            compact::expand_into(rest, self.whose(), &mut json);
        } else {
            json.push_str(rest);
        }
        json
    }

    /// The value at a JSON pointer's `tokens` (see [`pointer::tokens`]), none when nothing is
    /// there. Read from the stored text without parsing the rest of it.
    pub fn field(&self, tokens: &[std::borrow::Cow<'_, str>]) -> Option<Value> {
        match tokens.first().map(|t| t.as_ref()) {
            None => serde_json::from_str(&self.json()).ok(),
            Some("apiVersion") => {
                (tokens.len() == 1).then(|| Value::String(self.gvk.api_version()))
            }
            Some("kind") => (tokens.len() == 1).then(|| Value::String(self.gvk.kind.clone())),
            Some(_) => pointer::lookup(&self.text(), tokens),
        }
    }

    /// Where member `name` (`metadata`, `spec` or `status`) lies in `body`: `Some(None)` when
    /// it is known to be absent, `None` when not known.
    fn section(&self, name: &str) -> Option<Option<std::ops::Range<usize>>> {
        Sections::range(self.meta.section(&self.body, Sections::index(name)?))
    }

    /// The stored text as JSON: `body` with its one-byte keys written out.
    fn text(&self) -> std::borrow::Cow<'_, str> {
        if self.compact {
            compact::expand(&self.body, self.whose())
        } else {
            std::borrow::Cow::Borrowed(&self.body)
        }
    }

    /// What the stored text's bytes for the object's name and namespace stand for.
    fn whose(&self) -> compact::Whose<'_> {
        compact::Whose {
            name: self.name(),
            namespace: self.namespace().unwrap_or_default(),
        }
    }

    /// The JSON text of the value at `tokens` as the object holds it; none when nothing is
    /// there (`apiVersion` and `kind` are not in the text: ask [`Self::gvk`]).
    pub fn raw_field(
        &self,
        tokens: &[std::borrow::Cow<'_, str>],
    ) -> Option<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        let (text, rest, plain) = match tokens.split_first() {
            Some((first, rest))
                if let Some(i) = Sections::index(first)
                    && let Some(section) = Sections::range(self.meta.section(&self.body, i)) =>
            {
                // Only the metadata's value has one-byte keys (spec and status never do).
                let plain = !self.compact || i != 0;
                (self.body.get(section?)?, rest, plain)
            }
            _ => (&*self.body, tokens, !self.compact),
        };
        if plain {
            return pointer::raw(text, rest).map(Cow::Borrowed);
        }
        match compact::expand(text, self.whose()) {
            Cow::Borrowed(text) => pointer::raw(text, rest).map(Cow::Borrowed),
            Cow::Owned(text) => pointer::raw(&text, rest).map(|r| Cow::Owned(r.to_owned())),
        }
    }

    /// True when `other`'s `metadata` is written the same but for `resourceVersion` (as after
    /// an update of the spec or status only); false when that is not known.
    pub fn same_metadata_but_version(&self, other: &Self) -> bool {
        // The text before and after the version's string, within the metadata section.
        fn parts(o: &KubeObject) -> Option<(&str, &str)> {
            let meta = o.section("metadata")??;
            let rv = o.resource_version();
            let at = (rv.as_ptr() as usize).checked_sub(o.body.as_ptr() as usize)?;
            let end = at.checked_add(rv.len())?;
            if rv.is_empty() || at < meta.start || end > meta.end {
                return None;
            }
            Some((o.body.get(meta.start..at)?, o.body.get(end..meta.end)?))
        }
        matches!((parts(self), parts(other)), (Some(a), Some(b)) if a == b)
    }

    /// True when `other` has the same type and JSON text.
    pub fn same_json(&self, other: &Self) -> bool {
        self.gvk == other.gvk && self.body == other.body
    }

    /// True when `other` has the same labels (keys and values).
    pub fn same_labels(&self, other: &Self) -> bool {
        self.labels().eq(other.labels())
    }

    /// Approximate bytes this object holds on the heap and inline.
    pub fn size_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.key.len() + self.meta.heap_bytes() + self.body.len()
    }
}

fn required_str<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<&'a str, ObjectError> {
    match optional_str(map, key, field)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ObjectError::Missing(field)),
    }
}

fn optional_str<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Option<&'a str>, ObjectError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ObjectError::WrongType {
            field,
            expected: "a string",
        }),
    }
}

/// Most characters of a key an error repeats: keys come from manifests and servers.
pub const MAX_ECHOED_KEY: usize = 80;

/// How to write a YAML scalar that was read as `found` as a string instead.
fn quote_hint(found: &str) -> &'static str {
    match found {
        "a boolean" | "a number" => " (in YAML, quote it: \"yes\", \"1.10\")",
        _ => "",
    }
}

/// The JSON type of `value`, with its article, for errors.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The pairs of the string-to-string mapping `what`s at `meta[member]` (`labels` or
/// `annotations`); none when absent or null.
fn string_map<'a>(
    meta: &'a Map<String, Value>,
    member: &str,
    field: &'static str,
    what: &'static str,
) -> Result<Vec<(&'a str, &'a str)>, ObjectError> {
    match meta.get(member) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(pairs)) => pairs
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) => Ok((k.as_str(), v.as_str())),
                other => Err(ObjectError::NotAString {
                    field,
                    what,
                    key: k.chars().take(MAX_ECHOED_KEY).collect(),
                    found: json_type(other),
                }),
            })
            .collect(),
        Some(_) => Err(ObjectError::WrongType {
            field,
            expected: "a mapping of strings to strings",
        }),
    }
}

fn parse_labels(meta: &Map<String, Value>) -> Result<Vec<(&str, &str)>, ObjectError> {
    string_map(meta, "labels", "metadata.labels", "label")
}

fn parse_owners(meta: &Map<String, Value>) -> Result<Vec<OwnerRef<'_>>, ObjectError> {
    const WRONG: ObjectError = ObjectError::WrongType {
        field: "metadata.ownerReferences",
        expected: "a list of {apiVersion, kind, name, uid}",
    };
    let items = match meta.get("ownerReferences") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(WRONG),
    };
    items
        .iter()
        .map(|item| {
            let Value::Object(o) = item else {
                return Err(WRONG);
            };
            let field = |k: &str| match o.get(k) {
                Some(Value::String(s)) => Ok(s.as_str()),
                _ => Err(WRONG),
            };
            Ok(OwnerRef {
                api_version: field("apiVersion")?,
                kind: field("kind")?,
                name: field("name")?,
                uid: field("uid")?,
                controller: matches!(o.get("controller"), Some(Value::Bool(true))),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web-1",
                "namespace": "shop",
                "uid": "u-1",
                "resourceVersion": "7",
                "labels": {"tier": "web", "app": "shop"},
                "annotations": {LAST_APPLIED_ANNOTATION: "{...}"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
                    "uid": "rs-1", "controller": true
                }]
            },
            "spec": {"nodeName": "n1"}
        })
    }

    #[test]
    fn keys_built_on_the_stack_equal_the_allocated_ones() {
        let long = "n".repeat(400);
        for (ns, name) in [
            (Some("shop"), "web-1"),
            (None, "node-1"),
            (Some(""), "node-1"),
            (Some("ü-ns"), "pod-ß"),
            (Some("shop"), long.as_str()),
        ] {
            let built = with_object_key(ns, name, str::to_owned);
            assert_eq!(built, object_key(ns, name), "{ns:?} {name:?}");
        }
    }

    #[test]
    fn parses_metadata_and_drops_managed_fields_and_last_applied() {
        let obj = KubeObject::from_value(pod(), &Transform::default()).expect("valid pod");
        assert_eq!(obj.key(), "shop/web-1");
        assert_eq!(*obj.gvk(), Gvk::new("", "v1", "Pod"));
        assert_eq!(obj.uid(), "u-1");
        assert_eq!(obj.resource_version(), "7");
        assert_eq!(
            obj.labels().collect::<Vec<_>>(),
            [("app", "shop"), ("tier", "web")]
        );
        assert_eq!(obj.label("tier"), Some("web"));
        assert_eq!(obj.label("nope"), None);
        assert_eq!(obj.owners().next().expect("owner").uid, "rs-1");
        assert!(obj.owners().next().expect("owner").controller);
        assert!(!obj.json().contains("managedFields"));
        assert!(!obj.json().contains(LAST_APPLIED_ANNOTATION));
        assert!(
            !obj.json().contains("annotations"),
            "empty annotations removed"
        );
        assert!(obj.json().contains("\"nodeName\":\"n1\""));
    }

    #[test]
    fn keeps_managed_fields_when_transform_is_off() {
        let keep = Transform {
            drop_managed_fields: false,
            drop_last_applied: false,
            keep: Keep::Whole,
        };
        let obj = KubeObject::from_value(pod(), &keep).expect("valid pod");
        assert!(obj.json().contains("managedFields"));
        assert!(obj.json().contains(LAST_APPLIED_ANNOTATION));
    }

    #[test]
    fn the_type_is_kept_once_and_read_back_in_front() {
        let obj = KubeObject::from_value(pod(), &Transform::default()).expect("valid pod");
        let body: Value = serde_json::from_str(&obj.body).expect("JSON");
        assert!(
            body.get("apiVersion").is_none() && body.get("kind").is_none(),
            "{body}"
        );
        let json = obj.json();
        assert!(
            json.starts_with(r#"{"apiVersion":"v1","kind":"Pod","#),
            "{json}"
        );
        let value: Value = serde_json::from_str(&json).expect("JSON");
        let again = KubeObject::from_value(value.clone(), &Transform::default()).expect("again");
        assert!(obj.same_json(&again) && obj == again);
        let field = |p: &str| obj.field(&pointer::tokens(p).expect("pointer"));
        assert_eq!(field("/kind"), Some(json!("Pod")));
        assert_eq!(field("/apiVersion"), Some(json!("v1")));
        assert_eq!(field("/kind/x"), None);
        assert_eq!(field("/spec/nodeName"), Some(json!("n1")));
        assert_eq!(field(""), Some(value));
        let deployment =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}});
        let d = KubeObject::from_value(deployment.clone(), &Transform::default()).expect("valid");
        assert_eq!(d.json(), deployment.to_string());
        assert_eq!(
            d.field(&pointer::tokens("/apiVersion").expect("p")),
            Some(json!("apps/v1"))
        );
        assert!(!d.same_json(&KubeObject::from_value(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "d"}}), &Transform::default()).expect("valid")));
    }

    #[test]
    fn metadata_keys_are_stored_as_one_byte_and_read_back_as_sent() {
        let plain = r#"{"metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"7","labels":{"name":"x"},"finalizers":["a"],"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-abc","uid":"rs-1","controller":true}]},"spec":{"name":"spec keeps its keys","nodeName":"n1"},"status":{"phase":"Running"}}"#;
        let sent = format!(r#"{{"apiVersion":"v1","kind":"Pod",{}"#, &plain[1..]);
        let gvk = Arc::new(Gvk::new("", "v1", "Pod"));
        let o = KubeObject::from_server_json(&sent, &gvk, &Transform::default()).expect("pod");
        assert!(o.compact);
        // Every cached object pays for its struct: positions and copies live on the heap.
        assert!(std::mem::size_of::<KubeObject>() <= 64);
        // 12 keys of one byte each: metadata, spec, status, 5 in metadata, 4 in the owner;
        // and three members whole: name, namespace and the owner's controller mark.
        let keys = [
            "metadata",
            "spec",
            "status",
            "uid",
            "resourceVersion",
            "labels",
        ]
        .iter()
        .chain(&["finalizers", "ownerReferences"])
        .chain(&["apiVersion", "kind", "name", "uid"])
        .map(|k| k.len() + 2)
        .sum::<usize>()
            + [
                r#""name":"web-1""#,
                r#""namespace":"shop""#,
                r#""controller":true"#,
            ]
            .iter()
            .map(|m| m.len() - 1)
            .sum::<usize>();
        assert_eq!(o.text_len(), plain.len() - keys);
        assert_eq!(o.text(), plain);
        assert_eq!(o.json(), sent);
        let read = |p: &str| {
            o.raw_field(&pointer::tokens(p).expect("pointer"))
                .map(|r| r.into_owned())
        };
        assert_eq!(read("/metadata/labels").as_deref(), Some(r#"{"name":"x"}"#));
        assert_eq!(
            read("/metadata/ownerReferences/0/uid").as_deref(),
            Some(r#""rs-1""#)
        );
        assert_eq!(read("/spec/nodeName").as_deref(), Some(r#""n1""#));
        assert_eq!(read("/metadata/generation"), None);
        let field = |p: &str| o.field(&pointer::tokens(p).expect("pointer"));
        assert_eq!(field("/metadata/finalizers"), Some(json!(["a"])));
        assert_eq!(
            field(""),
            Some(serde_json::from_str::<Value>(&sent).expect("json"))
        );
        assert_eq!((o.uid(), o.resource_version()), ("u-1", "7"));
        assert_eq!(o.label("name"), Some("x"));
        assert_eq!(o.controller().map(|c| c.uid), Some("rs-1"));
        // Spaces around a colon keep the key as sent.
        let spaced = sent.replacen(r#""uid":"u-1""#, r#""uid" : "u-1""#, 1);
        let o = KubeObject::from_server_json(&spaced, &gvk, &Transform::default()).expect("pod");
        assert!(o.text().contains(r#""uid" : "u-1""#), "{}", o.text());
        assert_eq!(o.uid(), "u-1");
    }

    #[test]
    fn cluster_scoped_key_is_the_name() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
        let obj = KubeObject::from_value(ns, &Transform::default()).expect("valid namespace");
        assert_eq!(obj.key(), "shop");
        assert_eq!(obj.namespace(), None);
    }

    #[test]
    fn errors_name_the_field() {
        let t = Transform::default();
        let no_kind = json!({"apiVersion": "v1", "metadata": {"name": "x"}});
        assert_eq!(
            KubeObject::from_value(no_kind, &t),
            Err(ObjectError::Missing("kind"))
        );
        let no_name = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}});
        assert_eq!(
            KubeObject::from_value(no_name, &t),
            Err(ObjectError::Missing("metadata.name"))
        );
        let bad_labels = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "labels": {"a": 1}}});
        let err = KubeObject::from_value(bad_labels, &t).expect_err("labels must be strings");
        assert!(err.to_string().contains("metadata.labels"), "{err}");
        // YAML's unquoted `yes` is a boolean: the error names the label and what it found.
        let long = "k".repeat(1000);
        let yes = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "labels": {"app": "web", "enabled": true, &long: false}}});
        let err = KubeObject::from_value(yes, &t).expect_err("a boolean label");
        let message = err.to_string();
        assert!(
            message.contains("label `enabled` must be a string, not a boolean (in YAML, quote"),
            "{message}"
        );
        let list = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "labels": {&long: ["a"]}}});
        let err = KubeObject::from_value(list, &t).expect_err("a list label");
        assert_eq!(
            err,
            ObjectError::NotAString {
                field: "metadata.labels",
                what: "label",
                key: "k".repeat(MAX_ECHOED_KEY),
                found: "a list"
            }
        );
        assert!(err.to_string().len() < 250, "{err}");
        assert!(
            !err.to_string().contains("quote"),
            "no YAML hint for a list: {err}"
        );
        let number = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "annotations": {"note": "ok", "replicas-hint": 3}}});
        let err = KubeObject::from_value(number, &t).expect_err("a number annotation");
        assert!(
            err.to_string()
                .contains("annotation `replicas-hint` must be a string, not a number"),
            "{err}"
        );
        let text = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "annotations": "note"}});
        let err = KubeObject::from_value(text, &t).expect_err("annotations as a string");
        assert!(err.to_string().contains("metadata.annotations"), "{err}");
        assert_eq!(
            KubeObject::from_value(json!([1, 2]), &t),
            Err(ObjectError::NotAnObject)
        );
    }
}
