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
//! - Slices begin where the group's cut table says: the newest table any live Lease
//!   carries (or this member proposes). A slice under one table may overlap another slice
//!   under another, so while any live Lease, its own included, carries an older table, a
//!   member delivers nothing. It writes the new table into its Lease only after it stopped
//!   delivering under the old one, so no hash is delivered under two tables at once. A
//!   Lease that claims no slice does not count: its member delivers nothing, so a member
//!   joining with equal cuts (before it has listed the group's table) stops no one.

use crate::members::View;
use crate::shard::{Slices, Table, claim};

/// What a member claims and delivers next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// Slices to write into its Lease.
    pub claim: Slices,
    /// Slices to deliver now.
    pub deliver: Slices,
    /// The cut table both are under, written into its Lease with the claim.
    pub table: Table,
}

/// The newest of the tables in `view` and `proposal`.
pub fn group_table(view: &View, proposal: Option<Table>) -> Table {
    view.tables
        .values()
        .copied()
        .chain(proposal)
        .fold(
            Table::default(),
            |a, t| if t.newer_than(&a) { t } else { a },
        )
}

/// The next step of member `me`, delivering `delivering` now, given `view` and the table
/// it proposes, if any.
pub fn next(me: &str, view: &View, delivering: Slices, proposal: Option<Table>) -> Step {
    let table = group_table(view, proposal);
    if !view.renewed || !view.members.contains_key(me) {
        return Step {
            table,
            ..Step::default()
        };
    }
    let claim = claim(me, &view.members);
    // A member whose Lease claims nothing delivers nothing, under any table: one that has
    // just joined (its first Lease knows no table but equal cuts) stops no one.
    let agreed = view
        .members
        .iter()
        .filter(|(m, claims)| m.as_str() == me || !claims.is_empty())
        .all(|(m, _)| view.tables.get(m) == Some(&table));
    if !agreed {
        return Step {
            claim,
            deliver: Slices::none(),
            table,
        };
    }
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
        table,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::shard::{Cuts, ShardKey, Share};

    /// Members taking steps one at a time against a shared record of their Leases.
    #[derive(Default)]
    struct Group {
        /// Each live member's claims and table as its Lease holds them.
        leases: BTreeMap<String, (Slices, Table)>,
        /// Each member's delivering set, and the table it is under.
        delivering: BTreeMap<String, (Slices, Table)>,
        /// Each member's next claims and table, written at its next renewal.
        pending: BTreeMap<String, (Slices, Table)>,
        /// The table a member proposes, if any.
        proposals: BTreeMap<String, Table>,
    }

    impl Group {
        fn new(members: &[&str]) -> Self {
            let mut g = Self::default();
            for m in members {
                g.join(m);
            }
            g
        }

        fn join(&mut self, m: &str) {
            self.leases.insert(m.to_owned(), Default::default());
            self.delivering.insert(m.to_owned(), Default::default());
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
                members: self.leases.iter().map(|(m, c)| (m.clone(), c.0)).collect(),
                tables: self.leases.iter().map(|(m, c)| (m.clone(), c.1)).collect(),
                renewed: true,
                joined: true,
            };
            let now = self.delivering.get(m).copied().unwrap_or_default().0;
            let step = next(m, &view, now, self.proposals.get(m).copied());
            self.delivering
                .insert(m.to_owned(), (step.deliver, step.table));
            self.pending.insert(m.to_owned(), (step.claim, step.table));
            self.check();
        }

        /// Every member's delivered hash ranges, under its own table.
        fn ranges(&self) -> Vec<(u128, u128, String)> {
            let mut ranges: Vec<(u128, u128, String)> = self
                .delivering
                .iter()
                .flat_map(|(m, (slices, table))| {
                    let share = Share {
                        key: ShardKey::Namespace,
                        slices: *slices,
                        cuts: table.cuts,
                    };
                    share
                        .ranges()
                        .into_iter()
                        .map(move |(a, b)| (a, b, m.clone()))
                })
                .collect();
            ranges.sort();
            ranges
        }

        /// No hash is delivered by two members, whatever tables they are under.
        fn check(&self) {
            for pair in self.ranges().windows(2) {
                assert!(
                    pair[0].1 <= pair[1].0,
                    "{} and {} deliver overlapping hashes",
                    pair[0].2,
                    pair[1].2
                );
            }
        }

        /// True when every hash is delivered.
        fn all_delivered(&self) -> bool {
            self.ranges().iter().map(|(a, b, _)| b - a).sum::<u128>() == 1 << 64
        }

        /// Rounds in `order` until every slice is delivered; how many rounds that took.
        fn settle(&mut self, order: &[&str]) -> usize {
            for n in 1..=20 {
                for m in order {
                    if self.leases.contains_key(*m) {
                        self.round(m);
                    }
                }
                if self.all_delivered() {
                    return n;
                }
            }
            panic!("not settled: {:?}", self.delivering);
        }
    }

    /// Every slice delivered once, each member its fair number within one.
    fn balanced(g: &Group) {
        let counts: Vec<u32> = g.delivering.values().map(|d| d.0.count()).collect();
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(
            g.all_delivered() && max.zip(min).is_some_and(|(a, b)| a - b <= 1),
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
                before.0.intersect(g.delivering[m].0),
                g.delivering[m].0,
                "{m} took a slice"
            );
        }
        assert_eq!(g.delivering["d"].0.count(), 16);

        // b dies: the others take its slices over and keep their own.
        let four = g.delivering.clone();
        g.kill("b");
        g.settle(&["a", "c", "d"]);
        quiet(&mut g, &["a", "c", "d"]);
        balanced(&g);
        for (m, now) in &g.delivering {
            assert_eq!(four[m].0.minus(now.0).count(), 0, "{m} lost a slice");
        }
    }

    #[test]
    fn a_new_cut_table_is_taken_up_by_all_without_a_hash_delivered_twice() {
        let mut g = Group::new(&["a", "b", "c"]);
        g.settle(&["a", "b", "c"]);
        quiet(&mut g, &["a", "b", "c"]);
        let names: Vec<u64> = ('a'..='z')
            .map(|c| crate::shard::fnv1a64(&format!("team-{c}")))
            .collect();
        let table = Table {
            generation: 1,
            cuts: Cuts::balanced(&names),
        };
        // a proposes it; the others see it in a's Lease, in any order of rounds. Every
        // round checks that no hash is delivered by two members.
        g.proposals.insert("a".to_owned(), table);
        let rounds = g.settle(&["b", "a", "c"]);
        quiet(&mut g, &["c", "b", "a"]);
        balanced(&g);
        assert!(rounds <= 4, "{rounds} rounds");
        for (m, (_, t)) in &g.delivering {
            assert_eq!(*t, table, "{m} delivers under the new table");
        }
        // A member that never saw the proposal joins late: it takes the table up too.
        g.proposals.clear();
        g.join("d");
        g.settle(&["d", "a", "b", "c"]);
        quiet(&mut g, &["d", "a", "b", "c"]);
        balanced(&g);
        assert_eq!(g.delivering["d"].1, table);
    }

    #[test]
    fn a_member_joining_under_balanced_cuts_stops_no_one_else() {
        // The group delivers under a table of its own; a new member's first Lease carries
        // no claim and equal cuts, the only table it knows before its first list.
        let mut g = Group::new(&["a", "b", "c"]);
        let names: Vec<u64> = (0..200)
            .map(|i| crate::shard::fnv1a64(&format!("tenant-{i:03}")))
            .collect();
        let table = Table {
            generation: 1,
            cuts: Cuts::balanced(&names),
        };
        g.proposals.insert("a".to_owned(), table);
        g.settle(&["a", "b", "c"]);
        quiet(&mut g, &["a", "b", "c"]);
        g.proposals.clear();
        let three = g.delivering.clone();
        g.join("d");
        // Every round: the others give up only what moves to d, never the rest of their
        // share (a member that claims nothing delivers nothing, under any table), and stay
        // under the group's table.
        for m in ["a", "b", "c", "d", "a", "b", "c", "d", "a", "b", "c"] {
            g.round(m);
            for old in ["a", "b", "c"] {
                let (now, under) = g.delivering[old];
                assert_eq!(
                    now.intersect(three[old].0),
                    now,
                    "{old} took a slice after {m}'s round"
                );
                assert!(
                    now.count() >= 16 && under == table,
                    "{old} delivers {} slices under generation {} after {m}'s round",
                    now.count(),
                    under.generation
                );
            }
        }
        g.settle(&["d", "a", "b", "c"]);
        quiet(&mut g, &["d", "a", "b", "c"]);
        balanced(&g);
        assert_eq!(g.delivering["d"].1, table);
    }

    #[test]
    fn stale_views_claiming_the_same_slice_settle_by_name_without_overlap() {
        // b believes it is alone (its view lags): it claims everything; a sees both.
        let tables = |names: &[&str]| {
            names
                .iter()
                .map(|m| ((*m).to_owned(), Table::default()))
                .collect()
        };
        let view_b = View {
            members: [("b".to_owned(), Slices::all())].into(),
            tables: tables(&["b"]),
            renewed: true,
            joined: true,
        };
        let step_b = next("b", &view_b, Slices::all(), None);
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
            tables: tables(&["a", "b"]),
            renewed: true,
            joined: true,
        };
        // a claims its share but delivers none of what b claims.
        let step_a = next("a", &view_a, Slices::none(), None);
        assert!(step_a.deliver.is_empty() && !step_a.claim.is_empty());
        // b, seeing a's claims, yields them (a's name is smaller) before a delivers them.
        let view_b = View {
            members: [
                ("a".to_owned(), step_a.claim),
                ("b".to_owned(), Slices::all()),
            ]
            .into(),
            tables: tables(&["a", "b"]),
            renewed: true,
            joined: true,
        };
        let step_b = next("b", &view_b, step_b.deliver, None);
        assert!(step_b.deliver.intersect(step_a.claim).is_empty());
        // A member whose own Lease is not current delivers nothing.
        let lapsed = View {
            renewed: false,
            ..view_b.clone()
        };
        assert_eq!(next("b", &lapsed, Slices::all(), None), Step::default());
        // A member whose table cannot be read: none is agreed on, nothing is delivered.
        let unreadable = View {
            tables: tables(&["b"]),
            ..view_b
        };
        assert!(
            next("b", &unreadable, Slices::all(), None)
                .deliver
                .is_empty()
        );
    }
}
