//! The hand-over rules: from what a member sees of its group, the slices it claims and the
//! slices it delivers next, so that no slice is ever delivered by two members at once.
//!
//! - A member claims the slices the assignment ([`rendezvous`] of the live members) gives it,
//!   less those a member with a smaller name also claims (a tie between stale views is
//!   settled by name, the same way on both sides).
//! - It delivers a slice only once its own Lease, as listed from the API server, carries the
//!   claim, and no other live member's does. A member that claims later sees that claim and
//!   waits; one with a smaller name makes the deliverer yield.
//! - It stops delivering a slice before it drops the claim: the caller applies the new
//!   delivering set at once, and the claims go out with the next renewal.
//! - A member whose own Lease is not current delivers nothing: the others may take its
//!   slices once its Lease expires, which is after its renew deadline.

use crate::members::View;
use crate::shard::{Slices, rendezvous};

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
    let target = rendezvous(view.members.keys().map(String::as_str))
        .get(me)
        .copied()
        .unwrap_or_default();
    let mut smaller = Slices::none();
    let mut others = Slices::none();
    for (member, claims) in &view.members {
        if member.as_str() < me {
            smaller = smaller.union(*claims);
        }
        if member != me {
            others = others.union(*claims);
        }
    }
    let claim = target.minus(smaller);
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

    #[test]
    fn members_converge_to_their_shares_and_never_deliver_a_slice_twice() {
        let mut g = Group::new(&["a", "b", "c"]);
        assert!(g.settle(&["c", "a", "b"]) <= 3);
        let shares = rendezvous(["a", "b", "c"]);
        for (m, d) in &g.delivering {
            assert_eq!(*d, shares[m.as_str()], "{m}");
        }

        // A fourth joins: the others give up what moves before it takes it.
        g.join("d");
        g.settle(&["d", "b", "a", "c"]);
        let shares = rendezvous(["a", "b", "c", "d"]);
        for _ in 0..2 {
            for m in ["a", "b", "c", "d"] {
                g.round(m);
            }
        }
        for (m, d) in &g.delivering {
            assert_eq!(*d, shares[m.as_str()], "{m} after d joined");
        }

        // b dies: the others take its slices over.
        g.kill("b");
        g.settle(&["a", "c", "d"]);
        for _ in 0..2 {
            for m in ["a", "c", "d"] {
                g.round(m);
            }
        }
        let shares = rendezvous(["a", "c", "d"]);
        for (m, d) in &g.delivering {
            assert_eq!(*d, shares[m.as_str()], "{m} after b died");
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
