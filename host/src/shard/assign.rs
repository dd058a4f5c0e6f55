//! Which member claims each slice: every member holds its fair number (within one), and a
//! join or leave moves only the slices it must. What a member claims next depends on what
//! the members claim now (as their Leases say), not only on who they are: a member gives up
//! only its excess and takes only slices nobody claims, so a join moves exactly the
//! newcomer's share and a leave exactly the leaver's slices. Preferences among slices come
//! from rendezvous weights, so a fresh group spreads slices evenly and repeatably.

use std::collections::BTreeMap;

use super::hash::fnv1a64;
use super::slices::{SLICES, Slices};

/// The number of slices `me` should hold among `members`: an equal part, the first
/// `SLICES % n` members by name one more.
fn quota(me: &str, members: &BTreeMap<String, Slices>) -> u32 {
    let n = u32::try_from(members.len()).unwrap_or(u32::MAX).max(1);
    let rank = members.keys().take_while(|m| m.as_str() < me).count();
    SLICES / n + u32::from(u32::try_from(rank).unwrap_or(u32::MAX) < SLICES % n)
}

/// `set`'s slices, those `me` weighs most among `members` first (where it outweighs every
/// other member, then where one outweighs it, ...), then by its own weight: members picking
/// at the same moment mostly pick different slices.
fn by_preference(me: &str, members: &BTreeMap<String, Slices>, set: Slices) -> Vec<u32> {
    let mut slices: Vec<(usize, std::cmp::Reverse<u64>, u32)> = (0..SLICES)
        .filter(|s| set.contains(*s))
        .map(|s| {
            let mine = score(me, s);
            let above = members.keys().filter(|m| score(m, s) > mine).count();
            (above, std::cmp::Reverse(mine), s)
        })
        .collect();
    slices.sort_unstable();
    slices.into_iter().map(|(_, _, s)| s).collect()
}

/// What `me` claims next, given every live member's claims (its own included): what it
/// claims now less its least preferred slices beyond its quota, plus slices no member
/// claims, its most preferred first, up to its quota.
pub fn rebalance(me: &str, claims: &BTreeMap<String, Slices>) -> Slices {
    let quota = quota(me, claims) as usize;
    let mine = claims.get(me).copied().unwrap_or_default();
    let claimed = claims.values().fold(Slices::none(), |a, c| a.union(*c));
    let mut keep = by_preference(me, claims, mine);
    keep.truncate(quota);
    let room = quota.saturating_sub(keep.len());
    let free = by_preference(me, claims, Slices::all().minus(claimed));
    keep.extend(free.into_iter().take(room));
    keep.into_iter().fold(Slices::none(), Slices::with)
}

/// What `me` writes into its Lease next: what [`rebalance`] gives it, less what a member
/// with a smaller name claims (a tie between stale views is settled by name, the same way on
/// both sides).
pub fn claim(me: &str, claims: &BTreeMap<String, Slices>) -> Slices {
    let smaller = claims
        .iter()
        .take_while(|(m, _)| m.as_str() < me)
        .fold(Slices::none(), |a, (_, c)| a.union(*c));
    rebalance(me, claims).minus(smaller)
}

/// Where members starting from `claims` settle when each in turn, by name, writes its
/// [`claim`]: what a group converges to when nothing else moves meanwhile.
pub fn settle(mut claims: BTreeMap<String, Slices>) -> BTreeMap<String, Slices> {
    for _ in 0..=claims.len() * 2 {
        let before = claims.clone();
        let names: Vec<String> = claims.keys().cloned().collect();
        for me in &names {
            let next = claim(me, &claims);
            claims.insert(me.clone(), next);
        }
        if claims == before {
            break;
        }
    }
    claims
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

    fn fresh(names: &[String]) -> BTreeMap<String, Slices> {
        settle(names.iter().map(|m| (m.clone(), Slices::none())).collect())
    }

    fn members(n: usize, salt: &str) -> Vec<String> {
        (0..n).map(|i| format!("kubewasm-{salt}-{i}")).collect()
    }

    fn check_partition(owned: &BTreeMap<String, Slices>) {
        let mut all = Slices::none();
        for slices in owned.values() {
            assert_eq!(all.union(*slices).count(), all.count() + slices.count());
            all = all.union(*slices);
        }
        assert!(all.is_all(), "{owned:?}");
        let counts: Vec<u32> = owned.values().map(|s| s.count()).collect();
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1), "{counts:?}");
    }

    #[test]
    fn every_slice_has_one_owner_and_every_member_its_fair_number() {
        for n in 1..=8 {
            let owned = fresh(&members(n, "a"));
            assert_eq!(owned.len(), n);
            check_partition(&owned);
        }
        assert!(settle(BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_join_moves_exactly_the_newcomers_share_and_a_leave_exactly_the_leavers() {
        for salt in ["a", "b", "c", "d", "e"] {
            for n in 1..=8usize {
                let names = members(n + 1, salt);
                let before = fresh(&names[..n]);
                let mut joined = before.clone();
                joined.insert(names[n].clone(), Slices::none());
                let after = settle(joined);
                check_partition(&after);
                let moved: u32 = before.iter().map(|(m, s)| s.minus(after[m]).count()).sum();
                assert_eq!(moved, after[&names[n]].count(), "{n}→{} ({salt})", n + 1);
                assert_eq!(moved, SLICES / (n as u32 + 1), "{n}→{} ({salt})", n + 1);
                // The first member leaves: only its slices move.
                let mut left = after.clone();
                let gone = left.remove(&names[0]).unwrap_or_default();
                if left.is_empty() {
                    continue;
                }
                let settled = settle(left.clone());
                check_partition(&settled);
                for (m, s) in &left {
                    assert_eq!(s.minus(settled[m]).count(), 0, "{m} lost a slice ({salt})");
                }
                assert_eq!(
                    settled.values().map(|s| s.count()).sum::<u32>()
                        - left.values().map(|s| s.count()).sum::<u32>(),
                    gone.count()
                );
            }
        }
    }
}
