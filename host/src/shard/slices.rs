//! The key space cut into equal slices, and sets of them.

/// Slices of the 2^64 hash space; each covers 2^58 hashes.
pub const SLICES: u32 = 64;

/// Bits of a hash below its slice number.
const SHIFT: u32 = 64 - SLICES.trailing_zeros();

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

    /// True when the slice of `hash` is in the set.
    pub fn holds(self, hash: u64) -> bool {
        self.contains(slice_of(hash))
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

    /// The set as hash ranges `[start, end)`, adjacent slices merged; the last end may be
    /// 2^64.
    pub fn ranges(self) -> impl Iterator<Item = (u128, u128)> {
        let mut i = 0;
        std::iter::from_fn(move || {
            while i < SLICES && !self.contains(i) {
                i += 1;
            }
            if i == SLICES {
                return None;
            }
            let start = i;
            while i < SLICES && self.contains(i) {
                i += 1;
            }
            Some((u128::from(start) << SHIFT, u128::from(i) << SHIFT))
        })
    }
}

/// The slice a hash falls in.
pub fn slice_of(hash: u64) -> u32 {
    // SHIFT is 58: the result is below 64.
    u32::try_from(hash >> SHIFT).unwrap_or(SLICES - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_neighbours_and_cover_exactly_the_slices() {
        let s = Slices::range(0..2).union(Slices::range(5..6)).with(63);
        let ranges: Vec<(u128, u128)> = s.ranges().collect();
        assert_eq!(
            ranges,
            [(0, 2 << 58), (5 << 58, 6 << 58), (63 << 58, 1u128 << 64)]
        );
        assert_eq!(s.count(), 4);
        for (hash, held) in [
            (0, true),
            ((2u64 << 58) - 1, true),
            (2u64 << 58, false),
            (5u64 << 58, true),
            (u64::MAX, true),
        ] {
            assert_eq!(s.holds(hash), held, "{hash:#x}");
        }
        assert_eq!(
            Slices::all().ranges().collect::<Vec<_>>(),
            [(0, 1u128 << 64)]
        );
        assert_eq!(Slices::none().ranges().count(), 0);
    }
}
