//! Shares of the key space (issue 60): which namespaced objects a replica caches and
//! delivers when replicas split the work. The hash and the selector text are the API
//! server's (KEP-5866, `shardSelector`), so client and server agree on every object.

mod assign;
mod cuts;
mod duty;
mod hash;
mod leadership;
mod slices;

pub use assign::{claim, rebalance, settle};
pub use cuts::{Cuts, Table, needs_recut, slice_of};
pub use duty::Duty;
pub use hash::fnv1a64;
pub use leadership::{Leadership, Transition};
pub use slices::{SLICES, Slices};

use crate::object::KubeObject;

/// What an object's share is decided by; written `namespace` or `uid` in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardKey {
    /// Its namespace: a namespace's objects land together, so owner and index queries stay
    /// on one replica.
    #[default]
    Namespace,
    /// Its uid: an even spread where nothing needs objects kept together.
    Uid,
}

impl ShardKey {
    /// Its name, as the configuration writes it.
    pub fn name(self) -> &'static str {
        match self {
            ShardKey::Namespace => "namespace",
            ShardKey::Uid => "uid",
        }
    }

    /// The hash that places `object`: FNV-1a of its namespace or uid, as the API server
    /// computes it; `None` for a cluster-scoped object.
    pub fn hash_of(self, object: &KubeObject) -> Option<u64> {
        let namespace = object.namespace()?;
        Some(fnv1a64(match self {
            ShardKey::Namespace => namespace,
            ShardKey::Uid => object.uid(),
        }))
    }

    /// The field path the API server's selector names.
    pub fn field(self) -> &'static str {
        match self {
            ShardKey::Namespace => "object.metadata.namespace",
            ShardKey::Uid => "object.metadata.uid",
        }
    }
}

/// Where a namespaced object's plugin state is kept when replicas split the work: with its
/// namespace (by namespace: a namespace is never split, whatever the cuts) or with its
/// slice (by uid, whose cuts are always equal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// The objects of one namespace.
    Namespace(String),
    /// The objects of one slice of equal cuts.
    Slice(u32),
}

impl Part {
    /// The part as text: `namespace/NAME` or `slice/N`.
    pub fn id(&self) -> String {
        match self {
            Part::Namespace(n) => format!("namespace/{n}"),
            Part::Slice(s) => format!("slice/{s}"),
        }
    }

    /// A part from [`Self::id`].
    pub fn from_id(id: &str) -> Option<Self> {
        match id.split_once('/')? {
            ("namespace", n) if !n.is_empty() => Some(Part::Namespace(n.to_owned())),
            ("slice", s) => s.parse().ok().filter(|s| *s < SLICES).map(Part::Slice),
            _ => None,
        }
    }

    /// A hash that places the part's objects: whoever holds it delivers them.
    pub fn hash(&self) -> u64 {
        match self {
            Part::Namespace(n) => fnv1a64(n),
            Part::Slice(s) => u64::try_from(Cuts::EQUAL.range(*s).0).unwrap_or(u64::MAX),
        }
    }
}

/// The slices of the key space a replica owns, and what places an object in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Share {
    /// What an object is hashed by.
    pub key: ShardKey,
    /// The slices owned.
    pub slices: Slices,
    /// Where the slices begin in the hash space.
    pub cuts: Cuts,
}

impl Share {
    /// True when `object` is in the share; a cluster-scoped object always is (every replica
    /// caches cluster-scoped types).
    pub fn admits(&self, object: &KubeObject) -> bool {
        self.slice_of(object)
            .is_none_or(|slice| self.slices.contains(slice))
    }

    /// The slice `object` falls in; `None` for a cluster-scoped object.
    pub fn slice_of(&self, object: &KubeObject) -> Option<u32> {
        Some(self.cuts.slice_of(self.key.hash_of(object)?))
    }

    /// Where `object`'s plugin state is kept; `None` for a cluster-scoped object.
    pub fn part_of(&self, object: &KubeObject) -> Option<Part> {
        Some(match self.key {
            ShardKey::Namespace => Part::Namespace(object.namespace()?.to_owned()),
            ShardKey::Uid => Part::Slice(self.slice_of(object)?),
        })
    }

    /// True when `hash` falls in one of the share's slices.
    pub fn holds(&self, hash: u64) -> bool {
        self.slices.contains(self.cuts.slice_of(hash))
    }

    /// The share as hash ranges `[start, end)`, neighbours merged, empty slices left out;
    /// the last end may be 2^64.
    pub fn ranges(&self) -> Vec<(u128, u128)> {
        let mut ranges: Vec<(u128, u128)> = Vec::new();
        for i in (0..SLICES).filter(|i| self.slices.contains(*i)) {
            let (start, end) = self.cuts.range(i);
            if start == end {
                continue;
            }
            match ranges.last_mut() {
                Some(last) if last.1 == start => last.1 = end,
                _ => ranges.push((start, end)),
            }
        }
        ranges
    }

    /// True when no hash falls in the share (no slice, or only empty ones).
    pub fn holds_nothing(&self) -> bool {
        self.ranges().is_empty()
    }

    /// The `shardSelector` a list or watch sends for this share; `None` when it owns every
    /// slice (nothing to filter) or none (a selector cannot say nothing).
    pub fn selector(&self) -> Option<String> {
        if self.slices.is_all() || self.slices.is_empty() {
            return None;
        }
        let ranges: Vec<String> = self
            .ranges()
            .into_iter()
            .map(|(start, end)| {
                format!(
                    "shardRange({}, '{}', '{}')",
                    self.key.field(),
                    hex(start),
                    hex(end)
                )
            })
            .collect();
        Some(ranges.join(" || "))
    }
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (count, key) = (self.slices.count(), self.key.name());
        write!(f, "{count} of {SLICES} slices by {key}")
    }
}

/// A bound as the API server parses it: `0x` and 16 hex digits, or 2^64 written out.
fn hex(bound: u128) -> String {
    if bound > u128::from(u64::MAX) {
        "0x10000000000000000".to_owned()
    } else {
        format!("0x{bound:016x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(namespace: Option<&str>, uid: &str) -> KubeObject {
        let ns = namespace.map_or(String::new(), |n| format!(r#","namespace":"{n}""#));
        let text = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"x"{ns},"uid":"{uid}"}}}}"#
        );
        KubeObject::from_json(&text, &crate::object::Transform::default()).expect("an object")
    }

    #[test]
    fn selectors_are_written_as_the_api_server_parses_them() {
        let low = Share {
            key: ShardKey::Namespace,
            slices: Slices::range(0..SLICES / 2),
            cuts: Cuts::EQUAL,
        };
        assert_eq!(
            low.selector().as_deref(),
            Some(
                "shardRange(object.metadata.namespace, '0x0000000000000000', '0x8000000000000000')"
            )
        );
        let ends = Share {
            key: ShardKey::Uid,
            slices: Slices::range(0..1).union(Slices::range(SLICES - 1..SLICES)),
            cuts: Cuts::EQUAL,
        };
        assert_eq!(
            ends.selector().as_deref(),
            Some(
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x0400000000000000') || \
                 shardRange(object.metadata.uid, '0xfc00000000000000', '0x10000000000000000')"
            )
        );
        let all = Share {
            key: ShardKey::Namespace,
            slices: Slices::all(),
            cuts: Cuts::EQUAL,
        };
        assert_eq!(all.selector(), None, "nothing to filter");
        assert_eq!(
            Share {
                slices: Slices::none(),
                ..all
            }
            .selector(),
            None
        );
    }

    #[test]
    fn objects_are_placed_by_their_namespace_or_uid_and_cluster_scoped_ones_everywhere() {
        // fnv1a64("shop") = 0x46dc5e18e28e2409: slice 17 of 64.
        let shop = object(Some("shop"), "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
        let by_namespace = |slices| Share {
            key: ShardKey::Namespace,
            slices,
            cuts: Cuts::EQUAL,
        };
        assert!(by_namespace(Slices::range(17..18)).admits(&shop));
        assert!(!by_namespace(Slices::range(18..64)).admits(&shop));
        // fnv1a64 of that uid = 0x93754b7248a00eb9: slice 36.
        let by_uid = |slices| Share {
            key: ShardKey::Uid,
            slices,
            cuts: Cuts::EQUAL,
        };
        assert!(by_uid(Slices::range(36..37)).admits(&shop));
        assert!(!by_uid(Slices::range(17..18)).admits(&shop));
        let node = object(None, "n");
        assert!(by_namespace(Slices::none()).admits(&node));
    }

    #[test]
    fn ranges_merge_neighbours_skip_empty_slices_and_follow_the_cuts() {
        let share = |slices, cuts| Share {
            key: ShardKey::Namespace,
            slices,
            cuts,
        };
        let s = Slices::range(0..2).union(Slices::range(5..6)).with(63);
        assert_eq!(
            share(s, Cuts::EQUAL).ranges(),
            [(0, 2 << 58), (5 << 58, 6 << 58), (63 << 58, 1u128 << 64)]
        );
        assert_eq!(
            share(Slices::all(), Cuts::EQUAL).ranges(),
            [(0, 1u128 << 64)]
        );
        assert!(share(Slices::none(), Cuts::EQUAL).holds_nothing());
        // Two namespaces: one slice each, the others empty.
        let (a, b) = (fnv1a64("team-a"), fnv1a64("team-b"));
        let cuts = Cuts::balanced(&[a, b]);
        let (sa, sb) = (cuts.slice_of(a), cuts.slice_of(b));
        assert_ne!(sa, sb);
        let empty = (0..SLICES).find(|i| {
            *i != sa && *i != sb && {
                let (start, end) = cuts.range(*i);
                start == end
            }
        });
        let empty = empty.expect("an empty slice");
        assert!(share(Slices::none().with(empty), cuts).holds_nothing());
        let only_a = share(Slices::none().with(sa), cuts);
        assert!(only_a.admits(&object(Some("team-a"), "u")));
        assert!(!only_a.admits(&object(Some("team-b"), "u")));
        assert_eq!(only_a.ranges().len(), 1);
    }

    #[test]
    fn parts_read_back_and_fall_where_their_objects_do() {
        for part in [Part::Namespace("shop".into()), Part::Slice(36)] {
            assert_eq!(Part::from_id(&part.id()), Some(part));
        }
        for bad in ["slice/64", "namespace/", "pod/x", "slice"] {
            assert_eq!(Part::from_id(bad), None, "{bad}");
        }
        let shop = object(Some("shop"), "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
        for key in [ShardKey::Namespace, ShardKey::Uid] {
            let share = Share {
                key,
                slices: Slices::range(17..18).union(Slices::range(36..37)),
                cuts: Cuts::EQUAL,
            };
            let part = share.part_of(&shop).expect("namespaced");
            assert!(share.holds(part.hash()), "{part:?}");
            let other = Share {
                slices: Slices::all().minus(share.slices),
                ..share
            };
            assert!(!other.holds(part.hash()), "{part:?}");
        }
        assert_eq!(
            Share {
                key: ShardKey::Namespace,
                slices: Slices::all(),
                cuts: Cuts::EQUAL
            }
            .part_of(&object(None, "n")),
            None
        );
    }
}
