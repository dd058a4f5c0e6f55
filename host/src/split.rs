//! Replicas splitting the work (issue 60): this replica's membership, and each hand-over step
//! applied in order. Giving up a slice stops its delivery (the plugins' [`Duty`]) before the
//! informers drop it and before the Lease stops claiming it; taking one over opens delivery
//! before the informers list it, so its objects reach plugins as initial adds.
//!
//! Sharding by namespace, the first member by name also watches the namespaces and, when
//! they clump in the group's slices, proposes balanced cuts (`shard::Cuts`); every member
//! takes a new table up through the hand-over rules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::gvk::Gvk;
use crate::informer::factory::{InformerFactory, Lease};
use crate::keeper::Keeper;
use crate::members::{Claim, MembersConfig, Membership, View, handover};
use crate::shard::{Cuts, Duty, SLICES, ShardKey, Share, Slices, Table, fnv1a64, needs_recut};
use crate::source::Scope;

/// How replicas split the work: their group and what objects are hashed by.
#[derive(Debug, Clone)]
pub struct Sharding {
    /// The group's Leases and timings, and this replica's identity.
    pub members: MembersConfig,
    /// What a namespaced object's slice is decided by.
    pub key: ShardKey,
}

/// What `/status` shows of a member.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SplitStatus {
    /// The group's name.
    pub group: String,
    /// This replica's identity in it.
    pub identity: String,
    /// What objects are hashed by: `namespace` or `uid`.
    pub key: String,
    /// The live members as last listed, with the number of slices each claims.
    pub members: BTreeMap<String, u32>,
    /// Slices this replica delivers now (of 64).
    pub delivering: u32,
    /// The slices it delivers, as a 64-bit mask (slice `i` is bit `i`), in hexadecimal.
    pub delivering_mask: String,
    /// Whether its own Lease is current (false: it delivers nothing).
    pub renewed: bool,
    /// Whether its own Lease was ever written: a replica that never joined is not ready.
    #[serde(default)]
    pub joined: bool,
    /// The generation of the cut table it delivers under (0: equal cuts).
    #[serde(default)]
    pub cuts_generation: u64,
    /// Slices taken over or given up since it started.
    pub handovers: u64,
}

/// A running member: its Lease and the task applying each hand-over step.
pub struct Split {
    identity: String,
    group: String,
    key: ShardKey,
    view: watch::Receiver<View>,
    duty: Arc<Duty>,
    handovers: Arc<AtomicU64>,
    generation: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    membership: JoinHandle<()>,
    follow: JoinHandle<()>,
}

impl Split {
    /// Joins the group through `client`; from now on `factory` keeps and `duty` delivers
    /// what the hand-over rules give this replica (nothing until its claim is listed).
    pub fn start(
        client: kube::Client,
        sharding: Sharding,
        duty: Arc<Duty>,
        factory: Arc<InformerFactory>,
        keeper: Option<Arc<Keeper>>,
    ) -> Self {
        let key = sharding.key;
        // Nothing namespaced is kept or delivered before a slice is handed over.
        duty.set_slices(Slices::none(), Cuts::EQUAL);
        factory.set_share(Some(Share {
            key,
            slices: Slices::none(),
            cuts: Cuts::EQUAL,
        }));
        // The namespaces, to cut slices by when they clump (cluster-scoped: every replica
        // keeps them whole).
        let namespaces = (key == ShardKey::Namespace)
            .then(|| factory.acquire(&Gvk::new("", "v1", "Namespace"), &Scope::everything()));
        let (claims_tx, claims) = watch::channel(Claim::default());
        let (view_tx, view) = watch::channel(View::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let identity = sharding.members.identity.clone();
        let group = sharding.members.group.clone();
        let membership = Membership::new(client, sharding.members, claims).confirming(duty.clone());
        let membership = tokio::spawn(membership.run(view_tx, stopped));
        let handovers = Arc::new(AtomicU64::new(0));
        let generation = Arc::new(AtomicU64::new(0));
        let follow = tokio::spawn(
            Follower {
                me: identity.clone(),
                key,
                view: view.clone(),
                claims: claims_tx,
                duty: duty.clone(),
                factory,
                handovers: handovers.clone(),
                generation: generation.clone(),
                namespaces,
                keeper,
            }
            .run(),
        );
        Self {
            identity,
            group,
            key,
            view,
            duty,
            handovers,
            generation,
            stop: Some(stop),
            membership,
            follow,
        }
    }

    /// What `/status` shows of this member.
    pub fn status(&self) -> SplitStatus {
        let view = self.view.borrow().clone();
        let delivering = self.duty.slices();
        SplitStatus {
            group: self.group.clone(),
            identity: self.identity.clone(),
            key: self.key.name().into(),
            members: view
                .members
                .iter()
                .map(|(m, s)| (m.clone(), s.count()))
                .collect(),
            delivering: delivering.count(),
            delivering_mask: format!("{:016x}", delivering.bits()),
            renewed: view.renewed,
            joined: view.joined,
            handovers: self.handovers.load(Ordering::Relaxed),
            cuts_generation: self.generation.load(Ordering::Relaxed),
        }
    }

    /// Stops delivering every slice, then leaves the group (its Lease deleted, so the others
    /// take its slices at once).
    pub async fn leave(mut self) {
        self.follow.abort();
        let _ = (&mut self.follow).await;
        self.duty.set_slices(
            Slices::none(),
            self.duty.share().map(|s| s.cuts).unwrap_or_default(),
        );
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.membership).await;
    }
}

impl Drop for Split {
    fn drop(&mut self) {
        self.follow.abort();
        self.membership.abort();
    }
}

/// Time the calls running when a slice is given up get beyond the longest each may run by
/// the wall clock (its plugin's deadline times ten), for the writes they stage.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Waits until the calls that began before the last change of `duty` have ended, or the
/// latest of them has overrun its limit by [`DRAIN_GRACE`].
async fn drain(duty: &Duty) {
    let until = duty.running_until() + DRAIN_GRACE;
    while duty.calls_before_change() > 0 {
        if std::time::Instant::now() >= until {
            tracing::warn!(
                "calls still running {DRAIN_GRACE:?} past their longest time after their slices were given up: handing over anyway"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How often the first member looks at the namespaces for clumping, besides each change
/// of the view.
const RECHECK: Duration = Duration::from_secs(5);

/// The least time between two tables this member proposes: each makes every member list its
/// namespaced types again.
const RECUT_PAUSE: Duration = Duration::from_secs(60);

/// What applies the hand-over steps of one member.
struct Follower {
    me: String,
    key: ShardKey,
    view: watch::Receiver<View>,
    claims: watch::Sender<Claim>,
    duty: Arc<Duty>,
    factory: Arc<InformerFactory>,
    handovers: Arc<AtomicU64>,
    /// The generation of the table delivered under.
    generation: Arc<AtomicU64>,
    /// The namespaces, when slices are cut by namespace.
    namespaces: Option<Lease>,
    /// Where plugin state is kept, read when slices are taken over and written when given up.
    keeper: Option<Arc<Keeper>>,
}

impl Follower {
    /// Applies each hand-over step as the view changes.
    async fn run(mut self) {
        let mut delivering = Slices::none();
        let mut cuts = Cuts::EQUAL;
        let mut proposal: Option<Table> = None;
        let mut proposed_at: Option<Instant> = None;
        loop {
            let seen = self.view.borrow_and_update().clone();
            if proposal.is_none() && proposed_at.is_none_or(|t| t.elapsed() >= RECUT_PAUSE) {
                proposal = self.recut(&seen);
                if proposal.is_some() {
                    proposed_at = Some(Instant::now());
                }
            }
            let step = handover::next(&self.me, &seen, delivering, proposal);
            // Proposed until this member's own Lease, as listed, carries it (or a newer one).
            if let Some(p) = proposal
                && seen
                    .tables
                    .get(&self.me)
                    .is_some_and(|own| !p.newer_than(own))
            {
                proposal = None;
            }
            if step.deliver != delivering || step.table.cuts != cuts {
                // Under new cuts, the same slice numbers are other hashes: all given up.
                let kept = if step.table.cuts == cuts {
                    delivering
                } else {
                    Slices::none()
                };
                let (gave, took) = (
                    delivering.minus(kept.intersect(step.deliver)),
                    step.deliver.minus(kept),
                );
                let share = |slices| Share {
                    key: self.key,
                    slices,
                    cuts: step.table.cuts,
                };
                // A slice given up stops first (calls already running on it end, its plugin
                // state is written), then one taken over opens, once its state is read and
                // before its objects arrive.
                if !gave.is_empty() {
                    // Under new cuts nothing stays (`kept` is empty).
                    self.duty
                        .set_slices(kept.intersect(step.deliver), step.table.cuts);
                    drain(&self.duty).await;
                    let given = Share {
                        key: self.key,
                        slices: gave,
                        cuts,
                    };
                    self.hand_state_over(&given).await;
                }
                let mut deliver = step.deliver;
                if !took.is_empty()
                    && let Some(keeper) = &self.keeper
                    && let Err(e) = keeper.load_parts(&share(took)).await
                {
                    tracing::warn!("{e}: slices taken over wait for their plugin state");
                    deliver = deliver.minus(took);
                }
                self.duty.set_slices(deliver, step.table.cuts);
                self.factory.set_share(Some(share(deliver)));
                let opened = took.intersect(deliver);
                self.handovers
                    .fetch_add(u64::from(gave.count() + opened.count()), Ordering::Relaxed);
                self.generation
                    .store(step.table.generation, Ordering::Relaxed);
                tracing::info!(
                    identity = %self.me,
                    delivering = deliver.count(),
                    gave_up = gave.count(),
                    took_over = opened.count(),
                    slices = %format!("{:016x}", deliver.bits()),
                    generation = step.table.generation,
                    cuts = %step.table.cuts.to_text(),
                    "delivering {} of {SLICES} slices",
                    deliver.count()
                );
                delivering = deliver;
                cuts = step.table.cuts;
            }
            // Written with the next renewal, after the delivery above has stopped.
            let claim = (step.claim, step.table);
            self.claims
                .send_if_modified(|c| std::mem::replace(c, claim) != claim);
            tokio::select! {
                changed = self.view.changed() => if changed.is_err() { break },
                // Clumping namespaces, or a slice waiting for its state.
                () = tokio::time::sleep(RECHECK) => {}
            }
        }
    }

    /// Writes the plugin state of `given` (slices given up) before their claim is let go,
    /// trying again while this replica's Lease is current; cut off, it lets the state go
    /// unwritten (the next holder reads what was last written, at most a second old).
    async fn hand_state_over(&self, given: &Share) {
        let Some(keeper) = &self.keeper else { return };
        loop {
            match keeper.flush_parts(given).await {
                Ok(_) => return,
                Err(e) if self.view.borrow().renewed => {
                    tracing::warn!(
                        "{e}: plugin state of slices given up not written yet; trying again before they are let go"
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => {
                    tracing::error!(
                        "{e}: cut off from the API server, the plugin state of slices given up since the last write is lost"
                    );
                    keeper.forget_parts(given).await;
                    return;
                }
            }
        }
    }

    /// A table to propose: balanced cuts, when this member is the first by name, sees the
    /// namespaces whole, and they clump under the group's table.
    fn recut(&self, seen: &View) -> Option<Table> {
        let namespaces = self.namespaces.as_ref()?;
        let first = seen.members.keys().next();
        if !seen.renewed || first != Some(&self.me) || !namespaces.informer().has_synced() {
            return None;
        }
        let hashes: Vec<u64> = namespaces
            .informer()
            .store()
            .list()
            .iter()
            .map(|n| fnv1a64(n.name()))
            .collect();
        let group = handover::group_table(seen, None);
        if !needs_recut(&group.cuts, &hashes) {
            return None;
        }
        let table = Table {
            generation: group.generation.saturating_add(1),
            cuts: Cuts::balanced(&hashes),
        };
        tracing::info!(
            identity = %self.me,
            namespaces = hashes.len(),
            fullest = group.cuts.fullest(&hashes),
            generation = table.generation,
            "namespaces clump in the group's slices: proposing cuts balanced over them"
        );
        Some(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hand_over_waits_for_running_calls_as_long_as_their_limit_allows() {
        let duty = Duty::sharded(ShardKey::Namespace);
        duty.set_slices(Slices::none().with(3), Cuts::EQUAL);
        // A call that ends on its own, well inside its limit: waited for to the end.
        let ending = duty
            .begin(Duration::from_secs(5), |_| true)
            .expect("admitted");
        duty.set_slices(Slices::none(), Cuts::EQUAL);
        let started = std::time::Instant::now();
        tokio::join!(drain(&duty), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(ending);
        });
        let ended = started.elapsed();
        assert!(ended >= Duration::from_millis(300), "{ended:?}");
        assert!(ended < Duration::from_secs(5), "{ended:?}");

        // A call that overruns its limit of 100 ms: given up on a grace after it, not after
        // a fixed time.
        let _stuck = duty
            .begin(Duration::from_millis(100), |_| true)
            .expect("admitted");
        duty.set_slices(Slices::none().with(3), Cuts::EQUAL);
        let started = std::time::Instant::now();
        drain(&duty).await;
        let gave_up = started.elapsed();
        assert!(gave_up >= DRAIN_GRACE, "{gave_up:?}");
        assert!(
            gave_up < DRAIN_GRACE + Duration::from_secs(2),
            "{gave_up:?}"
        );
    }
}
