//! Where the slices begin in the hash space. Equal cuts (2^58 hashes each) spread uids
//! evenly, but not namespaces: FNV-1a folds an input's last bytes into the hash's low bits
//! only, so `team-a` to `team-z` all fall in one slice of 64, and `tenant-000` to
//! `tenant-199` in two. Cuts balanced over the namespaces there are give each slice about
//! as many of them as the next, and the group agrees on one table by its generation
//! ([`Table`], carried in every member's Lease, docs/design/sharding.md).

use crate::shard::SLICES;

/// The first hash of each slice, in order: slice `i` holds `[starts[i], starts[i + 1])`,
/// the last one up to 2^64. Equal starts leave a slice empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cuts([u64; SLICES as usize]);

/// Bits of a hash below its slice number under equal cuts.
const SHIFT: u32 = 64 - SLICES.trailing_zeros();

impl Cuts {
    /// Equal slices of 2^58 hashes each.
    pub const EQUAL: Cuts = {
        let mut starts = [0u64; SLICES as usize];
        let mut i = 0;
        while i < SLICES as usize {
            starts[i] = (i as u64) << SHIFT;
            i += 1;
        }
        Cuts(starts)
    };

    /// Cuts that give each slice as nearly as possible the same number of `hashes`, spread
    /// over the slice numbers when there are fewer hashes than slices.
    pub fn balanced(hashes: &[u64]) -> Self {
        let mut sorted = hashes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let n = sorted.len();
        if n == 0 {
            return Self::EQUAL;
        }
        let mut starts = [0u64; SLICES as usize];
        for (i, start) in starts.iter_mut().enumerate().skip(1) {
            // Slice i begins at the first hash whose share of the sorted list reaches i/64.
            let first = (i * n).div_ceil(SLICES as usize).min(n - 1);
            *start = sorted[first];
        }
        Self(starts)
    }

    /// The slice `hash` falls in.
    pub fn slice_of(&self, hash: u64) -> u32 {
        let after = self.0.partition_point(|start| *start <= hash);
        // starts[0] is 0, so `after` is at least 1.
        u32::try_from(after.saturating_sub(1)).unwrap_or(SLICES - 1)
    }

    /// Slice `i`'s hashes, `[start, end)`; `end` may be 2^64, and equals `start` when empty.
    pub fn range(&self, i: u32) -> (u128, u128) {
        let i = i.min(SLICES - 1) as usize;
        let start = u128::from(self.0[i]);
        let end = self.0.get(i + 1).map_or(1u128 << 64, |e| u128::from(*e));
        (start, end)
    }

    /// How many of `hashes` the fullest slice holds.
    pub fn fullest(&self, hashes: &[u64]) -> usize {
        let mut counts = [0usize; SLICES as usize];
        for h in hashes {
            counts[self.slice_of(*h) as usize] += 1;
        }
        counts.into_iter().max().unwrap_or(0)
    }

    /// The cuts as text: `equal`, or 64 starts of 16 hex digits each.
    pub fn to_text(&self) -> String {
        if *self == Self::EQUAL {
            return "equal".to_owned();
        }
        self.0.iter().map(|s| format!("{s:016x}")).collect()
    }

    /// Cuts from [`Self::to_text`]; `None` unless it is well formed (the first start 0, the
    /// others in order).
    pub fn from_text(text: &str) -> Option<Self> {
        if text == "equal" {
            return Some(Self::EQUAL);
        }
        if text.len() != 16 * SLICES as usize || !text.is_ascii() {
            return None;
        }
        let mut starts = [0u64; SLICES as usize];
        for (i, start) in starts.iter_mut().enumerate() {
            *start = u64::from_str_radix(&text[i * 16..(i + 1) * 16], 16).ok()?;
        }
        (starts[0] == 0 && starts.is_sorted()).then_some(Self(starts))
    }
}

impl Default for Cuts {
    fn default() -> Self {
        Self::EQUAL
    }
}

/// The cuts a group uses, by generation: the table with the highest generation (ties broken
/// by the cuts' text, the same way everywhere) is the group's; generation 0 is equal cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Table {
    /// Raised by one at each new table.
    pub generation: u64,
    /// Where the slices begin.
    pub cuts: Cuts,
}

impl Table {
    /// True when this table supersedes `other`.
    pub fn newer_than(&self, other: &Table) -> bool {
        (self.generation, self.cuts.0) > (other.generation, other.cuts.0)
    }

    /// The table as a Lease annotation's text: `GENERATION:CUTS`.
    pub fn to_text(&self) -> String {
        format!("{}:{}", self.generation, self.cuts.to_text())
    }

    /// A table from [`Self::to_text`].
    pub fn from_text(text: &str) -> Option<Self> {
        let (generation, cuts) = text.split_once(':')?;
        Some(Self {
            generation: generation.parse().ok()?,
            cuts: Cuts::from_text(cuts)?,
        })
    }
}

/// The slice `hash` falls in under equal cuts.
pub fn slice_of(hash: u64) -> u32 {
    Cuts::EQUAL.slice_of(hash)
}

/// Whether cuts holding `hashes` (the namespaces there are) are worth replacing by balanced
/// ones: their fullest slice holds more than twice a fair share and two more. A new table
/// makes every member give up and list again, so small drifts are left alone.
pub fn needs_recut(cuts: &Cuts, hashes: &[u64]) -> bool {
    let fair = hashes.len().div_ceil(SLICES as usize);
    cuts.fullest(hashes) > 2 * fair + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::fnv1a64;

    fn hashes(names: impl IntoIterator<Item = String>) -> Vec<u64> {
        names.into_iter().map(|n| fnv1a64(&n)).collect()
    }

    #[test]
    fn equal_cuts_are_the_top_bits() {
        assert_eq!(Cuts::EQUAL.slice_of(0), 0);
        assert_eq!(Cuts::EQUAL.slice_of((5 << SHIFT) - 1), 4);
        assert_eq!(Cuts::EQUAL.slice_of(5 << SHIFT), 5);
        assert_eq!(Cuts::EQUAL.slice_of(u64::MAX), 63);
        assert_eq!(Cuts::EQUAL.range(63), (63 << SHIFT, 1 << 64));
    }

    #[test]
    fn names_that_differ_at_the_end_clump_under_equal_cuts_and_spread_under_balanced_ones() {
        let teams = hashes(('a'..='z').map(|c| format!("team-{c}")));
        let tenants = hashes((0..200).map(|i| format!("tenant-{i:03}")));
        assert_eq!(
            Cuts::EQUAL.fullest(&teams),
            26,
            "one slice holds every team"
        );
        assert!(Cuts::EQUAL.fullest(&tenants) >= 90);
        assert!(needs_recut(&Cuts::EQUAL, &teams));
        assert!(needs_recut(&Cuts::EQUAL, &tenants));
        let by_team = Cuts::balanced(&teams);
        assert_eq!(by_team.fullest(&teams), 1);
        let by_tenant = Cuts::balanced(&tenants);
        assert!(by_tenant.fullest(&tenants) <= 4, "200 over 64");
        assert!(!needs_recut(&by_tenant, &tenants));
        // Fewer hashes than slices: one each, spread over the slice numbers.
        let used: std::collections::BTreeSet<u32> =
            teams.iter().map(|h| by_team.slice_of(*h)).collect();
        assert_eq!(used.len(), 26);
        assert!(
            used.iter().any(|s| *s < 8) && used.iter().any(|s| *s > 56),
            "{used:?}"
        );
        // Every hash is in exactly one slice, the one whose range holds it.
        for h in tenants.iter().chain(&teams).chain(&[0, u64::MAX]) {
            let (start, end) = by_team.range(by_team.slice_of(*h));
            assert!(start <= u128::from(*h) && u128::from(*h) < end, "{h:#x}");
        }
    }

    #[test]
    fn uids_spread_under_equal_cuts() {
        let uids = hashes((0..6400).map(|i| format!("{:08x}-0000-4000-8000-{i:012x}", i * 7919)));
        assert!(!needs_recut(&Cuts::EQUAL, &uids));
    }

    #[test]
    fn tables_read_back_and_order_by_generation() {
        let cuts = Cuts::balanced(&hashes((0..100).map(|i| format!("ns{i}"))));
        let table = Table {
            generation: 3,
            cuts,
        };
        assert_eq!(Table::from_text(&table.to_text()), Some(table));
        assert_eq!(Table::from_text("0:equal"), Some(Table::default()));
        assert_eq!(Table::from_text("1:0001"), None, "too short");
        let unsorted = format!("1:{}", "ff".repeat(8).repeat(63) + &"0".repeat(16));
        assert_eq!(
            Table::from_text(&unsorted),
            None,
            "the first start is not 0"
        );
        assert!(table.newer_than(&Table::default()));
        assert!(!Table::default().newer_than(&table));
    }
}
