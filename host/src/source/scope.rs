//! Which objects of a type are watched and cached, and what of them: namespaces and a label
//! selector, the union of what the loaded plugins subscribe to, sent to the API server where
//! it can filter; the replica's share of the key space when replicas split the work
//! ([`Share`]), sent as a shard selector; and the fields kept ([`Keep`]), cut at decode, or
//! asked of the server as metadata only.

use std::collections::BTreeSet;
use std::fmt;

use kubewasm_sdk::selector::Selector;

use crate::object::{Keep, KubeObject};
use crate::shard::Share;

/// The objects of one resource type that are watched and cached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// Only these namespaces; `None`: every namespace (and cluster-scoped objects).
    namespaces: Option<BTreeSet<String>>,
    /// Only objects whose labels match; `None`: every object.
    selector: Option<Selector>,
    /// What of each object is kept.
    keep: Keep,
    /// Only namespaced objects in this replica's share; `None`: all of them.
    share: Option<Share>,
}

impl Scope {
    /// Every object of the type.
    pub fn everything() -> Self {
        Self::default()
    }

    /// What a subscription names: its namespaces (none: all) and its label selector.
    pub fn of(namespaces: &[String], selector: &Selector) -> Self {
        Self {
            namespaces: (!namespaces.is_empty()).then(|| namespaces.iter().cloned().collect()),
            selector: (!selector.is_empty()).then(|| selector.clone()),
            keep: Keep::Whole,
            share: None,
        }
    }

    /// The same objects, only those of `share` among the namespaced ones.
    pub fn sharing(self, share: Option<Share>) -> Self {
        Self { share, ..self }
    }

    /// The replica's share, when replicas split the work.
    pub fn share(&self) -> Option<&Share> {
        self.share.as_ref()
    }

    /// The same objects, keeping of each only what `keep` says.
    pub fn keeping(self, keep: Keep) -> Self {
        Self { keep, ..self }
    }

    /// What of each object is kept.
    pub fn keep(&self) -> &Keep {
        &self.keep
    }

    /// The smallest scope holding both: namespaces joined, a selector kept only when both
    /// name the same one.
    pub fn union(&self, other: &Scope) -> Scope {
        let namespaces = match (&self.namespaces, &other.namespaces) {
            (Some(a), Some(b)) => Some(a.union(b).cloned().collect()),
            _ => None,
        };
        let selector = match (&self.selector, &other.selector) {
            (Some(a), Some(b)) if a == b => Some(a.clone()),
            _ => None,
        };
        Scope {
            namespaces,
            selector,
            keep: self.keep.union(&other.keep),
            // A replica has one share; scopes of two shares hold both (as none).
            share: self.share.filter(|s| other.share == Some(*s)),
        }
    }

    /// The union of `scopes`; everything when there are none.
    pub fn union_of<'a>(scopes: impl IntoIterator<Item = &'a Scope>) -> Scope {
        let mut scopes = scopes.into_iter();
        let Some(first) = scopes.next() else {
            return Scope::everything();
        };
        scopes.fold(first.clone(), |all, s| all.union(s))
    }

    /// True when the scope holds every object of the type, whole.
    pub fn is_everything(&self) -> bool {
        self.namespaces.is_none()
            && self.selector.is_none()
            && self.keep.is_whole()
            && self.share.is_none()
    }

    /// The namespaces, when the scope is limited to some.
    pub fn namespaces(&self) -> Option<&BTreeSet<String>> {
        self.namespaces.as_ref()
    }

    /// The label selector, when the scope has one.
    pub fn selector(&self) -> Option<&Selector> {
        self.selector.as_ref()
    }

    /// True when `namespace` (`None`: a cluster-scoped name) may hold objects of the scope.
    pub fn holds_namespace(&self, namespace: Option<&str>) -> bool {
        match (&self.namespaces, namespace) {
            (None, _) => true,
            (Some(set), Some(ns)) => set.contains(ns),
            (Some(_), None) => false,
        }
    }

    /// True when `object` is in the scope.
    pub fn admits(&self, object: &KubeObject) -> bool {
        self.holds_namespace(object.namespace())
            && self.selector.as_ref().is_none_or(|s| s.matches(object))
            && self.share.is_none_or(|s| s.admits(object))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(set) = &self.namespaces {
            let list: Vec<&str> = set.iter().map(String::as_str).collect();
            parts.push(format!("namespaces {}", list.join(", ")));
        }
        if let Some(s) = &self.selector {
            parts.push(format!("labels {s}"));
        }
        if !self.keep.is_whole() {
            parts.push(self.keep.to_string());
        }
        if let Some(share) = &self.share {
            parts.push(format!("share {share}"));
        }
        match parts.is_empty() {
            true => f.write_str("everything"),
            false => f.write_str(&parts.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(namespaces: &[&str], selector: &str) -> Scope {
        let namespaces: Vec<String> = namespaces.iter().map(|s| (*s).to_owned()).collect();
        Scope::of(&namespaces, &Selector::parse(selector).expect("selector"))
    }

    fn pod(ns: &str, labels: &str) -> KubeObject {
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"{ns}","labels":{{{labels}}}}}}}"#
        );
        KubeObject::from_json(&text, &crate::object::Transform::default()).expect("a pod")
    }

    #[test]
    fn unions_join_namespaces_and_keep_only_a_shared_selector() {
        let a = scope(&["a"], "app=web");
        let b = scope(&["b"], "app=web");
        let u = a.union(&b);
        assert_eq!(u, scope(&["a", "b"], "app=web"));
        assert_eq!(u.to_string(), "namespaces a, b; labels app=web");
        let c = scope(&["c"], "app=db");
        assert_eq!(u.union(&c), scope(&["a", "b", "c"], ""));
        assert!(u.union(&Scope::everything()).is_everything());
        let phase = Scope::everything().keeping(Keep::fields(&["/status/phase"]));
        let meta = scope(&["a"], "").keeping(Keep::MetadataOnly);
        assert_eq!(
            phase.union(&meta).to_string(),
            "metadata and /status/phase",
            "every namespace, the wider keep"
        );
        assert_eq!(meta.to_string(), "namespaces a; metadata only");
        assert!(Scope::union_of([]).is_everything());
        assert_eq!(Scope::union_of([&a, &b]), u);
        assert_eq!(Scope::everything().to_string(), "everything");
    }

    #[test]
    fn admits_what_its_namespaces_and_selector_hold() {
        let s = scope(&["a", "b"], "app=web");
        assert!(s.admits(&pod("a", r#""app":"web""#)));
        assert!(!s.admits(&pod("a", r#""app":"db""#)));
        assert!(!s.admits(&pod("c", r#""app":"web""#)));
        assert!(s.holds_namespace(Some("b")));
        assert!(
            !s.holds_namespace(None),
            "a cluster-scoped name is in no namespace"
        );
        assert!(Scope::everything().admits(&pod("z", "")));
    }

    #[test]
    fn a_share_admits_its_slices_namespaces_and_two_shares_join_as_none() {
        use crate::shard::{Cuts, ShardKey, Slices, fnv1a64};
        // fnv1a64("shop") = 0x46dc..., slice 17 of 64.
        assert_eq!(fnv1a64("shop") >> 58, 17);
        let share = |slices| Share {
            key: ShardKey::Namespace,
            slices,
            cuts: Cuts::EQUAL,
        };
        let mine = Scope::everything().sharing(Some(share(Slices::range(0..32))));
        assert!(mine.admits(&pod("shop", "")));
        let theirs = Scope::everything().sharing(Some(share(Slices::range(32..64))));
        assert!(!theirs.admits(&pod("shop", "")));
        assert!(!mine.is_everything());
        assert_eq!(mine.to_string(), "share 32 of 64 slices by namespace");
        assert_eq!(mine.union(&theirs).share(), None);
        assert_eq!(mine.union(&mine).share(), mine.share());
    }
}
