//! Counters of one resource type's reflector, for status and metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// What a reflector has done so far.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    watches: AtomicU64,
    relists: AtomicU64,
    events: AtomicU64,
    errors: AtomicU64,
    silences: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// How the last sharded list was filtered (`None`: no shard selector sent).
    shard_filter: Mutex<Option<ShardFilter>>,
}

/// Where a replica's share of a type is filtered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShardFilter {
    /// The API server applied the shard selector (its list answered with `shardInfo`): only
    /// the share is sent and decoded.
    Server,
    /// The API server ignored it (no `ShardedListAndWatch`): everything is sent, and what is
    /// out of the share is dropped at decode, before the store.
    Client,
}

/// A snapshot of [`ReflectorStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReflectorSnapshot {
    /// Watch requests the server accepted.
    pub watches: u64,
    /// Times a synced cache had to be relisted because its version expired (410 Gone).
    pub relists: u64,
    /// Watch events received.
    pub events: u64,
    /// Failed requests and streams, and watch events skipped as undecodable.
    pub errors: u64,
    /// Watches given up because nothing arrived for [`super::reflector::SILENCE`].
    pub silences: u64,
    /// The latest failure, if any.
    pub last_error: Option<String>,
    /// Where the replica's share is filtered, when replicas split the work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_filter: Option<ShardFilter>,
}

impl ReflectorStats {
    pub(super) fn note_watch(&self) {
        self.watches.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn note_relist(&self) {
        self.relists.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn note_event(&self) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn note_silence(&self) {
        self.silences.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn note_shard_filter(&self, filter: ShardFilter) {
        *self
            .shard_filter
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(filter);
    }

    pub(super) fn note_error(&self, reason: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason.to_owned());
    }

    /// The current counters.
    pub fn snapshot(&self) -> ReflectorSnapshot {
        ReflectorSnapshot {
            watches: self.watches.load(Ordering::Relaxed),
            relists: self.relists.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            silences: self.silences.load(Ordering::Relaxed),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            shard_filter: *self
                .shard_filter
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        }
    }
}
