//! Where a replica is in taking up or giving up the leadership, and the one function that
//! moves it. [`Duty`](crate::shard::Duty) holds it; everything else asks the duty.
//!
//! Taking up the leadership has two steps because the plugins start one by one: once
//! elected, the leader's work is already this replica's (a plugin that reaches its initial
//! list must not drop it as someone else's), but the replica reports leading only once every
//! plugin delivers.

/// Where a replica is in taking up or giving up the leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Not leading: without sharding its plugins wait on standby; with sharding they deliver
    /// its slices only.
    Follower,
    /// Elected, its plugins starting: the leader's work is this replica's, but it does not
    /// report leading yet.
    Activating,
    /// Leading: every plugin delivers the leader's work.
    Leading,
}

/// What moves the leadership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The leader Lease was acquired (or no election runs).
    Elected,
    /// Every plugin delivers.
    Activated,
    /// The leader Lease was lost or given up.
    Deposed,
}

impl Leadership {
    /// The leadership after `t`. Activation before election, and an election of a replica
    /// that already leads, change nothing.
    pub fn step(self, t: Transition) -> Self {
        match (self, t) {
            (_, Transition::Deposed) => Self::Follower,
            (Self::Follower, Transition::Elected) => Self::Activating,
            (Self::Activating, Transition::Activated) => Self::Leading,
            (Self::Follower, Transition::Activated) => Self::Follower,
            (Self::Activating, Transition::Elected) => Self::Activating,
            (Self::Leading, Transition::Elected | Transition::Activated) => Self::Leading,
        }
    }

    /// True when the leader's work is this replica's: elected, whether or not every plugin
    /// delivers yet.
    pub fn elected(self) -> bool {
        self != Self::Follower
    }

    /// As a number, for an atomic.
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Self::Follower => 0,
            Self::Activating => 1,
            Self::Leading => 2,
        }
    }

    /// From [`Self::to_u8`].
    pub(crate) fn from_u8(n: u8) -> Self {
        match n {
            1 => Self::Activating,
            2 => Self::Leading,
            _ => Self::Follower,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Leadership::{Activating, Follower, Leading};
    use super::Transition::{Activated, Deposed, Elected};
    use super::*;

    #[test]
    fn every_transition_from_every_state() {
        let table = [
            (Follower, Elected, Activating),
            (Follower, Activated, Follower),
            (Follower, Deposed, Follower),
            (Activating, Elected, Activating),
            (Activating, Activated, Leading),
            (Activating, Deposed, Follower),
            (Leading, Elected, Leading),
            (Leading, Activated, Leading),
            (Leading, Deposed, Follower),
        ];
        for (from, t, to) in table {
            assert_eq!(from.step(t), to, "{from:?} + {t:?}");
        }
    }

    #[test]
    fn the_leaders_work_is_its_own_from_election_on() {
        assert!(!Follower.elected());
        assert!(Activating.elected());
        assert!(Leading.elected());
        for l in [Follower, Activating, Leading] {
            assert_eq!(Leadership::from_u8(l.to_u8()), l);
        }
    }
}
