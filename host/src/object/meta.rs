//! An object's uid, resourceVersion, labels and owner references in compact form: where each
//! string lies in the object's own JSON text, four bytes per string, instead of a copy of it.
//! Strings the text does not hold verbatim (escaped ones, or all of them when the text was
//! written again from a JSON tree) are copied once into one allocation of their own. Where the
//! `metadata`, `spec` and `status` values lie in the text is kept in the same numbers.

use crate::object::{ObjectError, OwnerRef, Sections};

/// Strings per owner reference: apiVersion, kind, name, uid.
const PER_OWNER: usize = 4;

/// Set on an owner's uid length when that owner is the managing controller.
const CONTROLLER: u32 = 1 << 31;

/// Texts at least this long need four numbers per span instead of two.
const LONG_TEXT: usize = 1 << 15;

/// Numbers before the strings' spans: the label count, then each section's start and end.
const HEAD: usize = 1 + 2 * Sections::NAMES.len();

/// The label count, each section's start and end (see [`Sections`]), then where each string
/// starts and how long it is: two bytes per number when the texts are under 32 KiB (they
/// nearly always are; the controller mark is bit 15 of the length), else each number as two
/// halves, high first (the mark is bit 31). Which of the two follows from the texts' lengths,
/// so the slice is all there is: no tag.
#[derive(Debug)]
struct Spans(Box<[u16]>);

impl Spans {
    fn new(labels: u32, sections: &Sections, spans: &[[u32; 2]], long: bool) -> Self {
        let head = std::iter::once(labels).chain(sections.spans.iter().flat_map(|&(a, b)| [a, b]));
        if !long {
            // Every number is at most the texts' length (a label takes bytes of text), so bits
            // 15 to 30 are clear and the mark moves from bit 31 to bit 15.
            let numbers = spans.iter().flat_map(|&[start, len]| {
                [
                    start as u16,
                    ((len & !CONTROLLER) | ((len & CONTROLLER) >> 16)) as u16,
                ]
            });
            Self(head.map(|n| n as u16).chain(numbers).collect())
        } else {
            let halves = |n: u32| [(n >> 16) as u16, n as u16];
            let numbers = head.chain(spans.iter().flatten().copied()).flat_map(halves);
            Self(numbers.collect())
        }
    }

    /// Section `i`'s span, as noted.
    fn section(&self, i: usize, long: bool) -> (u32, u32) {
        (self.number(1 + 2 * i, long), self.number(2 + 2 * i, long))
    }

    /// Number `i` (the label count is number 0).
    fn number(&self, i: usize, long: bool) -> u32 {
        if long {
            (u32::from(self.0[2 * i]) << 16) | u32::from(self.0[2 * i + 1])
        } else {
            let n = u32::from(self.0[i]);
            // The short mark, moved back to bit 31.
            (n & 0x7fff) | ((n & 0x8000) << 16)
        }
    }

    fn labels(&self, long: bool) -> usize {
        (self.number(0, long) & !CONTROLLER) as usize
    }

    /// How many strings.
    fn len(&self, long: bool) -> usize {
        (self.0.len() / if long { 2 } else { 1 } - HEAD) / 2
    }

    /// Where string `i` starts and ends, and whether it carries the controller mark.
    fn get(&self, i: usize, long: bool) -> (usize, usize, bool) {
        let start = self.number(HEAD + 2 * i, long) as usize;
        let len = self.number(HEAD + 1 + 2 * i, long);
        (
            start,
            start + (len & !CONTROLLER) as usize,
            len & CONTROLLER != 0,
        )
    }

    fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.0)
    }
}

/// Strings copied out of a JSON text, one after another.
#[derive(Debug)]
struct Copied(Box<str>);

/// uid, resourceVersion, labels (sorted by key) and owners, read through [`View`], and the
/// sections.
#[derive(Debug)]
pub(super) struct Meta {
    /// The strings, when the JSON text does not hold every one verbatim (behind one pointer:
    /// the rare case does not widen every object); `None`: the spans are in the JSON text.
    own: Option<Box<Copied>>,
    /// The label count; then uid, resourceVersion, each label's key and value, each owner's
    /// four fields (the last one marked when it is the controller).
    spans: Spans,
}

/// Calls `f` with each string in span order, and whether it is a controller's uid.
fn each_string<'a>(
    uid: &'a str,
    resource_version: &'a str,
    labels: &[(&'a str, &'a str)],
    owners: &[OwnerRef<'a>],
    mut f: impl FnMut(&'a str, bool) -> Option<()>,
) -> Option<()> {
    f(uid, false)?;
    f(resource_version, false)?;
    for (k, v) in labels {
        f(k, false)?;
        f(v, false)?;
    }
    for o in owners {
        f(o.api_version, false)?;
        f(o.kind, false)?;
        f(o.name, false)?;
        f(o.uid, o.controller)?;
    }
    Some(())
}

/// A span's two numbers, `None` past what they can hold.
fn span(start: usize, len: usize, controller: bool) -> Option<[u32; 2]> {
    let len = u32::try_from(len).ok().filter(|&l| l < CONTROLLER)?;
    Some([
        u32::try_from(start).ok()?,
        if controller { len | CONTROLLER } else { len },
    ])
}

impl Meta {
    /// Locates the strings in `json` (`locate` says where a string would be; it is checked)
    /// or else copies them, and keeps `sections` (of `json`). `labels` must be sorted by key
    /// with no key twice.
    pub(super) fn new(
        json: &str,
        locate: impl Fn(&str) -> Option<usize>,
        (uid, resource_version): (&str, &str),
        labels: &[(&str, &str)],
        owners: &[OwnerRef<'_>],
        sections: &Sections,
    ) -> Result<Self, ObjectError> {
        let count = 2 + 2 * labels.len() + PER_OWNER * owners.len();
        let labels_len = u32::try_from(labels.len()).map_err(|_| ObjectError::TooLarge)?;
        let mut spans = Vec::with_capacity(count);
        let found = each_string(uid, resource_version, labels, owners, |s, controller| {
            let at = if s.is_empty() { 0 } else { locate(s)? };
            let there = json.as_bytes().get(at..at.checked_add(s.len())?)?;
            (there == s.as_bytes()).then_some(())?;
            spans.push(span(at, s.len(), controller)?);
            Some(())
        });
        if found.is_some() {
            return Ok(Self {
                own: None,
                spans: Spans::new(labels_len, sections, &spans, json.len() >= LONG_TEXT),
            });
        }
        spans.clear();
        let mut text = String::new();
        each_string(uid, resource_version, labels, owners, |s, controller| {
            spans.push(span(text.len(), s.len(), controller)?);
            text.push_str(s);
            Some(())
        })
        .ok_or(ObjectError::TooLarge)?;
        let long = text.len().max(json.len()) >= LONG_TEXT;
        Ok(Self {
            spans: Spans::new(labels_len, sections, &spans, long),
            own: Some(Box::new(Copied(text.into_boxed_str()))),
        })
    }

    /// Whether the numbers are in their long form, given `json`.
    fn long(&self, json: &str) -> bool {
        let own = self.own.as_ref().map_or(0, |t| t.0.len());
        own.max(json.len()) >= LONG_TEXT
    }

    /// The strings read from `json`, the text of the object this metadata belongs to.
    pub(super) fn view<'a>(&'a self, json: &'a str) -> View<'a> {
        View {
            spans: &self.spans,
            text: self.own.as_ref().map_or(json, |t| &t.0),
            long: self.long(json),
        }
    }

    /// Where section `i` (of [`Sections::NAMES`]) lies in `json`, the text of the object this
    /// metadata belongs to, as noted.
    pub(super) fn section(&self, json: &str, i: usize) -> (u32, u32) {
        self.spans.section(i, self.long(json))
    }

    /// Every section, as noted.
    #[cfg(test)]
    fn sections(&self, json: &str) -> Sections {
        let mut sections = Sections::default();
        for (i, span) in sections.spans.iter_mut().enumerate() {
            *span = self.section(json, i);
        }
        sections
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.own
            .as_ref()
            .map_or(0, |t| std::mem::size_of::<Copied>() + t.0.len())
            + self.spans.heap_bytes()
    }

    /// True when the strings are read from the object's JSON, not a copy.
    #[cfg(test)]
    pub(super) fn in_json(&self) -> bool {
        self.own.is_none()
    }
}

/// An object's metadata strings, read from the text they lie in.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    spans: &'a Spans,
    text: &'a str,
    /// Whether the spans are in their long form (see [`Spans`]).
    long: bool,
}

impl<'a> View<'a> {
    /// The `i`-th string.
    fn string(self, i: usize) -> &'a str {
        let (start, end, _) = self.spans.get(i, self.long);
        self.text.get(start..end).unwrap_or_default()
    }

    /// The `i`-th string's bytes (no character-boundary checks: for comparisons).
    fn bytes(self, i: usize) -> &'a [u8] {
        let (start, end, _) = self.spans.get(i, self.long);
        self.text.as_bytes().get(start..end).unwrap_or_default()
    }

    /// `metadata.uid` (empty when absent).
    pub(super) fn uid(self) -> &'a str {
        self.string(0)
    }

    /// `metadata.resourceVersion` (empty when absent).
    pub(super) fn resource_version(self) -> &'a str {
        self.string(1)
    }

    /// How many labels.
    pub(super) fn label_count(self) -> usize {
        self.spans.labels(self.long)
    }

    /// The `i`-th label in key order.
    pub(super) fn label_at(self, i: usize) -> (&'a str, &'a str) {
        (self.string(2 + 2 * i), self.string(3 + 2 * i))
    }

    /// The value of label `key`.
    pub(super) fn label(self, key: &str) -> Option<&'a str> {
        let (mut low, mut high) = (0, self.label_count());
        while low < high {
            let mid = low + (high - low) / 2;
            // Bytes order as their text does.
            match self.bytes(2 + 2 * mid).cmp(key.as_bytes()) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(self.string(3 + 2 * mid)),
            }
        }
        None
    }

    /// How many owner references.
    pub(super) fn owner_count(self) -> usize {
        (self.spans.len(self.long) - 2 - 2 * self.label_count()) / PER_OWNER
    }

    /// The `i`-th owner reference.
    pub(super) fn owner_at(self, i: usize) -> OwnerRef<'a> {
        let first = 2 + 2 * self.label_count() + PER_OWNER * i;
        OwnerRef {
            api_version: self.string(first),
            kind: self.string(first + 1),
            name: self.string(first + 2),
            uid: self.string(first + 3),
            controller: self.spans.get(first + 3, self.long).2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner<'a>(name: &'a str, uid: &'a str, controller: bool) -> OwnerRef<'a> {
        OwnerRef {
            api_version: "apps/v1",
            kind: "ReplicaSet",
            name,
            uid,
            controller,
        }
    }

    /// Metadata whose strings cannot be located: copied.
    fn copied(uid: &str, rv: &str, labels: &[(&str, &str)], owners: &[OwnerRef<'_>]) -> Meta {
        Meta::new("", |_| None, (uid, rv), labels, owners, &sections()).expect("small enough")
    }

    /// Sections of a text, each noted a different way.
    fn sections() -> Sections {
        let mut sections = Sections::default();
        sections.note("metadata", Some(1..30));
        sections.note("status", None);
        sections
    }

    #[test]
    fn every_string_reads_back_as_packed() {
        let owners = [owner("a", "u-a", false), owner("b", "", true)];
        let meta = copied("uid-1", "", &[("app", "web"), ("tier", "")], &owners);
        // 54 bytes of text behind a pointer; the label count, two numbers per section and per
        // string, two bytes each.
        assert_eq!(meta.heap_bytes(), 16 + 54 + 2 * (1 + 2 * 3 + 2 * 14));
        assert_eq!(meta.sections(""), sections());
        assert!(!meta.in_json());
        let view = meta.view("");
        assert_eq!(view.uid(), "uid-1");
        assert_eq!(view.resource_version(), "");
        assert_eq!(view.label_count(), 2);
        assert_eq!(view.label_at(1), ("tier", ""));
        assert_eq!(view.label("app"), Some("web"));
        assert_eq!(view.label("tier"), Some(""));
        assert_eq!(view.label("apps"), None);
        assert_eq!(view.label(""), None);
        assert_eq!(view.owner_count(), 2);
        assert_eq!(view.owner_at(0), owners[0]);
        assert_eq!(view.owner_at(1), owners[1]);
        let long = "u".repeat(40_000);
        let owners = [owner("a", &long, true), owner("b", "u-b", false)];
        let meta = copied("uid", "7", &[("k", "v")], &owners);
        assert!(meta.view("").long, "text of 40,000 bytes");
        assert_eq!(meta.spans.len(true), 12);
        assert_eq!(meta.sections(""), sections());
        let view = meta.view("");
        assert_eq!(view.owner_at(0), owners[0]);
        assert_eq!(view.owner_at(1), owners[1]);
        assert_eq!(view.label("k"), Some("v"));
        let empty = copied("", "", &[], &[]);
        let view = empty.view("");
        assert_eq!((view.label_count(), view.owner_count()), (0, 0));
        assert_eq!(view.label("x"), None);
    }

    #[test]
    fn strings_found_in_the_json_are_read_from_it_and_checked() {
        let json = r#"{"uid":"u-1","labels":{"app":"web"},"owner":"rs-1","ctl":"u-rs"}"#;
        let at = |s: &str| json.find(&format!("\"{s}\"")).map(|i| i + 1);
        let owners = [owner("rs-1", "u-rs", true)];
        let labels = [("app", "web")];
        // apiVersion and kind of the owner are not in this text: everything is copied.
        let meta = Meta::new(json, at, ("u-1", ""), &labels, &owners, &sections()).expect("packed");
        assert!(!meta.in_json());
        assert_eq!(meta.view(json).owner_at(0), owners[0]);
        // With them in the text, nothing is copied and every string reads back.
        let json = format!(r#"{json},"a":"apps/v1","k":"ReplicaSet"}}"#);
        let at = |s: &str| json.find(&format!("\"{s}\"")).map(|i| i + 1);
        let meta =
            Meta::new(&json, at, ("u-1", ""), &labels, &owners, &sections()).expect("packed");
        assert!(meta.in_json());
        assert_eq!(meta.heap_bytes(), 2 * 7 + 4 * 8, "four bytes per string");
        assert_eq!(meta.sections(&json), sections());
        let view = meta.view(&json);
        assert_eq!((view.uid(), view.resource_version()), ("u-1", ""));
        assert_eq!(view.label("app"), Some("web"));
        assert_eq!(view.owner_at(0), owners[0]);
        // A wrong location is caught: the strings are copied instead.
        let meta = Meta::new(
            &json,
            |_| Some(2),
            ("u-1", ""),
            &labels,
            &owners,
            &sections(),
        )
        .expect("packed");
        assert!(!meta.in_json());
        assert_eq!(meta.view(&json).label("app"), Some("web"));
        let past_the_end = Meta::new(
            &json,
            |_| Some(usize::MAX),
            ("u-1", ""),
            &[],
            &[],
            &sections(),
        );
        assert_eq!(past_the_end.expect("copied").view(&json).uid(), "u-1");
    }

    #[test]
    fn labels_are_found_by_binary_search_in_any_count() {
        let keys: Vec<String> = (0..37).map(|i| format!("k{i:03}")).collect();
        let labels: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        let meta = copied("", "", &labels, &[]);
        let view = meta.view("");
        for k in &keys {
            assert_eq!(view.label(k), Some("v"), "{k}");
        }
        assert_eq!(view.label("k0370"), None);
    }
}
