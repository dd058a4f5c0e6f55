//! Sets of the key space's slices (where each begins: [`crate::shard::Cuts`]).

/// Slices of the 2^64 hash space.
pub const SLICES: u32 = 64;

/// A set of slices, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Slices(u64);

impl Slices {
    /// No slice.
    pub fn none() -> Self {
        Self(0)
    }

    /// Every slice.
    pub fn all() -> Self {
        Self(u64::MAX)
    }

    /// The slices numbered `range` (within `0..SLICES`).
    pub fn range(range: std::ops::Range<u32>) -> Self {
        (range.start..range.end.min(SLICES)).fold(Self::none(), |s, i| s.with(i))
    }

    /// These and slice `i`.
    pub fn with(self, i: u32) -> Self {
        Self(self.0 | 1u64.checked_shl(i).unwrap_or(0))
    }

    /// The set whose bits are `bits` (slice `i` is bit `i`).
    pub fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The set as bits (slice `i` is bit `i`).
    pub fn bits(self) -> u64 {
        self.0
    }

    /// These and `other`.
    pub fn union(self, other: Slices) -> Self {
        Self(self.0 | other.0)
    }

    /// Those of these that are also in `other`.
    pub fn intersect(self, other: Slices) -> Self {
        Self(self.0 & other.0)
    }

    /// These less those in `other`.
    pub fn minus(self, other: Slices) -> Self {
        Self(self.0 & !other.0)
    }

    /// True when slice `i` is in the set.
    pub fn contains(self, i: u32) -> bool {
        i < SLICES && self.0 & (1 << i) != 0
    }

    /// How many slices are in the set.
    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// True when every slice is in the set.
    pub fn is_all(self) -> bool {
        self.0 == u64::MAX
    }

    /// True when no slice is.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_count_join_and_subtract() {
        let s = Slices::range(0..2).union(Slices::range(5..6)).with(63);
        assert_eq!(s.count(), 4);
        assert!(s.contains(63) && !s.contains(64) && !s.contains(2));
        assert_eq!(s.minus(Slices::range(0..6)), Slices::none().with(63));
        assert_eq!(s.intersect(Slices::range(1..6)).count(), 2);
        assert!(Slices::all().is_all() && Slices::none().is_empty());
    }
}
