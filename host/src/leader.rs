//! Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection
//! does it: the leader renews the Lease every `retry` period; a candidate takes it over once
//! the record has not changed for `lease_duration` by its own clock (so clocks need not
//! agree); a leader that cannot renew for `renew_deadline` stops leading. On shutdown the
//! leader releases the Lease so a follower takes over at once.
//!
//! Like client-go's `LeaderCallbacks`, what leading means is the caller's: [`Elector::run`]
//! calls [`LeaderCallbacks::started_leading`] once the Lease is held and
//! [`LeaderCallbacks::stopped_leading`] the moment it is lost. No flag is shared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

/// Longest each call of a release may take (client-go's retry period, 2 s).
const RELEASE_WAIT: Duration = Duration::from_secs(2);

/// Why an attempt on the Lease failed.
#[derive(Debug, thiserror::Error)]
enum ElectionError {
    /// The API server refused or failed the request.
    #[error("{0}")]
    Api(kube::Error),
    /// The API server did not answer in time.
    #[error("no answer from the API server within {0:?}")]
    NoAnswer(Duration),
}

/// Timing and naming of an election.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (the pod name by default).
    pub identity: String,
    /// How long a Lease stays valid without renewal (client-go default: 15 s).
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before it gives up leading (10 s).
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew (2 s).
    pub retry: Duration,
}

impl ElectionConfig {
    /// client-go's default timings for `namespace/name` and `identity`.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }
}

/// The Lease record as last observed, and when (by our clock) it last changed.
struct Observed {
    record: Option<(String, String)>,
    since: Instant,
}

/// What a replica does when it gains and loses the leadership. Both may block; they run off
/// the async runtime's workers.
pub trait LeaderCallbacks: Send + Sync + 'static {
    /// This replica now holds the Lease: start leading. Returns once it leads.
    fn started_leading(&self);
    /// This replica no longer holds the Lease (or cannot tell): stop at once.
    fn stopped_leading(&self);
    /// A renewal succeeded: the Lease is this replica's, by its own monotonic clock, until
    /// `until` (when the renewal was sent, plus the renew deadline, which is shorter than the
    /// lease duration another replica waits out). Called before `started_leading` too.
    fn confirmed_until(&self, until: Instant) {
        let _ = until;
    }
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// Whether this replica holds the Lease, as far as it knows.
    holding: bool,
    observed: Observed,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Elector {
    /// An elector using `client`.
    pub fn new(client: kube::Client, config: ElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            holding: false,
            observed: Observed {
                record: None,
                since: Instant::now(),
            },
        }
    }

    /// [`Self::try_acquire_or_renew`] given at most `within`: a call the API server never
    /// answers fails at the bound instead of holding the elector (kube sets no read timeout).
    async fn attempt(&mut self, within: Duration) -> Result<bool, ElectionError> {
        match tokio::time::timeout(within, self.try_acquire_or_renew()).await {
            Ok(result) => result.map_err(ElectionError::Api),
            Err(_) => Err(ElectionError::NoAnswer(within)),
        }
    }

    /// One attempt to acquire or renew the Lease; true when this replica holds it.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = &self.config.identity;
        let duration = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let record = (
            holder.clone(),
            spec.renew_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
        );
        if self.observed.record.as_ref() != Some(&record) {
            self.observed = Observed {
                record: Some(record),
                since: Instant::now(),
            };
        }
        let expired = self.observed.since.elapsed() > self.config.lease_duration;
        if holder != *me && !holder.is_empty() && !expired {
            return Ok(false);
        }
        if holder != *me {
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(me.clone());
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now());
        // The resourceVersion in `lease` makes this a compare-and-swap.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease.
    async fn acquire(&mut self, callbacks: &dyn LeaderCallbacks) {
        loop {
            let sent = Instant::now();
            match self.attempt(self.config.renew_deadline).await {
                Ok(true) => {
                    callbacks.confirmed_until(sent + self.config.renew_deadline);
                    self.holding = true;
                    tracing::info!(lease = %format!("{}/{}", self.config.namespace, self.config.name), identity = %self.config.identity, "became the leader");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.config.name, "leader election: {e}"),
            }
            tokio::time::sleep(self.config.retry).await;
        }
    }

    /// Renews while leading; returns once renewing has failed for the renew deadline or
    /// another replica holds the Lease. Each attempt is bounded by what is left of the renew
    /// deadline, so a hung API server ends the leadership on time, before a follower's
    /// lease duration lets it take over.
    async fn hold(&mut self, callbacks: &dyn LeaderCallbacks) {
        // When the last successful renewal was sent: the Lease is ours by our own clock for
        // the renew deadline from then, and no longer.
        let mut last_renewal = Instant::now();
        let deadline = self.config.renew_deadline;
        let left = |last: Instant| deadline.saturating_sub(last.elapsed());
        loop {
            tokio::time::sleep(self.config.retry.min(left(last_renewal))).await;
            let within = left(last_renewal);
            if within.is_zero() {
                tracing::error!(lease = %self.config.name, "lease not renewed within {:?}: no longer leading", self.config.renew_deadline);
                break;
            }
            let sent = Instant::now();
            match self.attempt(within).await {
                Ok(true) => {
                    last_renewal = sent;
                    callbacks.confirmed_until(sent + deadline);
                }
                Ok(false) => {
                    tracing::error!(lease = %self.config.name, "another replica holds the lease: no longer leading");
                    break;
                }
                Err(e) => tracing::warn!(lease = %self.config.name, "cannot renew the lease: {e}"),
            }
        }
        self.holding = false;
    }

    /// Runs the election: waits for the Lease, leads while it is held, and returns once it is
    /// lost, having called `stopped_leading`. The caller decides what follows (client-go's
    /// callers exit).
    pub async fn run(&mut self, callbacks: Arc<dyn LeaderCallbacks>) {
        self.acquire(callbacks.as_ref()).await;
        let started = callbacks.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || started.started_leading()).await {
            tracing::error!("cannot start leading: {e}");
        }
        self.hold(callbacks.as_ref()).await;
        let stopped = callbacks.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || stopped.stopped_leading()).await {
            tracing::error!("cannot stop leading: {e}");
        }
    }

    /// Gives the Lease up if this replica holds it, so a follower takes over at once.
    pub async fn release(&mut self) {
        if !std::mem::take(&mut self.holding) {
            return;
        }
        // Each call bounded by the renew deadline, at most RELEASE_WAIT: a short lease's
        // retry period (400 ms for 3 s) is too little for a loaded API server, and a release
        // that times out leaves the follower to wait out the whole lease.
        let within = self.config.renew_deadline.min(RELEASE_WAIT);
        let Ok(Ok(Some(mut lease))) =
            tokio::time::timeout(within, self.api.get_opt(&self.config.name)).await
        else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.config.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        let params = PostParams::default();
        let replace = self.api.replace(&self.config.name, &params, &lease);
        match tokio::time::timeout(within, replace).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.config.name, "released the lease"),
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.config.name, "cannot release the lease: {e}")
            }
            Err(_) => {
                tracing::warn!(lease = %self.config.name, "cannot release the lease: no answer within {within:?}")
            }
        }
    }
}
