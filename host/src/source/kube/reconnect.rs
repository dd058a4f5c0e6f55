//! When a reflector tries again after a failure: client-go's backoff (800 ms doubling to
//! 30 s, jittered within the cap, reset once the API server answered a list or a watch
//! delivered), cut short the moment the API server is seen back.
//!
//! Backoff protects a struggling server from a reconnect storm, but it also leaves a client
//! blind for up to its cap after the server is healthy again (kube-runtime's jitter could
//! stretch a 30 s step to 60 s: 78 s were seen after a restart). So while any reflector of a
//! source waits out a failure, one probe asks the server's `/readyz` once a second (each
//! probe bounded by a second); when a probe that had failed first succeeds, every waiting
//! reflector tries at once. A failure particular to one type (a 403, a type not served) does
//! not wake it early: the first probe succeeds, and nothing was down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;

/// First delay after a failure.
pub const BASE: Duration = Duration::from_millis(800);
/// Longest delay.
pub const CAP: Duration = Duration::from_secs(30);
/// How often the API server is probed while reflectors wait.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often the API server is probed when readiness follows it, and how long a probe may
/// take.
pub const WATCH_EVERY: Duration = Duration::from_secs(5);
/// Probes in a row without an answer after which the API server counts as not answering.
pub const WATCH_FAILURES: u32 = 2;

/// Delays between attempts: [`BASE`] doubling to [`CAP`], each jittered down by up to half,
/// never above the cap.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    seed: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
            | 1;
        Self { next: BASE, seed }
    }
}

impl Backoff {
    /// The delay before the next attempt.
    pub fn delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(CAP);
        // xorshift: spreads many clients' retries; no need for a cryptographic source.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let fraction = 0.5 + (self.seed % 1000) as f64 / 2000.0;
        step.mul_f64(fraction)
    }

    /// Starts over at [`BASE`]: the server answered.
    pub fn reset(&mut self) {
        self.next = BASE;
    }
}

/// Whether the API server answers, as far as the probe knows; shared by a source's reflectors.
pub struct Health {
    client: Client,
    probing: AtomicBool,
    /// False while the last probe failed.
    reachable: AtomicBool,
    /// Moves on every recovery: a probe that succeeded after failing.
    recoveries: watch::Sender<u64>,
}

impl Health {
    /// The health of the API server behind `client`.
    pub fn new(client: Client) -> Arc<Self> {
        Arc::new(Self {
            client,
            probing: AtomicBool::new(false),
            reachable: AtomicBool::new(true),
            recoveries: watch::channel(0).0,
        })
    }

    /// False while the API server does not answer its probe.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    /// Probes the API server every [`WATCH_EVERY`] whatever the reflectors do, so that a
    /// server that hangs (connections held, nothing answered, which a watch notices only
    /// after its silence bound, 90 s) shows in [`Self::reachable`] after [`WATCH_FAILURES`]
    /// probes in a row found no answer: within 20 s. Ends when the health is dropped.
    pub fn keep_watching(self: &Arc<Self>) {
        let health = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failures = 0;
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                let Some(health) = health.upgrade() else {
                    return;
                };
                if health.answers_within(WATCH_EVERY).await {
                    if !health.reachable.swap(true, Ordering::Relaxed) {
                        tracing::info!("the API server answers again: reconnecting now");
                        health.recoveries.send_modify(|n| *n += 1);
                    }
                    failures = 0;
                } else {
                    failures += 1;
                    if failures >= WATCH_FAILURES && health.reachable.swap(false, Ordering::Relaxed)
                    {
                        tracing::warn!(
                            "the API server has not answered {failures} probes of /readyz in a row"
                        );
                    }
                }
            }
        });
    }

    /// Whether the API server answers a `GET /readyz` within `bound`.
    async fn answers_within(&self, bound: Duration) -> bool {
        let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
            return false;
        };
        tokio::time::timeout(bound, self.client.request_text(request))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits `delay` after a failure, or less if the API server is seen back meanwhile.
    pub async fn wait(self: &Arc<Self>, delay: Duration) {
        let mut recoveries = self.recoveries.subscribe();
        recoveries.mark_unchanged();
        self.probe();
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = recoveries.changed() => {}
        }
    }

    /// Starts probing unless a probe already runs.
    fn probe(self: &Arc<Self>) {
        if self.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let health = self.clone();
        tokio::spawn(async move {
            let mut failed = false;
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                if health.recoveries.receiver_count() == 0 {
                    break;
                }
                let answered = health.answers_within(PROBE_EVERY).await;
                health.reachable.store(answered, Ordering::Relaxed);
                if answered {
                    if failed {
                        tracing::info!("the API server answers again: reconnecting now");
                        health.recoveries.send_modify(|n| *n += 1);
                    }
                    break;
                }
                failed = true;
            }
            health.probing.store(false, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_to_the_cap_jittered_below_it() {
        let mut b = Backoff::default();
        let delays: Vec<Duration> = (0..12).map(|_| b.delay()).collect();
        let steps = [
            0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0,
        ];
        for (delay, step) in delays.iter().zip(steps) {
            let step = Duration::from_secs_f64(step);
            assert!(
                *delay <= step && *delay >= step / 2,
                "{delay:?} for {step:?}"
            );
        }
        b.reset();
        assert!(b.delay() <= BASE);
    }
}
