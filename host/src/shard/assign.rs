//! Which member owns each slice: rendezvous (highest random weight) hashing with bounded
//! loads, a pure function of the member names, so every replica computes the same answer.
//! Every member gets its fair number of slices (within one), and a member joining or
//! leaving moves about its share of slices.

use std::collections::BTreeMap;

use super::hash::fnv1a64;
use super::slices::{SLICES, Slices};

/// Each member's slices. Every (member, slice) pair is weighed by
/// `fnv1a64("{member}/{slice}")`; from the heaviest pair down, a slice goes to the member of
/// the pair unless it is taken or the member has its fair number (`SLICES / n`, the first
/// `SLICES % n` members by name one more). No member: nothing.
pub fn rendezvous<'a>(members: impl IntoIterator<Item = &'a str>) -> BTreeMap<&'a str, Slices> {
    let mut members: Vec<&str> = members.into_iter().collect();
    members.sort_unstable();
    members.dedup();
    let n = u32::try_from(members.len()).unwrap_or(u32::MAX);
    let mut owned: BTreeMap<&str, Slices> = members.iter().map(|m| (*m, Slices::none())).collect();
    if n == 0 {
        return owned;
    }
    let fair = |i: usize| SLICES / n + u32::from((i as u32) < SLICES % n);
    let mut pairs: Vec<(u64, usize, u32)> = members
        .iter()
        .enumerate()
        .flat_map(|(i, m)| (0..SLICES).map(move |s| (score(m, s), i, s)))
        .collect();
    // Heaviest first; ties (never seen) by member, then slice.
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut taken = Slices::none();
    for (_, i, slice) in pairs {
        let Some(slices) = owned.get_mut(members[i]) else {
            continue;
        };
        if taken.contains(slice) || slices.count() >= fair(i) {
            continue;
        }
        *slices = slices.with(slice);
        taken = taken.with(slice);
    }
    owned
}

/// The weight of `member` for `slice`, mixed so that member names differing in one byte
/// still rank independently.
fn score(member: &str, slice: u32) -> u64 {
    let h = fnv1a64(&format!("{member}/{slice}"));
    // FNV's last step leaves the high bits weakly mixed: a finalizer spreads them.
    let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("kubewasm-{i}")).collect()
    }

    #[test]
    fn every_slice_has_one_owner_and_every_member_its_fair_number() {
        for n in 1..=8 {
            let names = members(n);
            let owned = rendezvous(names.iter().map(String::as_str));
            assert_eq!(owned.len(), n);
            let mut all = Slices::none();
            for slices in owned.values() {
                assert_eq!(all.union(*slices).count(), all.count() + slices.count());
                all = all.union(*slices);
            }
            assert!(all.is_all(), "{n} members");
            let counts: Vec<u32> = owned.values().map(|s| s.count()).collect();
            let (min, max) = (counts.iter().min(), counts.iter().max());
            assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{counts:?}");
        }
        assert!(rendezvous(std::iter::empty()).is_empty());
    }

    #[test]
    fn a_member_joining_moves_about_its_share() {
        for n in 1..=8u32 {
            let before_names = members(n as usize);
            let after_names = members(n as usize + 1);
            let before = rendezvous(before_names.iter().map(String::as_str));
            let after = rendezvous(after_names.iter().map(String::as_str));
            let moved: u32 = before
                .iter()
                .map(|(m, slices)| {
                    let now = after.get(m).copied().unwrap_or_default();
                    slices.minus(now).count()
                })
                .sum();
            // The newcomer's share, plus 5 % of the slices, plus two for the rounding of
            // fair numbers on either side.
            let bound = SLICES.div_ceil(n + 1) + SLICES / 20 + 2;
            assert!(moved <= bound, "{n}→{}: {moved} of {SLICES} moved", n + 1);
        }
    }
}
