//! What this replica delivers now: everything while it leads (one replica delivers, the
//! others wait), or, when replicas split the work, the events of the namespaced objects in
//! its slices, and the cluster-scoped work (cluster-scoped objects, schedules) while it
//! leads. Workers ask before each call ([`Duty::begin`]) and before sending each write, so a
//! slice handed over stops at once, queued events and staged writes included; the calls
//! already running when it changed are counted, with the latest each may run until, so a
//! hand-over can wait for them ([`Duty::calls_before_change`], [`Duty::running_until`]).
//! It is the one owner of the replica's leadership ([`Leadership`]): the election moves it
//! ([`Duty::step`]), and the plugins, status and writes ask it.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::object::KubeObject;
use crate::shard::{Cuts, Leadership, ShardKey, Share, Slices, Transition};

/// This replica's part of the delivering, changed as leadership and slices move.
#[derive(Debug)]
pub struct Duty {
    /// Where it is in taking up or giving up the leadership ([`Leadership::to_u8`]).
    leadership: AtomicU8,
    /// What namespaced objects are hashed by, when replicas split the work.
    sharded: Option<ShardKey>,
    /// The slices it delivers (bits), when replicas split the work.
    slices: AtomicU64,
    /// Where they begin; changed only while no slice is delivered.
    cuts: RwLock<Cuts>,
    /// Changes of the slices so far: calls count in the half of `in_flight` of the parity
    /// current when they began.
    epoch: AtomicU64,
    /// Calls in flight, by the parity of the epoch they began in.
    in_flight: [AtomicU64; 2],
    /// The latest any call counted in each half may run until by the wall clock, in
    /// nanoseconds after `base`.
    ends: [AtomicU64; 2],
    /// Until when its leadership is confirmed by its own monotonic clock (the last renewal
    /// it sent, plus the time a leader keeps leading without renewing), in nanoseconds after
    /// `base`; `u64::MAX` when it needs no confirmation (no election).
    leader_until: AtomicU64,
    /// The same for its slices (its member Lease's renewals).
    slices_until: AtomicU64,
    /// The moment `ends` and the confirmations count from.
    base: Instant,
}

/// Longest a call waits for a lapsed confirmation to be renewed or withdrawn before its work
/// counts as not this replica's.
const CONFIRMATION_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting call looks again.
const CONFIRMATION_POLL: Duration = Duration::from_millis(5);

/// A call under way that [`Duty::begin`] admitted; counted until dropped.
#[derive(Debug)]
pub struct Call<'a> {
    duty: &'a Duty,
    half: usize,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.duty.in_flight[self.half].fetch_sub(1, Ordering::SeqCst);
    }
}

impl Duty {
    /// One replica delivers everything while it leads; `leading`: it leads from the start
    /// (no election runs).
    pub fn whole(leading: bool) -> Self {
        let leadership = if leading {
            Leadership::Leading
        } else {
            Leadership::Follower
        };
        Self {
            leadership: AtomicU8::new(leadership.to_u8()),
            sharded: None,
            slices: AtomicU64::new(0),
            cuts: RwLock::new(Cuts::EQUAL),
            epoch: AtomicU64::new(0),
            in_flight: Default::default(),
            ends: Default::default(),
            leader_until: AtomicU64::new(u64::MAX),
            slices_until: AtomicU64::new(u64::MAX),
            base: Instant::now(),
        }
    }

    /// Replicas split namespaced objects by `key`; this one delivers none until told.
    pub fn sharded(key: ShardKey) -> Self {
        Self {
            sharded: Some(key),
            ..Self::whole(false)
        }
    }

    /// What namespaced objects are hashed by, when replicas split the work.
    pub fn shard_key(&self) -> Option<ShardKey> {
        self.sharded
    }

    /// Whether the leader's work is this replica's: it was elected (or needs no election)
    /// and that is confirmed by its own monotonic clock now. A replica stopped (SIGSTOP, a
    /// VM paused) past its last renewal does not lead when it resumes, whatever its
    /// election task has not noticed yet.
    pub fn leading(&self) -> bool {
        self.leadership().elected() && self.confirmed(&self.leader_until)
    }

    /// Where it is in taking up or giving up the leadership.
    pub fn leadership(&self) -> Leadership {
        Leadership::from_u8(self.leadership.load(Ordering::SeqCst))
    }

    /// Moves the leadership by `t` ([`Leadership::step`]); returns where it is now.
    pub fn step(&self, t: Transition) -> Leadership {
        let mut now = self.leadership();
        loop {
            let next = now.step(t);
            match self.leadership.compare_exchange(
                now.to_u8(),
                next.to_u8(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return next,
                Err(seen) => now = Leadership::from_u8(seen),
            }
        }
    }

    /// True when this replica's plugins run and deliver what the duty says; false for a
    /// follower of an election without sharding, whose plugins wait on standby.
    pub fn runs_plugins(&self) -> bool {
        self.sharded.is_some() || self.leadership().elected()
    }

    /// Its leadership is confirmed until `until` (a renewal succeeded that was sent early
    /// enough); until the next confirmation, nothing is delivered past it.
    pub fn confirm_leading_until(&self, until: Instant) {
        self.leader_until.store(self.nanos(until), Ordering::SeqCst);
    }

    /// Its slices are confirmed until `until` (its member Lease was renewed).
    pub fn confirm_slices_until(&self, until: Instant) {
        self.slices_until.store(self.nanos(until), Ordering::SeqCst);
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether `until` is still ahead by the monotonic clock.
    fn confirmed(&self, until: &AtomicU64) -> bool {
        let until = until.load(Ordering::SeqCst);
        until == u64::MAX || self.nanos(Instant::now()) < until
    }

    /// Waits while a confirmation this replica relies on has lapsed: it is renewed or
    /// withdrawn within a retry period of the election or membership (delivering or writing
    /// meanwhile could act on a Lease another replica already holds; dropping the work would
    /// lose it where the renewal was only slow). Blocking: call it on a plugin's thread.
    pub fn settle(&self) {
        let waiting = Instant::now();
        while self.lapsed() && waiting.elapsed() < CONFIRMATION_WAIT {
            std::thread::sleep(CONFIRMATION_POLL);
        }
    }

    /// How long the confirmation this replica's delivery of `object` rests on (its slice's,
    /// or for cluster-scoped work and without sharding its leadership's; `None`: work of no
    /// object) holds still by its own clock; `None` when it rests on none (no election).
    pub fn confirmed_for(&self, object: Option<&KubeObject>) -> Option<Duration> {
        let slice = object.is_some_and(|o| self.sharded.and_then(|k| k.hash_of(o)).is_some());
        let until = if slice {
            &self.slices_until
        } else {
            &self.leader_until
        };
        let until = until.load(Ordering::SeqCst);
        (until != u64::MAX)
            .then(|| Duration::from_nanos(until.saturating_sub(self.nanos(Instant::now()))))
    }

    /// True while a confirmation this replica relies on has lapsed and not been withdrawn:
    /// its election or membership task has not renewed, nor given up, yet.
    fn lapsed(&self) -> bool {
        let leader = self.leadership().elected() && !self.confirmed(&self.leader_until);
        let slices = !self.slices().is_empty() && !self.confirmed(&self.slices_until);
        leader || slices
    }

    /// The slices delivered now (none when replicas do not split the work).
    pub fn slices(&self) -> Slices {
        Slices::from_bits(self.slices.load(Ordering::SeqCst))
    }

    /// Delivers `slices`, beginning where `cuts` say, from now on: no call begins for what
    /// it no longer holds (those already running: [`Self::calls_before_change`]). The
    /// hand-over changes the cuts only after a step that delivered nothing.
    pub fn set_slices(&self, slices: Slices, cuts: Cuts) {
        let mut current = self.cuts.write().unwrap_or_else(|e| e.into_inner());
        if *current != cuts {
            self.slices.store(0, Ordering::SeqCst);
            *current = cuts;
        }
        self.slices.store(slices.bits(), Ordering::SeqCst);
        drop(current);
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// A call for work that `admits` accepts under the current duty, counted while it runs,
    /// which may run for `longest` by the wall clock; `None` when the work is not this
    /// replica's now.
    pub fn begin(&self, longest: Duration, admits: impl FnOnce(&Duty) -> bool) -> Option<Call<'_>> {
        self.settle();
        let half = loop {
            let epoch = self.epoch.load(Ordering::SeqCst);
            let half = (epoch & 1) as usize;
            self.in_flight[half].fetch_add(1, Ordering::SeqCst);
            // Counted in the half of an epoch that had not ended when it was counted: a
            // change waits for it.
            if self.epoch.load(Ordering::SeqCst) == epoch {
                break half;
            }
            self.in_flight[half].fetch_sub(1, Ordering::SeqCst);
        };
        let end = self.base.elapsed().saturating_add(longest).as_nanos();
        self.ends[half].fetch_max(u64::try_from(end).unwrap_or(u64::MAX), Ordering::SeqCst);
        let call = Call { duty: self, half };
        admits(self).then_some(call)
    }

    /// Calls begun before the last [`Self::set_slices`] and still running.
    pub fn calls_before_change(&self) -> u64 {
        let epoch = self.epoch.load(Ordering::SeqCst);
        self.in_flight[((epoch + 1) & 1) as usize].load(Ordering::SeqCst)
    }

    /// The latest the calls counted by [`Self::calls_before_change`] may run until by the
    /// wall clock (or later: a half is reused every other change, and keeps its latest).
    pub fn running_until(&self) -> Instant {
        let epoch = self.epoch.load(Ordering::SeqCst);
        let end = self.ends[((epoch + 1) & 1) as usize].load(Ordering::SeqCst);
        self.base
            .checked_add(Duration::from_nanos(end))
            .unwrap_or_else(|| self.base + Duration::from_secs(86_400 * 365))
    }

    /// The share delivered now, when replicas split the work.
    pub fn share(&self) -> Option<Share> {
        self.sharded.map(|key| Share {
            key,
            slices: self.slices(),
            cuts: *self.cuts.read().unwrap_or_else(|e| e.into_inner()),
        })
    }

    /// True when this replica delivers anything at all.
    pub fn delivers_any(&self) -> bool {
        self.leading() || !self.slices().is_empty()
    }

    /// True when this replica reconciles a key of `namespace` whose object the cache does not
    /// hold (a controller's key of a deleted object): by namespace, as [`Self::delivers`]
    /// places its objects; by uid (an absent object has none) and cluster-wide, while it leads.
    pub fn delivers_namespace(&self, namespace: Option<&str>) -> bool {
        match (self.sharded, namespace) {
            (Some(ShardKey::Namespace), Some(ns)) => {
                let hash = crate::shard::fnv1a64(ns);
                let cuts = self.cuts.read().unwrap_or_else(|e| e.into_inner());
                self.slices().contains(cuts.slice_of(hash)) && self.confirmed(&self.slices_until)
            }
            _ => self.leading(),
        }
    }

    /// True when this replica delivers the events of `object` (and sends the writes they
    /// stage): namespaced objects of its slices, the rest while it leads.
    pub fn delivers(&self, object: &KubeObject) -> bool {
        // The slice under the cuts in place, read without copying them (once per call and
        // per staged write).
        match self.sharded.and_then(|key| key.hash_of(object)) {
            Some(hash) => {
                let cuts = self.cuts.read().unwrap_or_else(|e| e.into_inner());
                self.slices().contains(cuts.slice_of(hash)) && self.confirmed(&self.slices_until)
            }
            None => self.leading(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::{fnv1a64, slice_of};

    fn object(namespace: Option<&str>) -> KubeObject {
        let ns = namespace.map_or(String::new(), |n| format!(r#","namespace":"{n}""#));
        let text =
            format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"x"{ns}}}}}"#);
        KubeObject::from_json(&text, &crate::object::Transform::default()).expect("an object")
    }

    fn slice(namespace: &str) -> u32 {
        slice_of(fnv1a64(namespace))
    }

    #[test]
    fn a_lapsed_confirmation_is_waited_out_until_renewed_or_withdrawn() {
        let duty = std::sync::Arc::new(Duty::whole(false));
        duty.confirm_leading_until(Instant::now() + Duration::from_secs(60));
        duty.step(Transition::Elected);
        let cm = object(Some("a"));
        assert!(duty.leading() && duty.delivers(&cm));
        // Stopped past its last renewal (SIGSTOP): by its own clock it does not lead, though
        // its election task has not said so yet.
        duty.confirm_leading_until(Instant::now());
        assert!(!duty.leading() && !duty.delivers(&cm));
        // A call waits; a renewal lets it go on.
        let renewer = {
            let duty = duty.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                duty.confirm_leading_until(Instant::now() + Duration::from_secs(60));
            })
        };
        let started = Instant::now();
        let call = duty.begin(Duration::from_secs(1), |d| d.delivers(&cm));
        assert!(call.is_some(), "renewed: delivered");
        assert!(started.elapsed() >= Duration::from_millis(90));
        drop(call);
        renewer.join().expect("renewer");
        // Lapsed again, then withdrawn: the call is not this replica's.
        duty.confirm_leading_until(Instant::now());
        let withdrawer = {
            let duty = duty.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                duty.step(Transition::Deposed);
            })
        };
        assert!(
            duty.begin(Duration::from_secs(1), |d| d.delivers(&cm))
                .is_none(),
            "withdrawn: not delivered"
        );
        withdrawer.join().expect("withdrawer");
    }

    #[test]
    fn a_write_is_waited_on_no_longer_than_the_confirmation_it_rests_on() {
        let duty = Duty::sharded(ShardKey::Namespace);
        let (shop, node) = (object(Some("shop")), object(None));
        assert_eq!(
            duty.confirmed_for(Some(&shop)),
            None,
            "nothing confirmed yet"
        );
        let now = Instant::now();
        duty.confirm_slices_until(now + Duration::from_secs(4));
        duty.confirm_leading_until(now + Duration::from_secs(9));
        let slice = duty.confirmed_for(Some(&shop)).expect("a slice's");
        assert!(slice <= Duration::from_secs(4) && slice > Duration::from_secs(3));
        let leader = duty.confirmed_for(Some(&node)).expect("the leader's");
        assert!(
            leader > Duration::from_secs(8),
            "cluster-scoped: the leader's"
        );
        assert!(
            duty.confirmed_for(None)
                .is_some_and(|d| d > Duration::from_secs(8))
        );
        duty.confirm_slices_until(now);
        assert_eq!(
            duty.confirmed_for(Some(&shop)),
            Some(Duration::ZERO),
            "lapsed"
        );
        assert_eq!(
            Duty::whole(true).confirmed_for(Some(&shop)),
            None,
            "no election"
        );
    }

    #[test]
    fn a_members_slices_need_a_current_renewal_too() {
        let duty = Duty::sharded(ShardKey::Namespace);
        let shop = object(Some("shop"));
        duty.set_slices(Slices::all(), Cuts::EQUAL);
        duty.confirm_slices_until(Instant::now() + Duration::from_secs(60));
        assert!(duty.delivers(&shop));
        duty.confirm_slices_until(Instant::now());
        assert!(
            !duty.delivers(&shop),
            "past its last renewal, not its slice"
        );
    }

    #[test]
    fn one_replica_delivers_everything_while_it_leads() {
        let duty = Duty::whole(false);
        assert!(!duty.delivers(&object(Some("a"))));
        assert!(!duty.delivers_any());
        assert!(!duty.runs_plugins(), "a follower's plugins wait on standby");
        assert_eq!(duty.step(Transition::Elected), Leadership::Activating);
        assert!(duty.runs_plugins());
        assert!(
            duty.delivers(&object(Some("a"))),
            "the leader's work is its own once elected, before every plugin delivers"
        );
        assert_eq!(duty.step(Transition::Activated), Leadership::Leading);
        assert!(duty.delivers(&object(Some("a"))));
        assert!(duty.delivers(&object(None)));
        // Slices mean nothing without sharding.
        assert_eq!(duty.share(), None);
    }

    #[test]
    fn a_member_delivers_its_slices_and_cluster_scoped_objects_only_while_it_leads() {
        let duty = Duty::sharded(ShardKey::Namespace);
        let (shop, other) = (object(Some("shop")), object(Some("payments")));
        assert_ne!(slice("shop"), slice("payments"), "distinct slices");
        assert!(!duty.delivers_any());
        duty.set_slices(Slices::none().with(slice("shop")), Cuts::EQUAL);
        assert!(duty.delivers_any());
        assert!(duty.delivers(&shop));
        assert!(!duty.delivers(&other));
        assert!(
            !duty.delivers(&object(None)),
            "cluster-scoped: the leader's"
        );
        assert!(duty.runs_plugins(), "a member's plugins run from the start");
        duty.step(Transition::Elected);
        duty.step(Transition::Activated);
        assert!(duty.delivers(&object(None)));
        assert!(!duty.delivers(&other), "leading does not take other slices");
        duty.step(Transition::Deposed);
        assert!(!duty.delivers(&object(None)) && duty.delivers(&shop));
        duty.set_slices(Slices::none(), Cuts::EQUAL);
        assert!(!duty.delivers(&shop), "a slice handed over stops at once");
    }

    #[test]
    fn a_change_counts_the_calls_that_began_before_it_until_they_end() {
        let duty = Duty::sharded(ShardKey::Namespace);
        let shop = object(Some("shop"));
        duty.set_slices(Slices::none().with(slice("shop")), Cuts::EQUAL);
        let running = duty
            .begin(Duration::from_secs(30), |d| d.delivers(&shop))
            .expect("its slice");
        assert_eq!(
            duty.calls_before_change(),
            0,
            "nothing changed since it began"
        );
        duty.set_slices(Slices::none(), Cuts::EQUAL);
        assert!(
            duty.begin(Duration::from_secs(1), |d| d.delivers(&shop))
                .is_none(),
            "no new call"
        );
        assert_eq!(
            duty.calls_before_change(),
            1,
            "the running call is waited for"
        );
        // As long as its own limit allows, not a fixed time.
        let until = duty.running_until();
        assert!(
            until >= Instant::now() + Duration::from_secs(29),
            "{until:?}"
        );
        assert!(
            until <= Instant::now() + Duration::from_secs(30),
            "{until:?}"
        );
        let unrelated = duty
            .begin(Duration::from_secs(1), |_| true)
            .expect("admitted");
        assert_eq!(
            duty.calls_before_change(),
            1,
            "calls begun after do not count"
        );
        drop(running);
        assert_eq!(duty.calls_before_change(), 0);
        drop(unrelated);
    }
}
