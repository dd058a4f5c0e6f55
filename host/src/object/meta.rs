//! An object's uid, resourceVersion, labels and owner references in compact form: their text
//! in one allocation and where each string ends in another, instead of one allocation per
//! string (about 700 bytes less per pod).

use crate::object::{ObjectError, OwnerRef};

/// Strings per owner reference: apiVersion, kind, name, uid.
const PER_OWNER: usize = 4;

/// Set on an owner's last end when that owner is the managing controller.
const CONTROLLER: u32 = 1 << 31;

/// Where each string ends, in two bytes each while the text allows (it nearly always does).
#[derive(Debug, PartialEq, Eq)]
enum Ends {
    /// Text under 32 KiB: the controller mark is bit 15.
    Short(Box<[u16]>),
    /// Longer text: the controller mark is bit 31.
    Long(Box<[u32]>),
}

impl Ends {
    fn new(ends: Vec<u32>, text_len: usize) -> Self {
        if text_len < 1 << 15 {
            // Each end is at most `text_len`, so bits 15 to 30 are clear and the mark moves
            // from bit 31 to bit 15.
            Self::Short(
                ends.iter()
                    .map(|&e| ((e & !CONTROLLER) | ((e & CONTROLLER) >> 16)) as u16)
                    .collect(),
            )
        } else {
            Self::Long(ends.into_boxed_slice())
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Short(e) => e.len(),
            Self::Long(e) => e.len(),
        }
    }

    /// Where string `i` starts and ends.
    fn span(&self, i: usize) -> (usize, usize) {
        let start = i.checked_sub(1).map_or(0, |p| self.get(p).0);
        (start, self.get(i).0)
    }

    /// Where string `i` ends, and whether it carries the controller mark.
    fn get(&self, i: usize) -> (usize, bool) {
        match self {
            Self::Short(e) => ((e[i] & 0x7fff) as usize, e[i] & 0x8000 != 0),
            Self::Long(e) => ((e[i] & !CONTROLLER) as usize, e[i] & CONTROLLER != 0),
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Self::Short(e) => std::mem::size_of_val(&**e),
            Self::Long(e) => std::mem::size_of_val(&**e),
        }
    }
}

/// uid, resourceVersion, labels (sorted by key) and owners, read through accessors.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Meta {
    /// Every string, one after another.
    text: Box<str>,
    /// Where each string ends in `text`: uid, resourceVersion, each label's key and value,
    /// each owner's four fields (the last one marked when it is the controller).
    ends: Ends,
    /// How many labels.
    labels: u32,
}

impl Meta {
    /// Packs the strings. `labels` must be sorted by key with no key twice.
    pub(super) fn new(
        uid: &str,
        resource_version: &str,
        labels: &[(&str, &str)],
        owners: &[OwnerRef<'_>],
    ) -> Result<Self, ObjectError> {
        let mut text = String::with_capacity(
            uid.len()
                + resource_version.len()
                + labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
                + owners
                    .iter()
                    .map(|o| o.api_version.len() + o.kind.len() + o.name.len() + o.uid.len())
                    .sum::<usize>(),
        );
        let mut ends = Vec::with_capacity(2 + 2 * labels.len() + PER_OWNER * owners.len());
        ends.push(Self::push(uid, &mut text)?);
        ends.push(Self::push(resource_version, &mut text)?);
        for (k, v) in labels {
            ends.push(Self::push(k, &mut text)?);
            ends.push(Self::push(v, &mut text)?);
        }
        for o in owners {
            ends.push(Self::push(o.api_version, &mut text)?);
            ends.push(Self::push(o.kind, &mut text)?);
            ends.push(Self::push(o.name, &mut text)?);
            let uid_end = Self::push(o.uid, &mut text)?;
            ends.push(if o.controller {
                uid_end | CONTROLLER
            } else {
                uid_end
            });
        }
        Ok(Self {
            ends: Ends::new(ends, text.len()),
            text: text.into_boxed_str(),
            labels: u32::try_from(labels.len()).map_err(|_| ObjectError::TooLarge)?,
        })
    }

    /// Appends `s`; returns where it ends.
    fn push(s: &str, text: &mut String) -> Result<u32, ObjectError> {
        text.push_str(s);
        match u32::try_from(text.len()) {
            Ok(end) if end < CONTROLLER => Ok(end),
            _ => Err(ObjectError::TooLarge),
        }
    }

    /// The `i`-th string.
    fn string(&self, i: usize) -> &str {
        let (start, end) = self.ends.span(i);
        self.text.get(start..end).unwrap_or_default()
    }

    /// The `i`-th string's bytes (no character-boundary checks: for comparisons).
    fn bytes(&self, i: usize) -> &[u8] {
        let (start, end) = self.ends.span(i);
        self.text.as_bytes().get(start..end).unwrap_or_default()
    }

    /// `metadata.uid` (empty when absent).
    pub(super) fn uid(&self) -> &str {
        self.string(0)
    }

    /// `metadata.resourceVersion` (empty when absent).
    pub(super) fn resource_version(&self) -> &str {
        self.string(1)
    }

    /// How many labels.
    pub(super) fn label_count(&self) -> usize {
        self.labels as usize
    }

    /// The `i`-th label in key order.
    pub(super) fn label_at(&self, i: usize) -> (&str, &str) {
        (self.string(2 + 2 * i), self.string(3 + 2 * i))
    }

    /// The value of label `key`.
    pub(super) fn label(&self, key: &str) -> Option<&str> {
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
    pub(super) fn owner_count(&self) -> usize {
        (self.ends.len() - 2 - 2 * self.label_count()) / PER_OWNER
    }

    /// The `i`-th owner reference.
    pub(super) fn owner_at(&self, i: usize) -> OwnerRef<'_> {
        let first = 2 + 2 * self.label_count() + PER_OWNER * i;
        OwnerRef {
            api_version: self.string(first),
            kind: self.string(first + 1),
            name: self.string(first + 2),
            uid: self.string(first + 3),
            controller: self.ends.get(first + 3).1,
        }
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.text.len() + self.ends.heap_bytes()
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

    #[test]
    fn every_string_reads_back_as_packed() {
        let owners = [owner("a", "u-a", false), owner("b", "", true)];
        let meta =
            Meta::new("uid-1", "", &[("app", "web"), ("tier", "")], &owners).expect("small enough");
        assert!(matches!(meta.ends, Ends::Short(_)));
        assert_eq!(meta.uid(), "uid-1");
        assert_eq!(meta.resource_version(), "");
        assert_eq!(meta.label_count(), 2);
        assert_eq!(meta.label_at(1), ("tier", ""));
        assert_eq!(meta.label("app"), Some("web"));
        assert_eq!(meta.label("tier"), Some(""));
        assert_eq!(meta.label("apps"), None);
        assert_eq!(meta.label(""), None);
        assert_eq!(meta.owner_count(), 2);
        assert_eq!(meta.owner_at(0), owners[0]);
        assert_eq!(meta.owner_at(1), owners[1]);
        let long = "u".repeat(40_000);
        let owners = [owner("a", &long, true), owner("b", "u-b", false)];
        let meta = Meta::new("uid", "7", &[("k", "v")], &owners).expect("packed");
        assert!(matches!(meta.ends, Ends::Long(_)));
        assert_eq!(meta.owner_at(0), owners[0]);
        assert_eq!(meta.owner_at(1), owners[1]);
        assert_eq!(meta.label("k"), Some("v"));
        let empty = Meta::new("", "", &[], &[]).expect("empty");
        assert_eq!((empty.label_count(), empty.owner_count()), (0, 0));
        assert_eq!(empty.label("x"), None);
    }

    #[test]
    fn labels_are_found_by_binary_search_in_any_count() {
        let keys: Vec<String> = (0..37).map(|i| format!("k{i:03}")).collect();
        let labels: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
        let meta = Meta::new("", "", &labels, &[]).expect("packed");
        for k in &keys {
            assert_eq!(meta.label(k), Some("v"), "{k}");
        }
        assert_eq!(meta.label("k0370"), None);
    }
}
