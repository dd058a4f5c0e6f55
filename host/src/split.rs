//! Replicas splitting the work (issue 60): this replica's membership, and each hand-over step
//! applied in order. Giving up a slice stops its delivery (the plugins' [`Duty`]) before the
//! informers drop it and before the Lease stops claiming it; taking one over opens delivery
//! before the informers list it, so its objects reach plugins as initial adds.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::informer::factory::InformerFactory;
use crate::members::{MembersConfig, Membership, View, handover};
use crate::shard::{Duty, SLICES, ShardKey, Share, Slices};

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
    ) -> Self {
        let key = sharding.key;
        // Nothing namespaced is kept or delivered before a slice is handed over.
        duty.set_slices(Slices::none());
        factory.set_share(Some(Share {
            key,
            slices: Slices::none(),
        }));
        let (claims_tx, claims) = watch::channel(Slices::none());
        let (view_tx, view) = watch::channel(View::default());
        let (stop, stopped) = oneshot::channel::<()>();
        let identity = sharding.members.identity.clone();
        let group = sharding.members.group.clone();
        let membership = Membership::new(client, sharding.members, claims);
        let membership = tokio::spawn(membership.run(view_tx, stopped));
        let handovers = Arc::new(AtomicU64::new(0));
        let follow = tokio::spawn(follow(
            identity.clone(),
            key,
            view.clone(),
            claims_tx,
            duty.clone(),
            factory,
            handovers.clone(),
        ));
        Self {
            identity,
            group,
            key,
            view,
            duty,
            handovers,
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
            handovers: self.handovers.load(Ordering::Relaxed),
        }
    }

    /// Stops delivering every slice, then leaves the group (its Lease deleted, so the others
    /// take its slices at once).
    pub async fn leave(mut self) {
        self.follow.abort();
        let _ = (&mut self.follow).await;
        self.duty.set_slices(Slices::none());
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

/// Applies each hand-over step as the view changes.
async fn follow(
    me: String,
    key: ShardKey,
    mut view: watch::Receiver<View>,
    claims: watch::Sender<Slices>,
    duty: Arc<Duty>,
    factory: Arc<InformerFactory>,
    handovers: Arc<AtomicU64>,
) {
    let mut delivering = Slices::none();
    loop {
        let seen = view.borrow_and_update().clone();
        let step = handover::next(&me, &seen, delivering);
        if step.deliver != delivering {
            let (gave, took) = (
                delivering.minus(step.deliver),
                step.deliver.minus(delivering),
            );
            // Delivery first: a slice given up stops before anything else (calls already
            // running on it end first), one taken over is open before its objects arrive.
            duty.set_slices(step.deliver);
            if !gave.is_empty() {
                drain(&duty).await;
            }
            factory.set_share(Some(Share {
                key,
                slices: step.deliver,
            }));
            handovers.fetch_add(u64::from(gave.count() + took.count()), Ordering::Relaxed);
            tracing::info!(
                identity = %me,
                delivering = step.deliver.count(),
                gave_up = gave.count(),
                took_over = took.count(),
                slices = %format!("{:016x}", step.deliver.bits()),
                "delivering {} of {SLICES} slices",
                step.deliver.count()
            );
            delivering = step.deliver;
        }
        // Written with the next renewal, after the delivery above has stopped.
        claims.send_if_modified(|c| std::mem::replace(c, step.claim) != step.claim);
        if view.changed().await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hand_over_waits_for_running_calls_as_long_as_their_limit_allows() {
        let duty = Duty::sharded(ShardKey::Namespace);
        duty.set_slices(Slices::none().with(3));
        // A call that ends on its own, well inside its limit: waited for to the end.
        let ending = duty
            .begin(Duration::from_secs(5), |_| true)
            .expect("admitted");
        duty.set_slices(Slices::none());
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
        duty.set_slices(Slices::none().with(3));
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
