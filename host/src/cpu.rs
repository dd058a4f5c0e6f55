//! What plugins' CPU costs over time. A call's deadline bounds one call; these bound a plugin's
//! share: each plugin has a budget of CPU time per second ([`CpuBudget`]), and all plugins
//! together one ([`CpuPool`], like a cgroup's CPU quota for the plugins).
//!
//! Both are token buckets of CPU time, refilled at their rate up to one second of it. Every
//! call's CPU (the thread's CPU clock: the plugin's code and the host calls it makes), and the
//! host's work done for a plugin (comparing its change filters), is charged to its budget and
//! the pool. A plugin whose budget is in debt waits until it is paid off; while the pool is in
//! debt, every plugin that has spent more than half its own burst lately waits until the pool
//! is paid off, and a plugin that has spent little (the neighbour with quick calls) does not
//! wait at all. The waits happen between calls and inside a running call, at its deadline's
//! checkpoints ([`CHECK_EVERY`]), so a plugin spinning to its deadline is held to its share
//! too. A throttled call's wait counts towards its wall-clock cap (`wasm/deadline.rs`).

use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a running call of a budgeted plugin is charged and, when in debt, held.
pub const CHECK_EVERY: Duration = Duration::from_millis(20);

/// Default CPU a plugin may use per second: half a core.
pub const DEFAULT_MILLIS_PER_SECOND: u32 = 500;

/// A token bucket of CPU time.
#[derive(Debug)]
struct Account {
    /// CPU seconds that may still be used; negative when in debt.
    balance: f64,
    at: Instant,
    /// CPU seconds added per second.
    rate: f64,
    /// Most CPU seconds held (one second of the rate).
    burst: f64,
}

impl Account {
    fn new(millis_per_second: u32, now: Instant) -> Self {
        let rate = f64::from(millis_per_second) / 1000.0;
        Self {
            balance: rate,
            at: now,
            rate,
            burst: rate,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.balance = (self.balance + elapsed * self.rate).min(self.burst);
    }

    /// How long until the debt, if any, is paid off.
    fn until_paid(&self) -> Duration {
        if self.balance >= 0.0 || self.rate <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((-self.balance / self.rate).min(3600.0))
        }
    }
}

/// All plugins' CPU together: at most this much per second.
#[derive(Debug)]
pub struct CpuPool {
    account: Mutex<Account>,
    millicores: u32,
}

impl CpuPool {
    /// A pool of `millicores` (1000: one core busy all the time); 0: no pool limit.
    pub fn new(millicores: u32) -> Self {
        Self {
            account: Mutex::new(Account::new(millicores, Instant::now())),
            millicores,
        }
    }

    /// The default: every core but one, at least one.
    pub fn default_millicores() -> u32 {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        u32::try_from(cores.saturating_sub(1).max(1))
            .unwrap_or(u32::MAX / 1000)
            .saturating_mul(1000)
    }

    /// Its size in millicores (0: unlimited).
    pub fn millicores(&self) -> u32 {
        self.millicores
    }

    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.account.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One plugin's CPU over time: its budget, what it used and how long it was held.
#[derive(Debug)]
pub struct CpuBudget {
    own: Mutex<Account>,
    /// Its per-second budget in milliseconds (0: none of its own, only the pool).
    millis_per_second: u32,
    pool: std::sync::Arc<CpuPool>,
    used_us: AtomicU64,
    throttled_us: AtomicU64,
    throttling: AtomicBool,
}

impl CpuBudget {
    /// A budget of `millis_per_second` (0: only the pool's bound) drawing on `pool`.
    pub fn new(millis_per_second: u32, pool: std::sync::Arc<CpuPool>) -> Self {
        Self {
            own: Mutex::new(Account::new(millis_per_second, Instant::now())),
            millis_per_second,
            pool,
            used_us: AtomicU64::new(0),
            throttled_us: AtomicU64::new(0),
            throttling: AtomicBool::new(false),
        }
    }

    /// Its per-second budget in milliseconds (0: none of its own).
    pub fn millis_per_second(&self) -> u32 {
        self.millis_per_second
    }

    /// Charges `used` CPU time, at `now`, to the plugin and the pool.
    pub fn charge(&self, used: Duration, now: Instant) {
        if used.is_zero() {
            return;
        }
        let us = u64::try_from(used.as_micros()).unwrap_or(u64::MAX);
        self.used_us.fetch_add(us, Ordering::Relaxed);
        let secs = used.as_secs_f64();
        if self.millis_per_second > 0 {
            let mut own = self.own();
            own.refill(now);
            own.balance -= secs;
        }
        if self.pool.millicores > 0 {
            let mut pool = self.pool.account();
            pool.refill(now);
            pool.balance -= secs;
        }
    }

    /// How long the plugin must wait, at `now`, before it may use more CPU: until its own
    /// debt is paid, and, while the pool is in debt and it has spent more than half its
    /// burst lately, until the pool's is.
    pub fn wait(&self, now: Instant) -> Duration {
        let (own_wait, spent_lately) = if self.millis_per_second > 0 {
            let mut own = self.own();
            own.refill(now);
            (own.until_paid(), own.balance < own.burst / 2.0)
        } else {
            (Duration::ZERO, true)
        };
        let pool_wait = if self.pool.millicores > 0 && spent_lately {
            let mut pool = self.pool.account();
            pool.refill(now);
            pool.until_paid()
        } else {
            Duration::ZERO
        };
        own_wait.max(pool_wait)
    }

    /// Waits on the calling thread as [`Self::wait`] says, at most `longest`, in steps of at
    /// most `step` until `stop` says to give up; returns how long it waited.
    pub fn hold(&self, longest: Duration, step: Duration, stop: impl Fn() -> bool) -> Duration {
        let started = Instant::now();
        loop {
            let waited = started.elapsed();
            let wait = self
                .wait(Instant::now())
                .min(longest.saturating_sub(waited));
            if wait.is_zero() || stop() {
                break;
            }
            self.throttling.store(true, Ordering::Relaxed);
            std::thread::sleep(wait.min(step));
        }
        self.throttling.store(false, Ordering::Relaxed);
        let waited = started.elapsed();
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        // A look that found nothing owed is not a wait.
        if waited > Duration::from_micros(50) {
            self.throttled_us.fetch_add(us, Ordering::Relaxed);
        }
        waited
    }

    /// CPU time charged so far, in microseconds.
    pub fn used_us(&self) -> u64 {
        self.used_us.load(Ordering::Relaxed)
    }

    /// Time spent held for its budget or the pool's, in microseconds.
    pub fn throttled_us(&self) -> u64 {
        self.throttled_us.load(Ordering::Relaxed)
    }

    /// Whether it is held right now.
    pub fn throttling(&self) -> bool {
        self.throttling.load(Ordering::Relaxed)
    }

    /// Whether it is in debt (its own or, having spent lately, the pool's) at `now`: work done
    /// for it that it may skip is skipped.
    pub fn in_debt(&self, now: Instant) -> bool {
        !self.wait(now).is_zero()
    }

    fn own(&self) -> std::sync::MutexGuard<'_, Account> {
        self.own.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_plugin_past_its_budget_waits_until_it_is_paid_off() {
        let pool = Arc::new(CpuPool::new(0));
        let b = CpuBudget::new(100, pool);
        let t0 = Instant::now();
        assert_eq!(b.wait(t0), Duration::ZERO, "starts with a second's budget");
        b.charge(Duration::from_millis(300), t0);
        // 100 ms held, 300 used: 200 ms of debt at 100 ms per second.
        let wait = b.wait(t0);
        assert!(
            wait > Duration::from_millis(1990) && wait <= Duration::from_millis(2000),
            "{wait:?}"
        );
        assert!(b.in_debt(t0));
        let later = t0 + Duration::from_secs(2);
        assert_eq!(b.wait(later), Duration::ZERO, "paid off two seconds later");
        assert_eq!(b.used_us(), 300_000);
    }

    #[test]
    fn the_pool_holds_those_that_spent_and_lets_the_light_ones_through() {
        let pool = Arc::new(CpuPool::new(1000));
        let heavy = CpuBudget::new(1000, pool.clone());
        let light = CpuBudget::new(1000, pool.clone());
        let t0 = Instant::now();
        // The heavy one takes 900 ms of its own second, then the pool goes 500 ms in debt.
        heavy.charge(Duration::from_millis(900), t0);
        heavy.charge(Duration::from_millis(600), t0);
        let wait = heavy.wait(t0);
        assert!(wait >= Duration::from_millis(499), "{wait:?}");
        assert_eq!(
            light.wait(t0),
            Duration::ZERO,
            "a plugin that spent nothing is not held by the pool"
        );
        light.charge(Duration::from_millis(600), t0);
        assert!(
            light.wait(t0) >= Duration::from_millis(999),
            "once it has spent more than half its burst, it waits for the pool too"
        );
    }

    #[test]
    fn no_budget_and_no_pool_never_wait() {
        let b = CpuBudget::new(0, Arc::new(CpuPool::new(0)));
        b.charge(Duration::from_secs(100), Instant::now());
        assert_eq!(b.wait(Instant::now()), Duration::ZERO);
        let waited = b.hold(Duration::from_secs(5), Duration::from_millis(1), || false);
        assert!(waited < Duration::from_millis(50), "{waited:?}");
        assert_eq!(b.throttled_us(), 0);
    }

    #[test]
    fn holding_stops_when_asked_and_counts_the_wait() {
        let b = CpuBudget::new(10, Arc::new(CpuPool::new(0)));
        b.charge(Duration::from_secs(10), Instant::now());
        let waited = b.hold(Duration::from_millis(30), Duration::from_millis(5), || {
            false
        });
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        assert!(b.throttled_us() >= 30_000);
        assert!(!b.throttling(), "no longer held once it returned");
        let stopped = b.hold(Duration::from_secs(60), Duration::from_millis(5), || true);
        assert!(stopped < Duration::from_secs(1), "{stopped:?}");
    }
}
