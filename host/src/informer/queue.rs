//! A plugin's event queue: strict order while it keeps up, bounded by coalescing when it does
//! not.
//!
//! Below the backlog threshold every notification is kept, in order (client-go's RealFIFO).
//! Once the backlog reaches the threshold, in events or in the bytes of the objects they hold
//! (a stream of large updates holds superseded states the cache no longer has), a
//! notification for an object that already has one waiting is folded into it, so the plugin
//! gets the newest state instead of every step on the way (client-go's DeltaFIFO compresses
//! the same way): at most about one entry per object is held, whatever the event rate. Every
//! folded notification is counted.
//!
//! The age of the oldest waiting entry is kept without a clock reading per entry: a sender's
//! wake, once per batch, stamps the entries pushed since the last stamp, and the head's stamp
//! is published as entries are taken.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::informer::Notification;

/// The instant queue stamps count from.
static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// Nanoseconds from [`EPOCH`] to `at`, plus one (zero means no stamp).
fn stamp_of(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

/// Slots an empty queue keeps allocated.
const IDLE_SLOTS: usize = 64;

/// What a receiver takes from the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A change to deliver.
    Event(Notification),
    /// One subscription's initial state has been queued in full (everything before this).
    InitialListSent,
    /// The source listed the type again (after a 410 Gone or a reconnect): everything before
    /// this reflects the new list.
    Relisted,
}

/// The receiver is gone: nothing more will be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the queue's receiver is gone")]
pub struct Closed;

/// Depth, coalescing and wake counters of one queue, readable while it runs.
#[derive(Debug, Default)]
pub struct QueueStats {
    depth: AtomicUsize,
    bytes: AtomicUsize,
    coalesced: AtomicU64,
    wakes: AtomicU64,
    /// The stamp ([`stamp_of`]) of the oldest waiting entry; zero when none waits or it is
    /// not stamped yet.
    oldest: AtomicU64,
}

impl QueueStats {
    /// Entries waiting to be received.
    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }

    /// Bytes of the objects the waiting entries hold (shared with the cache or not).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Notifications folded into a newer state (or cancelled with it) instead of delivered.
    pub fn coalesced(&self) -> u64 {
        self.coalesced.load(Ordering::Relaxed)
    }

    /// Times a sender woke the waiting receiver.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// How long the oldest waiting entry has waited (to within its batch); zero when none
    /// waits.
    pub fn oldest_age(&self) -> Duration {
        match self.oldest.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            stamp => {
                let since = Duration::from_nanos(stamp - 1);
                EPOCH.elapsed().saturating_sub(since)
            }
        }
    }
}

enum Slot {
    Event(Notification),
    InitialListSent,
    Relisted,
    /// An event cancelled by coalescing (an add followed by its delete).
    Empty,
}

struct Inner {
    slots: VecDeque<Slot>,
    /// Bytes of the objects the waiting events hold.
    bytes: usize,
    /// Sequence number of `slots[0]`.
    head: u64,
    /// Per object, the sequence number of its newest waiting event: built when the backlog
    /// first reaches the threshold, kept up while anything waits, dropped once nothing does
    /// (a plugin that keeps up never builds a key per event).
    newest: Option<HashMap<String, u64>>,
    senders: usize,
    receiver: bool,
    /// True while the receiver waits on `ready`: a wake notifies it only then, and clears it,
    /// so a burst costs one system call (the informer fans out to every plugin's queue under
    /// its lock).
    receiver_waiting: bool,
    /// Set by [`QueueSender::interrupt`]: the receiver stops waiting from then on.
    interrupted: bool,
    /// Set by [`QueueSender::nudge`]: the receiver's current or next wait ends once.
    nudged: bool,
    /// Per batch of waiting entries, the sequence number of its first and when it was
    /// stamped, oldest first.
    stamps: VecDeque<(u64, Instant)>,
    /// The sequence number after the last stamped entry.
    stamped_end: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    ready: Condvar,
    threshold: usize,
    byte_threshold: usize,
    stats: Arc<QueueStats>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Bytes of the objects `n` holds.
fn bytes_of(n: &Notification) -> usize {
    match n {
        Notification::Updated { old, new } => old.size_bytes() + new.size_bytes(),
        other => other.object().size_bytes(),
    }
}

/// A new queue that coalesces once `threshold` entries wait (0 means at once), or once the
/// objects they hold reach `byte_threshold` bytes.
pub fn queue(threshold: usize, byte_threshold: usize) -> (QueueSender, QueueReceiver) {
    let shared = Arc::new(Shared {
        inner: Mutex::new(Inner {
            slots: VecDeque::new(),
            bytes: 0,
            head: 0,
            newest: None,
            senders: 1,
            receiver: true,
            receiver_waiting: false,
            interrupted: false,
            nudged: false,
            stamps: VecDeque::new(),
            stamped_end: 0,
        }),
        ready: Condvar::new(),
        threshold,
        byte_threshold,
        stats: Arc::new(QueueStats::default()),
    });
    (
        QueueSender {
            shared: shared.clone(),
        },
        QueueReceiver {
            shared,
            linger: Duration::ZERO,
            busy: AtomicBool::new(false),
        },
    )
}

/// The sending side; clones share the queue, which closes when the last one is dropped.
pub struct QueueSender {
    shared: Arc<Shared>,
}

/// What coalescing makes of a waiting event followed by a newer one for the same object.
enum Merge {
    Into(Notification),
    Cancel,
    Keep,
}

fn merge(waiting: &Notification, newer: &Notification) -> Merge {
    use Notification::{Added, Deleted, Sync, Updated};
    match (waiting, newer) {
        (Added { initial, .. }, Updated { new, .. }) => Merge::Into(Added {
            object: new.clone(),
            initial: *initial,
        }),
        (Added { .. }, Deleted { .. }) => Merge::Cancel,
        (Added { .. } | Updated { .. }, Sync(_)) => Merge::Into(waiting.clone()),
        (Updated { old, .. }, Updated { new, .. }) => Merge::Into(Updated {
            old: old.clone(),
            new: new.clone(),
        }),
        (Updated { .. } | Sync(_), Deleted { .. }) | (Sync(_), Updated { .. } | Sync(_)) => {
            Merge::Into(newer.clone())
        }
        // A delete followed by a re-creation is two facts; an add never folds.
        _ => Merge::Keep,
    }
}

impl Inner {
    /// The first waiting entry, skipping cancelled ones.
    fn pop(&mut self) -> Option<Delivery> {
        while let Some(slot) = self.slots.pop_front() {
            let seq = self.head;
            self.head += 1;
            match slot {
                Slot::Event(n) => {
                    self.bytes = self.bytes.saturating_sub(bytes_of(&n));
                    if self.slots.is_empty() {
                        self.newest = None;
                    } else if let Some(newest) = self.newest.as_mut() {
                        let key = n.id();
                        if newest.get(&key) == Some(&seq) {
                            newest.remove(&key);
                        }
                    }
                    return Some(Delivery::Event(n));
                }
                Slot::InitialListSent => return Some(Delivery::InitialListSent),
                Slot::Relisted => return Some(Delivery::Relisted),
                Slot::Empty => {}
            }
        }
        None
    }

    /// Stamps the entries pushed since the last stamp with the time now (read only when
    /// there are some); whether there were.
    fn stamp(&mut self) -> bool {
        let end = self.head + self.slots.len() as u64;
        let from = self.stamped_end.max(self.head);
        if end <= from {
            return false;
        }
        self.stamps.push_back((from, Instant::now()));
        self.stamped_end = end;
        true
    }

    /// Drops the stamps of entries taken and publishes the head's into `stats`.
    fn publish_oldest(&mut self, stats: &QueueStats) {
        if self.slots.is_empty() {
            self.stamps.clear();
        }
        while self.stamps.len() >= 2 && self.stamps[1].0 <= self.head {
            self.stamps.pop_front();
        }
        let oldest = match self.stamps.front() {
            Some(&(first, at)) if first <= self.head => stamp_of(at),
            _ => 0,
        };
        stats.oldest.store(oldest, Ordering::Relaxed);
    }

    /// The per-object index of waiting events, built from the slots if it is not kept yet.
    fn newest(&mut self) -> &mut HashMap<String, u64> {
        let head = self.head;
        let slots = &self.slots;
        self.newest.get_or_insert_with(|| {
            let mut newest = HashMap::with_capacity(slots.len());
            for (seq, slot) in (head..).zip(slots) {
                if let Slot::Event(n) = slot {
                    newest.insert(n.id(), seq);
                }
            }
            newest
        })
    }
}

impl QueueSender {
    /// Ends the receiver's waits, now and from now on (its owner is stopping it): a waiting
    /// receiver need not wake on a timer to notice a stop.
    pub fn interrupt(&self) {
        self.shared.lock().interrupted = true;
        self.shared.ready.notify_all();
    }

    /// Ends the receiver's current wait, or its next one, once: work it finds outside the
    /// queue (a tick asked for) is then picked up at once rather than at its next timer.
    pub fn nudge(&self) {
        self.shared.lock().nudged = true;
        self.shared.ready.notify_all();
    }

    /// Queues `n` (see [`Self::push`]) and wakes the receiver.
    pub fn send(&self, n: Notification) -> Result<(), Closed> {
        self.push(n)?;
        self.wake();
        Ok(())
    }

    /// Queues `n` without waking the receiver, folding it into the object's waiting entry
    /// when the backlog is at the threshold. The sender wakes the receiver after a batch.
    pub fn push(&self, n: Notification) -> Result<(), Closed> {
        let mut inner = self.shared.lock();
        if !inner.receiver {
            return Err(Closed);
        }
        let seq = inner.head + inner.slots.len() as u64;
        if inner.slots.len() >= self.shared.threshold || inner.bytes >= self.shared.byte_threshold {
            let key = n.id();
            if let Some(&waiting) = inner.newest().get(&key) {
                let at = usize::try_from(waiting - inner.head).unwrap_or(usize::MAX);
                if let Some(Slot::Event(waiting)) = inner.slots.get(at) {
                    let held = bytes_of(waiting);
                    let folded = match merge(waiting, &n) {
                        Merge::Into(merged) => {
                            let now = bytes_of(&merged);
                            Some((Slot::Event(merged), 1, now))
                        }
                        Merge::Cancel => Some((Slot::Empty, 2, 0)),
                        Merge::Keep => None,
                    };
                    if let Some((slot, count, now)) = folded {
                        if matches!(slot, Slot::Empty) {
                            inner.newest().remove(&key);
                        }
                        inner.bytes = inner.bytes.saturating_sub(held) + now;
                        inner.slots[at] = slot;
                        self.shared
                            .stats
                            .coalesced
                            .fetch_add(count, Ordering::Relaxed);
                        return Ok(());
                    }
                }
            }
            inner.newest().insert(key, seq);
        } else if let Some(newest) = inner.newest.as_mut() {
            newest.insert(n.id(), seq);
        }
        inner.bytes += bytes_of(&n);
        inner.slots.push_back(Slot::Event(n));
        self.pushed(&inner);
        Ok(())
    }

    /// Marks that one subscription's initial state has been queued in full, without waking
    /// the receiver.
    pub fn push_initial_list_sent(&self) -> Result<(), Closed> {
        self.push_mark(Slot::InitialListSent)
    }

    /// Marks that the source listed the type again, without waking the receiver.
    pub fn push_relisted(&self) -> Result<(), Closed> {
        self.push_mark(Slot::Relisted)
    }

    fn push_mark(&self, mark: Slot) -> Result<(), Closed> {
        let mut inner = self.shared.lock();
        if !inner.receiver {
            return Err(Closed);
        }
        inner.slots.push_back(mark);
        self.pushed(&inner);
        Ok(())
    }

    fn pushed(&self, inner: &Inner) {
        let stats = &self.shared.stats;
        stats.depth.store(inner.slots.len(), Ordering::Relaxed);
        stats.bytes.store(inner.bytes, Ordering::Relaxed);
    }

    /// Wakes the receiver if it waits for entries that are there: one system call per
    /// batch of pushes, not per entry.
    pub fn wake(&self) {
        let mut inner = self.shared.lock();
        if inner.stamp() {
            inner.publish_oldest(&self.shared.stats);
        }
        if inner.receiver_waiting && !inner.slots.is_empty() {
            inner.receiver_waiting = false;
            self.shared.stats.wakes.fetch_add(1, Ordering::Relaxed);
            self.shared.ready.notify_one();
        }
    }
}

impl Clone for QueueSender {
    fn clone(&self) -> Self {
        self.shared.lock().senders += 1;
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for QueueSender {
    fn drop(&mut self) {
        self.shared.lock().senders -= 1;
        self.shared.ready.notify_all();
    }
}

/// The receiving side; dropping it makes every send fail.
pub struct QueueReceiver {
    shared: Arc<Shared>,
    /// How long a receiver that has just taken entries waits for more before it asks senders
    /// to wake it (see [`Self::set_linger`]).
    linger: Duration,
    /// The last receive took entries.
    busy: AtomicBool,
}

impl QueueReceiver {
    /// After taking entries, a receiver that finds the queue empty first waits up to `linger`
    /// without asking to be woken, then looks again. While a stream keeps coming, senders
    /// then never make a wake-up system call for it (they run the informer, whose thread is
    /// the pipeline's bottleneck), and the receiver takes more per wake; an entry sent in
    /// that window waits at most `linger`. Zero (the default) waits for a wake at once.
    pub fn set_linger(&mut self, linger: Duration) {
        self.linger = linger;
    }

    /// The queue's counters.
    pub fn stats(&self) -> Arc<QueueStats> {
        self.shared.stats.clone()
    }

    /// The next entry, waiting up to `timeout`; `Disconnected` once it is empty and every
    /// sender is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Delivery, RecvTimeoutError> {
        self.receive(timeout, Inner::pop)
    }

    /// Moves up to `max` waiting entries (at least one) to the back of `into` under one lock,
    /// waiting up to `timeout` for the first; `Disconnected` once the queue is empty and every
    /// sender is gone. Entries taken are no longer coalesced with newer ones.
    pub fn recv_batch(
        &self,
        into: &mut VecDeque<Delivery>,
        max: usize,
        timeout: Duration,
    ) -> Result<(), RecvTimeoutError> {
        self.receive(timeout, |inner| {
            let before = into.len();
            while into.len() - before < max.max(1) {
                match inner.pop() {
                    Some(entry) => into.push_back(entry),
                    None => break,
                }
            }
            (into.len() > before).then_some(())
        })
    }

    /// What `take` takes from the queue, waiting up to `timeout` until it takes something.
    fn receive<T>(
        &self,
        timeout: Duration,
        mut take: impl FnMut(&mut Inner) -> Option<T>,
    ) -> Result<T, RecvTimeoutError> {
        // Read the clock only to wait: a busy queue hands over entries without it.
        let mut deadline = None;
        let mut inner = self.shared.lock();
        loop {
            let taken = take(&mut inner);
            let stats = &self.shared.stats;
            stats.depth.store(inner.slots.len(), Ordering::Relaxed);
            stats.bytes.store(inner.bytes, Ordering::Relaxed);
            inner.publish_oldest(stats);
            if let Some(taken) = taken {
                self.busy.store(true, Ordering::Relaxed);
                return Ok(taken);
            }
            inner.newest = None;
            // Nothing waits: give back what a burst (the initial list) grew.
            if inner.slots.capacity() > IDLE_SLOTS {
                inner.slots.shrink_to(IDLE_SLOTS);
            }
            if inner.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            if inner.interrupted {
                return Err(RecvTimeoutError::Timeout);
            }
            if inner.nudged {
                inner.nudged = false;
                return Err(RecvTimeoutError::Timeout);
            }
            let now = Instant::now();
            let left = deadline
                .get_or_insert(now + timeout)
                .saturating_duration_since(now);
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            if !self.linger.is_zero() && self.busy.swap(false, Ordering::Relaxed) {
                inner = self
                    .shared
                    .ready
                    .wait_timeout(inner, self.linger.min(left))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            inner.receiver_waiting = true;
            inner = self
                .shared
                .ready
                .wait_timeout(inner, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            inner.receiver_waiting = false;
        }
    }

    /// Every entry waiting now, without blocking.
    pub fn drain(&self) -> Vec<Delivery> {
        std::iter::from_fn(|| self.recv_timeout(Duration::ZERO).ok()).collect()
    }
}

impl Drop for QueueReceiver {
    fn drop(&mut self) {
        let mut inner = self.shared.lock();
        inner.receiver = false;
        inner.slots.clear();
        inner.bytes = 0;
        inner.newest = None;
        inner.stamps.clear();
        self.shared.stats.oldest.store(0, Ordering::Relaxed);
        self.shared.stats.depth.store(0, Ordering::Relaxed);
        self.shared.stats.bytes.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::object::{KubeObject, Transform};

    fn obj(name: &str, rv: &str) -> Arc<KubeObject> {
        let value = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}});
        Arc::new(KubeObject::from_value(value, &Transform::default()).expect("valid object"))
    }

    fn add(name: &str, rv: &str) -> Notification {
        Notification::Added {
            object: obj(name, rv),
            initial: false,
        }
    }

    fn update(name: &str, old: &str, new: &str) -> Notification {
        Notification::Updated {
            old: obj(name, old),
            new: obj(name, new),
        }
    }

    fn delete(name: &str, rv: &str) -> Notification {
        Notification::Deleted {
            object: obj(name, rv),
            stale: false,
        }
    }

    fn short(d: &Delivery) -> String {
        match d {
            Delivery::InitialListSent => "|".to_owned(),
            Delivery::Relisted => "relisted".to_owned(),
            Delivery::Event(Notification::Added { object, .. }) => {
                format!("+{}@{}", object.name(), object.resource_version())
            }
            Delivery::Event(Notification::Updated { old, new }) => {
                format!(
                    "~{}@{}>{}",
                    new.name(),
                    old.resource_version(),
                    new.resource_version()
                )
            }
            Delivery::Event(Notification::Deleted { object, .. }) => {
                format!("-{}@{}", object.name(), object.resource_version())
            }
            Delivery::Event(Notification::Sync(o)) => {
                format!("={}@{}", o.name(), o.resource_version())
            }
            Delivery::Event(Notification::Requeue(o)) => {
                format!("^{}@{}", o.name(), o.resource_version())
            }
        }
    }

    fn drained(rx: &QueueReceiver) -> Vec<String> {
        rx.drain().iter().map(short).collect()
    }

    #[test]
    fn an_interrupted_receiver_stops_waiting_and_does_not_wait_again() {
        let (tx, rx) = queue(100, usize::MAX);
        let (done, waited) = std::sync::mpsc::channel();
        let receiver = std::thread::spawn(move || {
            let mut into = VecDeque::new();
            let first = rx.recv_batch(&mut into, 1, Duration::from_secs(600));
            let second = rx.recv_batch(&mut into, 1, Duration::from_secs(600));
            let _ = done.send((first, second));
        });
        // Whether it is waiting already or not yet, the interrupt ends its waits.
        std::thread::sleep(Duration::from_millis(20));
        tx.interrupt();
        let answers = waited
            .recv_timeout(Duration::from_secs(30))
            .expect("the receiver stopped waiting");
        assert_eq!(
            answers,
            (
                Err(RecvTimeoutError::Timeout),
                Err(RecvTimeoutError::Timeout)
            )
        );
        receiver.join().expect("joined");
    }

    #[test]
    fn a_nudge_ends_one_wait_and_later_waits_wait_again() {
        let (tx, rx) = queue(100, usize::MAX);
        let mut into = VecDeque::new();
        // A nudge before the wait ends that wait at once.
        tx.nudge();
        let started = std::time::Instant::now();
        let first = rx.recv_batch(&mut into, 1, Duration::from_secs(600));
        assert_eq!(first, Err(RecvTimeoutError::Timeout));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not its timeout"
        );
        // Only once: the next wait runs to its own (short) timeout.
        let started = std::time::Instant::now();
        let second = rx.recv_batch(&mut into, 1, Duration::from_millis(50));
        assert_eq!(second, Err(RecvTimeoutError::Timeout));
        assert!(started.elapsed() >= Duration::from_millis(50), "waited");
        // A nudge while waiting ends that wait.
        let (done, waited) = std::sync::mpsc::channel();
        let receiver = std::thread::spawn(move || {
            let mut into = VecDeque::new();
            let _ = done.send(rx.recv_batch(&mut into, 1, Duration::from_secs(600)));
        });
        std::thread::sleep(Duration::from_millis(20));
        tx.nudge();
        let answer = waited
            .recv_timeout(Duration::from_secs(30))
            .expect("the nudge ended the wait");
        assert_eq!(answer, Err(RecvTimeoutError::Timeout));
        receiver.join().expect("joined");
    }

    #[test]
    fn below_the_threshold_every_event_is_kept_in_order() -> Result<(), Closed> {
        let (tx, rx) = queue(100, usize::MAX);
        tx.send(add("a", "1"))?;
        tx.send(update("a", "1", "2"))?;
        tx.push_initial_list_sent()?;
        tx.send(update("a", "2", "3"))?;
        tx.send(delete("a", "3"))?;
        assert_eq!(drained(&rx), ["+a@1", "~a@1>2", "|", "~a@2>3", "-a@3"]);
        assert_eq!(rx.stats().coalesced(), 0);
        Ok(())
    }

    #[test]
    fn past_the_threshold_events_fold_into_the_newest_state() -> Result<(), Closed> {
        let (tx, rx) = queue(2, usize::MAX);
        tx.send(add("a", "1"))?;
        tx.send(add("b", "1"))?;
        // At the threshold: a's updates fold into its waiting add, b's update into its add.
        for rv in 2..=1000 {
            tx.send(update("a", &(rv - 1).to_string(), &rv.to_string()))?;
        }
        tx.send(update("b", "1", "2"))?;
        tx.send(add("c", "1"))?;
        tx.send(update("c", "1", "2"))?;
        tx.send(update("c", "2", "3"))?;
        assert_eq!(rx.stats().depth(), 3, "one entry per object");
        assert_eq!(drained(&rx), ["+a@1000", "+b@2", "+c@3"]);
        assert_eq!(rx.stats().coalesced(), 999 + 1 + 2);
        Ok(())
    }

    #[test]
    fn coalescing_keeps_old_state_cancels_unseen_objects_and_never_merges_a_recreation()
    -> Result<(), Closed> {
        let (tx, rx) = queue(0, usize::MAX);
        tx.send(update("a", "1", "2"))?;
        tx.send(update("a", "2", "3"))?;
        tx.send(Notification::Sync(obj("a", "3")))?;
        tx.send(add("b", "1"))?;
        tx.send(delete("b", "1"))?;
        tx.send(delete("c", "1"))?;
        tx.send(add("c", "2"))?;
        tx.send(update("c", "2", "3"))?;
        assert_eq!(drained(&rx), ["~a@1>3", "-c@1", "+c@3"]);
        assert_eq!(rx.stats().coalesced(), 2 + 2 + 1);
        // After draining nothing waits, so a new event starts a new entry.
        tx.send(update("a", "3", "4"))?;
        assert_eq!(drained(&rx), ["~a@3>4"]);
        Ok(())
    }

    #[test]
    fn the_index_built_at_the_threshold_follows_every_later_event() -> Result<(), Closed> {
        let (tx, rx) = queue(3, usize::MAX);
        tx.send(add("a", "1"))?;
        tx.send(add("b", "1"))?;
        tx.send(add("c", "1"))?;
        // At the threshold the index is built from what waits: a's update folds into its add.
        tx.send(update("a", "1", "2"))?;
        let first = rx.recv_timeout(Duration::ZERO).map(|d| short(&d));
        assert_eq!(first, Ok("+a@2".to_owned()));
        // Below the threshold again, but still indexed: the next fold finds a's newest entry.
        tx.send(update("a", "2", "3"))?;
        tx.send(update("a", "3", "4"))?;
        assert_eq!(drained(&rx), ["+b@1", "+c@1", "~a@2>4"]);
        assert_eq!(rx.stats().coalesced(), 2);
        Ok(())
    }

    #[test]
    fn large_objects_fold_once_their_bytes_reach_the_threshold() -> Result<(), Closed> {
        // Far below the event threshold, but the objects held reach the byte threshold.
        let one = update("a", "1", "2");
        let (tx, rx) = queue(1_000, bytes_of(&one) * 2);
        tx.send(one)?;
        tx.send(update("b", "1", "2"))?;
        assert_eq!(rx.stats().bytes(), bytes_of(&update("a", "1", "2")) * 2);
        // At the byte threshold: a's next update folds into its waiting one.
        tx.send(update("a", "2", "3"))?;
        tx.send(update("a", "3", "4"))?;
        assert_eq!(rx.stats().coalesced(), 2);
        assert_eq!(drained(&rx), ["~a@1>4", "~b@1>2"]);
        assert_eq!(rx.stats().bytes(), 0, "what is taken no longer counts");
        Ok(())
    }

    #[test]
    fn the_oldest_waiting_entrys_age_follows_the_head_batch_by_batch() -> Result<(), Closed> {
        let (tx, rx) = queue(10, usize::MAX);
        let stats = rx.stats();
        assert_eq!(stats.oldest_age(), Duration::ZERO, "nothing waits");
        tx.push(add("a", "1"))?;
        tx.push(add("b", "1"))?;
        tx.wake();
        std::thread::sleep(Duration::from_millis(60));
        tx.send(add("c", "1"))?;
        let first = stats.oldest_age();
        assert!(first >= Duration::from_millis(60), "{first:?}");
        // Taking one of the first batch leaves the other at the head: still as old.
        assert_eq!(
            rx.recv_timeout(Duration::ZERO).map(|d| short(&d)),
            Ok("+a@1".into())
        );
        assert!(stats.oldest_age() >= first, "{:?}", stats.oldest_age());
        // With the first batch taken, the head is the one sent just now.
        assert_eq!(
            rx.recv_timeout(Duration::ZERO).map(|d| short(&d)),
            Ok("+b@1".into())
        );
        let second = stats.oldest_age();
        assert!(second < Duration::from_millis(60), "{second:?}");
        assert_eq!(
            rx.recv_timeout(Duration::ZERO).map(|d| short(&d)),
            Ok("+c@1".into())
        );
        assert_eq!(stats.oldest_age(), Duration::ZERO, "nothing waits");
        // A marker waits like an event.
        tx.push_relisted()?;
        tx.wake();
        std::thread::sleep(Duration::from_millis(20));
        assert!(stats.oldest_age() >= Duration::from_millis(20));
        drop(rx);
        assert_eq!(
            stats.oldest_age(),
            Duration::ZERO,
            "a closed queue holds nothing"
        );
        Ok(())
    }

    #[test]
    fn a_waiting_receiver_is_woken_by_a_wake_after_pushes() -> Result<(), Closed> {
        let (tx, rx) = queue(10, usize::MAX);
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            let got = rx.recv_timeout(Duration::from_secs(10)).map(|d| short(&d));
            (got, started.elapsed())
        });
        // Let the receiver reach its wait, then push without waking, then wake once.
        std::thread::sleep(Duration::from_millis(100));
        tx.push(add("a", "1"))?;
        tx.push(add("b", "1"))?;
        tx.wake();
        let (got, waited) = waiter.join().expect("receiver thread");
        assert_eq!(got, Ok("+a@1".to_owned()));
        assert!(
            waited < Duration::from_secs(10),
            "woken only by the timeout"
        );
        Ok(())
    }

    #[test]
    fn a_batch_takes_up_to_its_size_in_order_and_what_stays_still_folds() -> Result<(), Closed> {
        let (tx, rx) = queue(0, usize::MAX);
        tx.send(add("a", "1"))?;
        tx.send(add("b", "1"))?;
        tx.send(Notification::Deleted {
            object: obj("a", "1"),
            stale: false,
        })?;
        tx.push_initial_list_sent()?;
        tx.send(add("c", "1"))?;
        let mut taken = VecDeque::new();
        rx.recv_batch(&mut taken, 2, Duration::ZERO)
            .map_err(|_| Closed)?;
        // a's add and delete cancelled each other in the queue; the mark keeps its place.
        assert_eq!(taken.iter().map(short).collect::<Vec<_>>(), ["+b@1", "|"]);
        assert_eq!(rx.stats().depth(), 1);
        // Taken entries are the receiver's: c's update folds into its add, still waiting.
        tx.send(update("c", "1", "2"))?;
        rx.recv_batch(&mut taken, 32, Duration::ZERO)
            .map_err(|_| Closed)?;
        assert_eq!(
            taken.iter().map(short).collect::<Vec<_>>(),
            ["+b@1", "|", "+c@2"],
            "appended after what was there"
        );
        assert_eq!(
            rx.recv_batch(&mut taken, 32, Duration::from_millis(20)),
            Err(RecvTimeoutError::Timeout)
        );
        drop(tx);
        assert_eq!(
            rx.recv_batch(&mut taken, 32, Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected)
        );
        assert_eq!(taken.len(), 3, "nothing taken on a timeout or close");
        Ok(())
    }

    #[test]
    fn a_busy_receiver_lingers_without_being_woken_and_an_idle_one_is_woken() {
        let (tx, mut rx) = queue(0, usize::MAX);
        rx.set_linger(Duration::from_millis(200));
        let stats = rx.stats();
        let (took, taken) = std::sync::mpsc::channel();
        let receiver = std::thread::spawn(move || {
            let mut into = VecDeque::new();
            // Idle: waits to be woken. Then busy: lingers first. Then idle again after an
            // empty linger: waits to be woken.
            for _ in 0..3 {
                let got = rx.recv_batch(&mut into, 32, Duration::from_secs(30));
                let sent = took.send((got, into.drain(..).map(|d| short(&d)).collect::<Vec<_>>()));
                if sent.is_err() {
                    return;
                }
            }
        });
        let wait_for_receiver = || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !tx.shared.lock().receiver_waiting && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        wait_for_receiver();
        tx.send(add("a", "1")).expect("open");
        let first = taken.recv().expect("receiver runs");
        assert_eq!(first, (Ok(()), vec!["+a@1".to_owned()]));
        assert_eq!(stats.wakes(), 1, "an idle receiver is woken");
        // The receiver now lingers: a send in that window wakes nobody and is still taken.
        std::thread::sleep(Duration::from_millis(20));
        assert!(!tx.shared.lock().receiver_waiting, "lingering");
        tx.send(add("b", "1")).expect("open");
        let second = taken.recv().expect("receiver runs");
        assert_eq!(second, (Ok(()), vec!["+b@1".to_owned()]));
        assert_eq!(stats.wakes(), 1, "a lingering receiver is not woken");
        // Its next linger ends empty, and then it asks to be woken again.
        wait_for_receiver();
        tx.send(add("c", "1")).expect("open");
        let third = taken.recv().expect("receiver runs");
        assert_eq!(third, (Ok(()), vec!["+c@1".to_owned()]));
        assert_eq!(stats.wakes(), 2);
        receiver.join().expect("receiver thread");
    }

    #[test]
    fn an_empty_queue_waits_out_its_timeout() {
        let (_tx, rx) = queue(10, usize::MAX);
        let started = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(60)),
            Err(RecvTimeoutError::Timeout)
        );
        assert!(started.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn closes_when_senders_go_and_refuses_when_the_receiver_goes() -> Result<(), Closed> {
        let (tx, rx) = queue(10, usize::MAX);
        let tx2 = tx.clone();
        tx.send(add("a", "1"))?;
        drop(tx);
        assert!(rx.recv_timeout(Duration::ZERO).is_ok());
        assert_eq!(
            rx.recv_timeout(Duration::ZERO),
            Err(RecvTimeoutError::Timeout),
            "a sender is still alive"
        );
        drop(tx2);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected)
        );
        let (tx, rx) = queue(10, usize::MAX);
        drop(rx);
        assert_eq!(tx.send(add("a", "1")), Err(Closed));
        Ok(())
    }
}
