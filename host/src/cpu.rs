//! What plugins' CPU costs over time. A call's deadline bounds one call; these bound a plugin's
//! share: each plugin has a budget of CPU time per second ([`CpuBudget`]), and all plugins
//! together one ([`CpuPool`], like a cgroup's CPU quota for the plugins).
//!
//! Both are token buckets of CPU time, refilled at their rate up to one second of it. Every
//! call's CPU (the thread's CPU clock: the plugin's code and the host calls it makes), and the
//! host's work done for a plugin (comparing its change filters), is charged to its budget and
//! the pool. A plugin whose budget is in debt waits until it is paid off; while the pool is in
//! debt, every plugin using more than its max-min fair share lately (what the lighter users
//! leave of the pool's rate, split among the rest; each one's use an average over about a
//! second) waits until the pool is paid off, and a plugin using less (the neighbour with
//! quick calls) does not wait at all. The waits happen between calls and inside a running
//! call, at its deadline's checkpoints ([`CHECK_EVERY`]), so a plugin spinning to its
//! deadline is held to its share too. A throttled call's wait counts towards its wall-clock cap (`wasm/deadline.rs`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// How often a running call of a budgeted plugin is charged and, when in debt, held.
pub const CHECK_EVERY: Duration = Duration::from_millis(20);

/// Default CPU a plugin may use per second: a core (its dispatch thread alone uses at most
/// that; its admission reviews run beside it). Sharing between many plugins is the pool's.
pub const DEFAULT_MILLIS_PER_SECOND: u32 = 1000;

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

/// How long a plugin's recent CPU use is remembered (the time constant of its average).
const RECENT: Duration = Duration::from_secs(1);
/// A plugin using less than this (a share of one core) counts as idle for the pool's fair
/// share.
const ACTIVE: f64 = 0.005;
/// How long a worked-out fair share is used before it is worked out again.
const FAIR_FOR: Duration = Duration::from_millis(100);

/// A plugin's recent CPU use: an exponential average of its rate, in CPU seconds a second.
#[derive(Debug)]
struct Recent {
    rate: f64,
    at: Instant,
}

impl Recent {
    /// The rate as of `now`.
    fn at(&self, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.rate * (-elapsed / RECENT.as_secs_f64()).exp()
    }

    /// Adds `secs` of CPU used at `now`.
    fn add(&mut self, secs: f64, now: Instant) {
        self.rate = self.at(now) + secs / RECENT.as_secs_f64();
        self.at = self.at.max(now);
    }
}

/// A plugin's own account and recent use, under one lock.
#[derive(Debug)]
struct Own {
    account: Account,
    recent: Recent,
}

/// The pool's account, its members, and the fair share last worked out.
#[derive(Debug)]
struct Pooled {
    account: Account,
    members: Vec<Weak<CpuBudget>>,
    /// CPU seconds a second each active member may use while the pool is in debt.
    fair: f64,
    fair_at: Option<Instant>,
}

/// All plugins' CPU together: at most this much per second. While it is in debt, a plugin
/// using more than its max-min fair share of the pool lately waits until the debt is paid;
/// one using less does not.
#[derive(Debug)]
pub struct CpuPool {
    state: Mutex<Pooled>,
    millicores: u32,
}

impl CpuPool {
    /// A pool of `millicores` (1000: one core busy all the time); 0: no pool limit.
    pub fn new(millicores: u32) -> Self {
        Self {
            state: Mutex::new(Pooled {
                account: Account::new(millicores, Instant::now()),
                members: Vec::new(),
                fair: f64::INFINITY,
                fair_at: None,
            }),
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

    fn state(&self) -> std::sync::MutexGuard<'_, Pooled> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Pooled {
    /// The fair share at `now`, worked out again when older than [`FAIR_FOR`]. Locks each
    /// member's own account while the pool's is held (never the other way round).
    fn fair(&mut self, now: Instant) -> f64 {
        if self
            .fair_at
            .is_some_and(|at| now.saturating_duration_since(at) < FAIR_FOR)
        {
            return self.fair;
        }
        self.members.retain(|m| m.strong_count() > 0);
        let recent: Vec<f64> = self
            .members
            .iter()
            .filter_map(Weak::upgrade)
            .map(|m| m.own().recent.at(now))
            .filter(|&r| r >= ACTIVE)
            .collect();
        self.fair = water_level(self.account.rate, recent);
        self.fair_at = Some(now);
        self.fair
    }
}

/// The max-min fair share of `rate` among users using `recent` each: what those using less
/// leave is shared by the rest, so a light user is never counted against a heavy one.
/// Infinite when all of them together use no more than `rate`.
fn water_level(rate: f64, mut recent: Vec<f64>) -> f64 {
    recent.sort_by(f64::total_cmp);
    let mut left = rate;
    let count = recent.len();
    for (i, r) in recent.into_iter().enumerate() {
        let share = left / (count - i) as f64;
        if r > share {
            return share;
        }
        left -= r;
    }
    f64::INFINITY
}

/// One plugin's CPU over time: its budget, what it used and how long it was held.
#[derive(Debug)]
pub struct CpuBudget {
    own: Mutex<Own>,
    /// Its per-second budget in milliseconds (0: none of its own, only the pool).
    millis_per_second: u32,
    pool: Arc<CpuPool>,
    used_us: AtomicU64,
    throttled_us: AtomicU64,
    throttling: AtomicBool,
}

impl CpuBudget {
    /// A budget of `millis_per_second` (0: only the pool's bound) drawing on `pool`.
    pub fn new(millis_per_second: u32, pool: Arc<CpuPool>) -> Arc<Self> {
        let now = Instant::now();
        let budget = Arc::new(Self {
            own: Mutex::new(Own {
                account: Account::new(millis_per_second, now),
                recent: Recent { rate: 0.0, at: now },
            }),
            millis_per_second,
            pool: pool.clone(),
            used_us: AtomicU64::new(0),
            throttled_us: AtomicU64::new(0),
            throttling: AtomicBool::new(false),
        });
        pool.state().members.push(Arc::downgrade(&budget));
        budget
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
        {
            let mut own = self.own();
            own.recent.add(secs, now);
            if self.millis_per_second > 0 {
                own.account.refill(now);
                own.account.balance -= secs;
            }
        }
        if self.pool.millicores > 0 {
            let mut pool = self.pool.state();
            pool.account.refill(now);
            pool.account.balance -= secs;
        }
    }

    /// How long the plugin must wait, at `now`, before it may use more CPU: until its own
    /// debt is paid, and, while the pool is in debt and it uses more than its fair share,
    /// until the pool's is.
    pub fn wait(&self, now: Instant) -> Duration {
        let (own_wait, recent) = {
            let mut own = self.own();
            let wait = if self.millis_per_second > 0 {
                own.account.refill(now);
                own.account.until_paid()
            } else {
                Duration::ZERO
            };
            (wait, own.recent.at(now))
        };
        let pool_wait = if self.pool.millicores > 0 {
            let mut pool = self.pool.state();
            pool.account.refill(now);
            let debt = pool.account.until_paid();
            if !debt.is_zero() && recent >= pool.fair(now) {
                debt
            } else {
                Duration::ZERO
            }
        } else {
            Duration::ZERO
        };
        own_wait.max(pool_wait)
    }

    /// Waits on the calling thread as [`Self::wait`] says, at most `longest`, in steps of at
    /// most `step` until `stop` says to give up; returns how long it waited.
    pub fn hold(&self, longest: Duration, step: Duration, stop: impl Fn() -> bool) -> Duration {
        let started = Instant::now();
        let mut held = false;
        loop {
            let waited = started.elapsed();
            let wait = self
                .wait(Instant::now())
                .min(longest.saturating_sub(waited));
            if wait.is_zero() || stop() {
                break;
            }
            held = true;
            self.throttling.store(true, Ordering::Relaxed);
            std::thread::sleep(wait.min(step));
        }
        self.throttling.store(false, Ordering::Relaxed);
        // A look that found nothing owed is not a wait, however long the look took.
        if !held {
            return Duration::ZERO;
        }
        let waited = started.elapsed();
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.throttled_us.fetch_add(us, Ordering::Relaxed);
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

    fn own(&self) -> std::sync::MutexGuard<'_, Own> {
        self.own.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
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
    fn the_pool_holds_those_above_their_fair_share_and_lets_the_light_ones_through() {
        let pool = Arc::new(CpuPool::new(1000));
        // No budget of their own: only the pool's, as when many plugins each get less of a
        // busy machine than their own budget allows.
        let heavy: Vec<_> = (0..4).map(|_| CpuBudget::new(0, pool.clone())).collect();
        let light = CpuBudget::new(0, pool.clone());
        let t0 = Instant::now();
        // Four heavy ones use 400 ms each within a moment: the pool is 610 ms in debt.
        for h in &heavy {
            h.charge(Duration::from_millis(400), t0);
        }
        light.charge(Duration::from_millis(10), t0);
        for h in &heavy {
            let wait = h.wait(t0);
            assert!(wait >= Duration::from_millis(599), "{wait:?}");
        }
        assert_eq!(
            light.wait(t0),
            Duration::ZERO,
            "a plugin under its fair share (1000 ms over 5) is not held"
        );
        // Once the debt (1,610 ms used of a second's burst) is paid, nobody waits.
        assert_eq!(
            heavy[0].wait(t0 + Duration::from_millis(610)),
            Duration::ZERO
        );
    }

    #[test]
    fn the_fair_share_is_what_the_light_users_leave_split_among_the_heavy() {
        // A second of CPU, three light users at 10 ms a second and sixteen spinners: the
        // light ones are under the level, the spinners share the rest.
        let mut recent = vec![0.01; 3];
        recent.extend(std::iter::repeat_n(0.2, 16));
        let level = water_level(1.0, recent);
        assert!((level - 0.97 / 16.0).abs() < 1e-9, "{level}");
        // Everyone together within the rate: nobody is over their share.
        assert_eq!(water_level(1.0, vec![0.3, 0.3, 0.3]), f64::INFINITY);
        // Plain division would put this light user (25 ms/s among 40 users of 1 s/s) over
        // its share; max-min does not.
        let mut crowd = vec![0.025];
        crowd.extend(std::iter::repeat_n(0.006, 20));
        crowd.extend(std::iter::repeat_n(0.1, 19));
        assert!(water_level(1.0, crowd) > 0.025);
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
