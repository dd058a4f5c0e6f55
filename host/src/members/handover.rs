//! The hand-over rules: from what a member sees of its group, the slices it claims and the
//! slices it delivers next, so that no slice is ever delivered by two members at once.
//!
//! - A member claims what [`claim`] gives it: what it claims now, trimmed to or filled up to
//!   its fair number, less those a member with a smaller name also claims (a tie between
//!   stale views is settled by name, the same way on both sides).
//! - It delivers a slice only once its own Lease, as listed from the API server, carries the
//!   claim, and no other live member's does. A member that claims later sees that claim and
//!   waits; one with a smaller name makes the deliverer yield.
//! - It stops delivering a slice before it drops the claim: the caller applies the new
//!   delivering set at once, and the claims go out with the next renewal.
//! - A member whose own Lease is not current delivers nothing: the others may take its
//!   slices once its Lease expires, which is after its renew deadline.

use crate::members::View;
use crate::shard::{Slices, claim};

/// What a member claims and delivers next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// Slices to write into its Lease.
    pub claim: Slices,
    /// Slices to deliver now.
    pub deliver: Slices,
}

/// The next step of member `me`, delivering `delivering` now, given `view`.
pub fn next(me: &str, view: &View, delivering: Slices) -> Step {
    if !view.renewed || !view.members.contains_key(me) {
        return Step::default();
    }
    let claim = claim(me, &view.members);
    let others = view
        .members
        .iter()
        .filter(|(m, _)| m.as_str() != me)
        .fold(Slices::none(), |a, (_, c)| a.union(*c));
    let written = view.members.get(me).copied().unwrap_or_default();
    let free = claim.intersect(written).minus(others);
    Step {
        claim,
        deliver: delivering.intersect(claim).union(free),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Members taking steps one at a time against a shared record of their Leases; what each
    /// sees may lag: `lag[m]` rounds old for member m.
    struct Group {
        /// Each live member's claims as its Lease holds them.
        leases: BTreeMap<String, Slices>,
        /// Each member's delivering set.
        delivering: BTreeMap<String, Slices>,
        /// Each member's next claims, written at its next renewal.
        pending: BTreeMap<String, Slices>,
    }

    impl Group {
        fn new(members: &[&str]) -> Self {
            let mut g = Self {
                leases: BTreeMap::new(),
                delivering: BTreeMap::new(),
                pending: BTreeMap::new(),
            };
            for m in members {
                g.join(m);
            }
            g
        }

        fn join(&mut self, m: &str) {
            self.leases.insert(m.to_owned(), Slices::none());
            self.delivering.insert(m.to_owned(), Slices::none());
        }

        /// `m` is gone: it delivers nothing (it stopped at its renew deadline) and, its
        /// Lease having expired, the others no longer see it.
        fn kill(&mut self, m: &str) {
            self.leases.remove(m);
            self.delivering.remove(m);
            self.pending.remove(m);
        }

        /// One member's round: its pending claims are written, it lists, and it steps.
        fn round(&mut self, m: &str) {
            if let Some(claims) = self.pending.remove(m) {
                self.leases.insert(m.to_owned(), claims);
            }
            let view = View {
                members: self.leases.clone(),
                renewed: true,
            };
            let now = self.delivering.get(m).copied().unwrap_or_default();
            let step = next(m, &view, now);
            self.delivering.insert(m.to_owned(), step.deliver);
            self.pending.insert(m.to_owned(), step.claim);
            self.check();
        }

        /// No slice is delivered by two members.
        fn check(&self) {
            let mut seen = Slices::none();
            for (m, d) in &self.delivering {
                assert_eq!(
                    d.intersect(seen).count(),
                    0,
                    "{m} delivers a slice another does"
                );
                seen = seen.union(*d);
            }
        }

        fn delivered(&self) -> Slices {
            self.delivering
                .values()
                .fold(Slices::none(), |a, d| a.union(*d))
        }

        /// Rounds in `order` until every slice is delivered; how many rounds that took.
        fn settle(&mut self, order: &[&str]) -> usize {
            for n in 1..=20 {
                for m in order {
                    if self.leases.contains_key(*m) {
                        self.round(m);
                    }
                }
                if self.delivered().is_all() {
                    return n;
                }
            }
            panic!("not settled: {:?}", self.delivering);
        }
    }

    /// Every slice delivered once, each member its fair number within one.
    fn balanced(g: &Group) {
        let counts: Vec<u32> = g.delivering.values().map(|d| d.count()).collect();
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(
            g.delivered().is_all() && max.zip(min).is_some_and(|(a, b)| a - b <= 1),
            "{counts:?}"
        );
    }

    /// Rounds until nothing changes any more.
    fn quiet(g: &mut Group, order: &[&str]) {
        for _ in 0..10 {
            let before = g.delivering.clone();
            for m in order {
                g.round(m);
            }
            if g.delivering == before && g.pending == g.leases {
                return;
            }
        }
        panic!("still moving: {:?}", g.delivering);
    }

    #[test]
    fn members_converge_to_their_shares_and_never_deliver_a_slice_twice() {
        let mut g = Group::new(&["a", "b", "c"]);
        // Starting together, they pick at once and settle the few slices two picked by
        // name: a few rounds.
        let rounds = g.settle(&["c", "a", "b"]);
        assert!(rounds <= 6, "{rounds} rounds");
        quiet(&mut g, &["c", "a", "b"]);
        balanced(&g);

        // A fourth joins: the others give up only what moves to it, before it takes it.
        let three = g.delivering.clone();
        g.join("d");
        g.settle(&["d", "b", "a", "c"]);
        quiet(&mut g, &["d", "b", "a", "c"]);
        balanced(&g);
        for (m, before) in &three {
            assert_eq!(
                before.intersect(g.delivering[m]),
                g.delivering[m],
                "{m} took a slice"
            );
        }
        assert_eq!(g.delivering["d"].count(), 16);

        // b dies: the others take its slices over and keep their own.
        let four = g.delivering.clone();
        g.kill("b");
        g.settle(&["a", "c", "d"]);
        quiet(&mut g, &["a", "c", "d"]);
        balanced(&g);
        for (m, now) in &g.delivering {
            assert_eq!(four[m].minus(*now).count(), 0, "{m} lost a slice");
        }
    }

    #[test]
    fn stale_views_claiming_the_same_slice_settle_by_name_without_overlap() {
        // b believes it is alone (its view lags): it claims everything; a sees both.
        let view_b = View {
            members: [("b".to_owned(), Slices::all())].into(),
            renewed: true,
        };
        let step_b = next("b", &view_b, Slices::all());
        assert!(
            step_b.deliver.is_all(),
            "alone, b delivers everything it wrote"
        );
        let view_a = View {
            members: [
                ("a".to_owned(), Slices::all()),
                ("b".to_owned(), Slices::all()),
            ]
            .into(),
            renewed: true,
        };
        // a claims its share but delivers none of what b claims.
        let step_a = next("a", &view_a, Slices::none());
        assert!(step_a.deliver.is_empty() && !step_a.claim.is_empty());
        // b, seeing a's claims, yields them (a's name is smaller) before a delivers them.
        let view_b = View {
            members: [
                ("a".to_owned(), step_a.claim),
                ("b".to_owned(), Slices::all()),
            ]
            .into(),
            renewed: true,
        };
        let step_b = next("b", &view_b, step_b.deliver);
        assert!(step_b.deliver.intersect(step_a.claim).is_empty());
        // A member whose own Lease is not current delivers nothing.
        let lapsed = View {
            renewed: false,
            ..view_b
        };
        assert_eq!(next("b", &lapsed, Slices::all()), Step::default());
    }
}
