//! What a call's deadline counts: the CPU time the call used, not the time its thread waited
//! for a core, a page of the host's code, or a hypervisor. Plugin threads run below the host
//! (`priority.rs`), so on a busy machine a call that needs a few milliseconds can take far
//! longer by the wall clock; it is not stopped for that. By the wall clock, a wait the plugin
//! asks for ends at the deadline and the call is stopped there (`clocks.rs`), and no call
//! outlives [`WALL_FACTOR`] times its deadline.
//!
//! The epoch ticker sets the first checkpoint at the deadline by the wall clock, as before; at
//! a checkpoint the thread's CPU clock says what was used, and the call goes on for what is
//! left. A thread reads its CPU clock (a system call) at most once per epoch tick, and a call's
//! start shares that reading: a call is charged at most one tick it did not use. Where threads
//! have no CPU clock, the deadline is the wall clock's.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmtime::UpdateDeadline;

use super::EPOCH_TICK;
use crate::cpu::{CHECK_EVERY, CpuBudget};

/// Most wall-clock time a call may take, in deadlines: however busy the machine, a call ends
/// by then (a thread at the plugins' priority gets about a tenth of a core it shares with one
/// busy host thread).
pub const WALL_FACTOR: u32 = 10;

/// The wall-clock time after which a call with `deadline` is stopped, used or not.
pub fn wall_cap(deadline: Duration) -> Duration {
    deadline.saturating_mul(WALL_FACTOR)
}

/// Epoch ticks in `d`, at least one.
fn ticks(d: Duration) -> u64 {
    u64::try_from(d.as_millis() / EPOCH_TICK.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Epoch ticks seen by every engine's ticker: a thread's reading is fresh while it is unchanged.
static TICKS: AtomicU64 = AtomicU64::new(0);

/// Notes that an epoch tick passed.
pub(super) fn tick() {
    TICKS.fetch_add(1, Ordering::Relaxed);
}

/// A thread's clocks at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Reading {
    /// The wall clock.
    at: Instant,
    /// The thread's CPU clock, where there is one.
    cpu: Option<Duration>,
}

thread_local! {
    /// The current thread's last reading and the tick it was taken in.
    static LAST: Cell<Option<(u64, Reading)>> = const { Cell::new(None) };
    /// The current thread's CPU clock up to which its calls have been charged to a budget: a
    /// call that starts from a reading older than that is charged from there, never twice.
    static CHARGED: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// The calling thread's CPU clock.
#[cfg(unix)]
#[allow(unsafe_code)]
fn cpu_time() -> Option<Duration> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill; the clock is the calling thread's.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    let secs = u64::try_from(t.tv_sec).ok()?;
    let nanos = u32::try_from(t.tv_nsec).ok()?;
    ok.then(|| Duration::new(secs, nanos))
}

/// The calling thread's CPU clock.
#[cfg(not(unix))]
fn cpu_time() -> Option<Duration> {
    None
}

/// The current thread's clocks now.
fn now() -> Reading {
    Reading {
        at: Instant::now(),
        cpu: cpu_time(),
    }
}

/// The current thread's clocks at most one epoch tick ago.
fn recent() -> Reading {
    let tick = TICKS.load(Ordering::Relaxed);
    LAST.with(|last| match last.get() {
        Some((seen, reading)) if seen == tick => reading,
        _ => {
            let reading = now();
            last.set(Some((tick, reading)));
            reading
        }
    })
}

/// The current thread's CPU clock at most one epoch tick ago (see [`recent`]); none where
/// threads have no CPU clock.
pub(super) fn recent_cpu() -> Option<Duration> {
    recent().cpu
}

/// The current thread's CPU clock now (a system call); none where threads have no CPU clock.
pub(super) fn cpu_now() -> Option<Duration> {
    cpu_time()
}

/// One instance's call deadline, and the plugin's CPU budget its calls are charged to.
#[derive(Debug)]
pub struct CallClock {
    deadline: Duration,
    /// The deadline in epoch ticks (worked out once: `ticks` divides 128-bit integers).
    deadline_ticks: u64,
    started: Option<Reading>,
    /// The call asked to wait past its deadline.
    overslept: bool,
    /// The plugin's CPU budget (`cpu.rs`), when it has one.
    budget: Option<Arc<CpuBudget>>,
    /// The thread's CPU clock when the call was last charged to the budget.
    charged: Option<Duration>,
}

impl CallClock {
    /// A clock for calls with `deadline`.
    pub fn new(deadline: Duration) -> Self {
        Self {
            deadline,
            deadline_ticks: ticks(deadline),
            started: None,
            overslept: false,
            budget: None,
            charged: None,
        }
    }

    /// Charges calls from now on to `budget`, which holds them while it is in debt.
    pub fn set_budget(&mut self, budget: Option<Arc<CpuBudget>>) {
        self.budget = budget;
    }

    /// Calls from now on have `deadline` (an admission review's may be shorter).
    pub fn set_deadline(&mut self, deadline: Duration) {
        if deadline != self.deadline {
            self.deadline = deadline;
            self.deadline_ticks = ticks(deadline);
        }
    }

    /// Starts a call on this thread; returns the ticks to its first checkpoint.
    pub fn start(&mut self) -> u64 {
        let started = recent();
        self.started = Some(started);
        // The reading may be up to a tick old, from before calls this thread has already
        // charged: from there on, not from the reading.
        self.charged = started.cpu.max(CHARGED.get());
        self.overslept = false;
        if self.budget.is_some() {
            self.deadline_ticks.min(ticks(CHECK_EVERY))
        } else {
            self.deadline_ticks
        }
    }

    /// Ends a call on this thread: what it used since it was last charged goes to the budget.
    pub fn finish(&mut self) {
        self.charge(cpu_time());
    }

    /// Charges the CPU used from the last charge to `cpu` (the thread's CPU clock now).
    fn charge(&mut self, cpu: Option<Duration>) {
        if let (Some(budget), Some(before), Some(after)) = (&self.budget, self.charged, cpu) {
            budget.charge(after.saturating_sub(before), Instant::now());
            self.charged = Some(after);
            CHARGED.set(Some(after));
        }
    }

    /// When a wait of `wait` the call asks for now ends: at its deadline by the wall clock at
    /// the latest, after which the call is stopped.
    pub fn wait_for(&mut self, wait: Duration) -> Instant {
        self.wait_from(Instant::now(), wait)
    }

    /// The latest instant a wait of the current call may end: its deadline by the wall clock
    /// from the call's start (now, for a call not started).
    pub fn latest_wait_end(&self) -> Instant {
        self.started.map_or_else(Instant::now, |s| s.at) + self.deadline
    }

    /// [`Self::wait_for`], asked at `now`.
    fn wait_from(&mut self, now: Instant, wait: Duration) -> Instant {
        let latest = self.started.map_or(now, |s| s.at) + self.deadline;
        if wait >= latest.saturating_duration_since(now) {
            self.overslept = true;
            latest
        } else {
            now + wait
        }
    }

    /// Whether the call asked to wait past its deadline and has now reached it by the wall
    /// clock: a wait that ended there ends the call too, whatever the epoch ticker has seen.
    pub fn slept_out(&self) -> bool {
        self.overslept
            && self
                .started
                .is_some_and(|s| s.at.elapsed() >= self.deadline)
    }

    /// At a checkpoint of the call on this thread: stop it, or how long it may go on. A call
    /// whose plugin is past its CPU budget is held here first, at most until its wall cap.
    pub fn checkpoint(&mut self) -> UpdateDeadline {
        let Some(budget) = self.budget.clone() else {
            return self.decide(now());
        };
        let reading = now();
        self.charge(reading.cpu);
        let wall = self.started.map_or(Duration::ZERO, |s| {
            reading.at.saturating_duration_since(s.at)
        });
        let room = wall_cap(self.deadline).saturating_sub(wall);
        budget.hold(room, EPOCH_TICK, || false);
        match self.decide(now()) {
            UpdateDeadline::Continue(t) => UpdateDeadline::Continue(t.min(ticks(CHECK_EVERY))),
            other => other,
        }
    }

    /// The decision at `now`.
    fn decide(&self, now: Reading) -> UpdateDeadline {
        let Some(started) = self.started else {
            return UpdateDeadline::Interrupt;
        };
        let wall = now.at.saturating_duration_since(started.at);
        let used = match (started.cpu, now.cpu) {
            (Some(before), Some(after)) => after.saturating_sub(before),
            _ => wall,
        };
        let cap = wall_cap(self.deadline);
        let slept_out = self.overslept && wall >= self.deadline;
        if used >= self.deadline || wall >= cap || slept_out {
            return UpdateDeadline::Interrupt;
        }
        // The rest of the deadline cannot be used up in less wall time than it is.
        UpdateDeadline::Continue(ticks((self.deadline - used).min(cap - wall)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, cpu_ms: Option<u64>) -> Reading {
        Reading {
            at,
            cpu: cpu_ms.map(Duration::from_millis),
        }
    }

    fn clock(deadline_ms: u64, started: Reading) -> CallClock {
        CallClock {
            started: Some(started),
            ..CallClock::new(Duration::from_millis(deadline_ms))
        }
    }

    fn continues(u: UpdateDeadline) -> Option<u64> {
        match u {
            UpdateDeadline::Continue(ticks) => Some(ticks),
            _ => None,
        }
    }

    #[cfg(unix)]
    #[test]
    fn calls_within_one_tick_are_charged_their_own_cpu_once() {
        // No engine ticks here: every call starts from the same cached reading, as the calls
        // of one epoch tick do. Each must be charged from the end of the one before it.
        let pool = Arc::new(crate::cpu::CpuPool::new(0));
        let budget = CpuBudget::new(0, pool);
        let mut c = CallClock::new(Duration::from_secs(1));
        c.set_budget(Some(budget.clone()));
        let before = cpu_time().expect("a thread CPU clock");
        for _ in 0..2_000 {
            c.start();
            let mut x = 0u64;
            for i in 0..2_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
            c.finish();
        }
        let used = cpu_time().expect("a thread CPU clock") - before;
        let charged = Duration::from_micros(budget.used_us());
        assert!(
            charged <= used + Duration::from_millis(1),
            "charged {charged:?} for {used:?} of CPU"
        );
    }

    #[test]
    fn only_cpu_time_counts_up_to_the_wall_cap() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let c = clock(200, reading(t0, Some(1_000)));
        // 200 ms by the wall clock, 50 of them on a core: 150 left.
        assert_eq!(continues(c.decide(reading(ms(200), Some(1_050)))), Some(15));
        // Used up.
        assert!(continues(c.decide(reading(ms(400), Some(1_200)))).is_none());
        // Ten deadlines by the wall clock end the call even if it barely ran.
        assert_eq!(
            continues(c.decide(reading(ms(1_990), Some(1_100)))),
            Some(1)
        );
        assert!(continues(c.decide(reading(ms(2_000), Some(1_100)))).is_none());
    }

    #[test]
    fn without_a_cpu_clock_the_deadline_is_the_wall_clocks() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(200);
        assert!(continues(clock(200, reading(t0, None)).decide(reading(at, None))).is_none());
        assert!(continues(clock(200, reading(t0, Some(0))).decide(reading(at, None))).is_none());
        // A call whose start was never noted is stopped at its first checkpoint.
        let unstarted = CallClock::new(Duration::from_secs(1));
        assert!(continues(unstarted.decide(reading(at, Some(0)))).is_none());
    }

    #[test]
    fn a_wait_past_the_deadline_ends_there_and_so_does_the_call() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut c = clock(200, reading(t0, Some(0)));
        // A wait within the deadline is left alone and stops nothing.
        assert_eq!(c.wait_from(t0, Duration::from_millis(150)), ms(150));
        assert_eq!(continues(c.decide(reading(ms(200), Some(10)))), Some(19));
        // An hour's wait ends at the deadline, and so does the call, though it used no CPU.
        assert_eq!(c.wait_from(t0, Duration::from_secs(3_600)), ms(200));
        assert!(continues(c.decide(reading(ms(200), Some(10)))).is_none());
        // The next call starts afresh.
        c.start();
        let started = c.started.expect("started");
        assert_eq!(
            continues(c.decide(Reading {
                at: started.at + Duration::from_millis(200),
                cpu: started.cpu,
            })),
            Some(20)
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_thread_clock_counts_running_not_sleeping() {
        let before = now();
        std::thread::sleep(Duration::from_millis(100));
        let after = now();
        let (cpu0, cpu1) = (
            before.cpu.expect("a CPU clock"),
            after.cpu.expect("a CPU clock"),
        );
        assert!(after.at - before.at >= Duration::from_millis(100));
        assert!(cpu1 - cpu0 < Duration::from_millis(20), "{:?}", cpu1 - cpu0);
        // Spinning advances it (on a busy machine the thread may get little of the wall
        // time: it spins until 5 ms of CPU, or gives up after 10 s).
        let spin = Instant::now();
        let mut spun = Duration::ZERO;
        while spun <= Duration::from_millis(5) && spin.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
            spun = now().cpu.expect("a CPU clock") - cpu1;
        }
        assert!(
            spun > Duration::from_millis(5),
            "{spun:?} in {:?}",
            spin.elapsed()
        );
    }
}
