//! Plugin state kept on the cluster: the leader writes each plugin's `state` map (and when its
//! schedules last ran) through to a ConfigMap of the host's own, and a replica that starts
//! leading reads them back first, so a new leader goes on where the old one stopped.
//!
//! Writes are batched: at most one per plugin per interval, holding the whole map as it is
//! then (a map is at most `stateKiB`, 64 KiB by default, so one object holds it), and paced
//! in bytes: `stateWriteKiBPerSecond` per plugin (64) and `stateWriteTotalKiBPerSecond` for
//! all (1024). A changed map that would pass either waits (counted as deferred) and is
//! written later, whole, as it is then; a map handed over with a slice is written at once.
//! Reads stay local: plugins never wait on the API server for their state.
//!
//! Writes are fenced by the API server: taking a map over bumps its owner generation on a
//! resourceVersion precondition (`Keeper::take_over`), and every write carries the version
//! its writer last read or wrote, so a former owner's write still on its way fails instead
//! of landing over the new owner's (docs/design/sharding.md, "Fencing").
//!
//! When replicas split the work, each part's map (a namespace's, or by uid a slice's:
//! `shard::Part`) has a ConfigMap of its own, written by the replica delivering it. Taking a
//! slice over reads the parts in it before its delivery opens ([`Keeper::load_parts`]);
//! giving one up writes them one last time and drops them before the claim is let go
//! ([`Keeper::flush_parts`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use serde::{Deserialize, Serialize};

use crate::plugins::PluginHost;
use crate::rate::{Bucket, Rate};
use crate::shard::{Part, Share};
use crate::wasm::state::{PluginState, StateStore};

/// The label every state ConfigMap carries (with value `kubewasm`), to find them again.
pub const LABEL: &str = "kubewasm.dev/plugin-state";
/// The label a part's ConfigMap carries besides (with value `part`).
pub const PART_LABEL: &str = "kubewasm.dev/state-scope";
/// The ConfigMap key holding the state as JSON.
pub const DATA_KEY: &str = "state.json";
/// The annotation a replica taking a map over bumps (with a resourceVersion precondition),
/// so that a write the former owner still has on its way fails instead of landing.
pub const OWNER_GENERATION: &str = "kubewasm.dev/owner-generation";
/// Attempts at taking one map over when others keep writing it meanwhile.
const FENCE_ATTEMPTS: usize = 5;
/// How often changed maps are written at most.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Part maps written per plugin per interval at most: a plugin changing state in every
/// namespace it sees costs the API server this many writes a second, not one per namespace.
pub const PART_WRITES: usize = 16;

/// The largest ConfigMap the API server stores, less room for metadata.
pub const MAX_BYTES: usize = 1_000_000;

/// What one ConfigMap holds.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Kept {
    /// The plugin's name (ConfigMap names are narrower than plugin names).
    plugin: String,
    /// The part of the key space the map is for ([`Part::id`]); absent for the whole map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    part: Option<String>,
    /// The plugin's map.
    entries: BTreeMap<String, String>,
    /// When each schedule last ran, RFC 3339 (the whole map's only).
    #[serde(default)]
    ticks: BTreeMap<String, String>,
}

/// The ConfigMap name for `plugin`'s state: readable when the name allows, hashed otherwise.
pub fn object_name(plugin: &str) -> String {
    let readable = plugin.len() <= 200
        && !plugin.is_empty()
        && plugin
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && plugin.starts_with(|c: char| c.is_ascii_alphanumeric())
        && plugin.ends_with(|c: char| c.is_ascii_alphanumeric());
    if readable {
        format!("kubewasm-state-{plugin}")
    } else {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(plugin.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("kubewasm-state-{hex}")
    }
}

/// The ConfigMap name for `plugin`'s map of part `part` (its id).
pub fn part_object_name(plugin: &str, part: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(part.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", object_name(plugin))
}

/// The ConfigMap data for `plugin`'s `store` (of `part`, or the whole map): its map and
/// when its schedules last ran.
fn encode(plugin: &str, part: Option<&str>, store: &StateStore) -> String {
    let kept = Kept {
        plugin: plugin.to_owned(),
        part: part.map(str::to_owned),
        entries: store.snapshot(),
        ticks: store
            .ticks()
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect(),
    };
    serde_json::to_string(&kept).unwrap_or_default()
}

/// Why state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    /// The API server refused or failed the request.
    #[error("plugin state in namespace {namespace}: {cause}")]
    Api {
        /// Where the state is kept.
        namespace: String,
        /// The API server's error (in the message, so not a `source`: printed once).
        cause: kube::Error,
    },
    /// The map was written by another replica since this one last read or wrote it: this
    /// replica no longer owns it, and does not overwrite it.
    #[error(
        "plugin state ConfigMap {namespace}/{name} was written by another replica since this one last read or wrote it: not overwritten (this replica no longer owns it)"
    )]
    Fenced {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A ConfigMap holds something that is not kept state.
    #[error("plugin state ConfigMap {namespace}/{name}: {message}")]
    Invalid {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

/// At most `most` of `items`, beginning at turn `round` (each call `most` further on), so
/// that while the same items wait, each is taken within `items.len() / most + 1` calls.
fn take_turns<T>(mut items: Vec<T>, round: u64, most: usize) -> Vec<T> {
    if items.len() <= most {
        return items;
    }
    let len = items.len() as u64;
    let start = usize::try_from(round.wrapping_mul(most as u64) % len).unwrap_or(0);
    items.rotate_left(start);
    items.truncate(most);
    items
}

/// A part map held: its plugin, the plugin's state, the part's id, the map.
type HeldPart = (String, Arc<PluginState>, String, Arc<StateStore>);

/// A map's key: its plugin, and its part (none: the whole map).
type MapKey = (String, Option<String>);

/// The version of a map this replica last read or wrote: its writes carry it as a
/// precondition, so one made after another replica took the map over fails.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    resource_version: String,
    owner_generation: u64,
}

/// A kept map as read, with its version.
struct Read {
    kept: Kept,
    version: Version,
}

/// Reads and writes the plugins' state in one namespace.
pub struct Keeper {
    api: Api<ConfigMap>,
    namespace: String,
    plugins: Arc<PluginHost>,
    /// The change count of each map (by plugin, and part) when it was last written or read.
    written: std::sync::Mutex<BTreeMap<(String, Option<String>), u64>>,
    /// Held while writing: a part given up is written one last time, then never again.
    writing: tokio::sync::Mutex<()>,
    /// Set once the kept state has been read: nothing is written before (it would overwrite
    /// what an earlier leader kept).
    loaded: std::sync::atomic::AtomicBool,
    writes: AtomicU64,
    failures: AtomicU64,
    /// Periodic writes so far: where the next one starts among a plugin's changed parts.
    rounds: AtomicU64,
    /// The bytes written per plugin and in all, against their rates.
    pacer: std::sync::Mutex<Pacer>,
    /// The version of each map as last read or written here (absent: never read, or not
    /// there when read).
    versions: std::sync::Mutex<BTreeMap<MapKey, Version>>,
    /// Writes refused because another replica had written the map since ([`KeeperError::Fenced`]).
    fenced: AtomicU64,
    /// Maps refused so: not written again until taken over anew.
    lost: std::sync::Mutex<std::collections::BTreeSet<MapKey>>,
}

/// How fast maps are written through: a token bucket of bytes per plugin, and one for all
/// plugins together. A write is made while neither is in debt and then paid in full, so a
/// map larger than a second's rate is still written, and the next waits until it is paid.
struct Pacer {
    total: Bucket,
    plugins: BTreeMap<String, Bucket>,
}

impl Pacer {
    fn new(total_per_second: u32) -> Self {
        Self {
            total: Bucket::new(per_second(total_per_second), Instant::now()),
            plugins: BTreeMap::new(),
        }
    }

    fn plugin(&mut self, plugin: &str, rate: u32, now: Instant) -> &mut Bucket {
        self.plugins
            .entry(plugin.to_owned())
            .or_insert_with(|| Bucket::new(per_second(rate), now))
    }

    /// Whether `plugin` (at `rate` bytes a second) may write at `now`.
    fn may_write(&mut self, plugin: &str, rate: u32, now: Instant) -> bool {
        self.plugin(plugin, rate, now).ready(now) && self.total.ready(now)
    }

    /// Notes that `plugin` wrote `bytes` at `now`.
    fn wrote(&mut self, plugin: &str, rate: u32, bytes: usize, now: Instant) {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.plugin(plugin, rate, now).spend(bytes, now);
        self.total.spend(bytes, now);
    }
}

/// A rate of `bytes` a second, with a second's burst.
fn per_second(bytes: u32) -> Rate {
    Rate {
        per_second: bytes,
        burst: bytes,
    }
}

impl Keeper {
    /// A keeper of `plugins`' state in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, plugins: Arc<PluginHost>) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            written: std::sync::Mutex::default(),
            writing: tokio::sync::Mutex::new(()),
            loaded: std::sync::atomic::AtomicBool::new(false),
            writes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            pacer: std::sync::Mutex::new(Pacer::new(
                plugins.settings().state_write_bytes_per_second,
            )),
            versions: std::sync::Mutex::default(),
            fenced: AtomicU64::new(0),
            lost: std::sync::Mutex::default(),
            plugins,
        }
    }

    /// The namespace state is kept in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// ConfigMaps written so far, and writes that failed.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.writes.load(Ordering::Relaxed),
            self.failures.load(Ordering::Relaxed),
        )
    }

    /// Writes refused because another replica had written the map since this one last
    /// read or wrote it.
    pub fn fenced(&self) -> u64 {
        self.fenced.load(Ordering::Relaxed)
    }

    fn lost(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<MapKey>> {
        self.lost
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn versions(&self) -> std::sync::MutexGuard<'_, BTreeMap<MapKey, Version>> {
        self.versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn api_error(&self, source: kube::Error) -> KeeperError {
        KeeperError::Api {
            namespace: self.namespace.clone(),
            cause: source,
        }
    }

    /// When each map (by plugin, and part) was last written or read, as its change count.
    fn written(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, Option<String>), u64>> {
        self.written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kept state ConfigMaps `selector` finds, each read; one that does not parse is
    /// skipped with an error logged.
    async fn list_kept(&self, selector: &str) -> Result<Vec<Read>, KeeperError> {
        let list = self
            .api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| self.api_error(e))?;
        Ok(list
            .items
            .iter()
            .filter_map(|map| {
                self.read(map)
                    .inspect_err(|e| tracing::error!("{e}: skipped"))
                    .ok()
            })
            .collect())
    }

    /// `map` parsed, with its version.
    fn read(&self, map: &ConfigMap) -> Result<Read, KeeperError> {
        let kept = self.parse(map)?;
        let owner_generation = map
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(OWNER_GENERATION))
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        Ok(Read {
            kept,
            version: Version {
                resource_version: map.metadata.resource_version.clone().unwrap_or_default(),
                owner_generation,
            },
        })
    }

    /// Takes the map `read` over: writes it back as read with its owner generation bumped,
    /// on the condition that it is still the version read. A write another replica still
    /// had on its way then fails instead of landing over what this one goes on from; one
    /// that landed first makes this fail, and the map is read again (it holds that write).
    /// The map as taken over, with its new version.
    async fn take_over(&self, mut read: Read) -> Result<Read, KeeperError> {
        let name = match &read.kept.part {
            None => object_name(&read.kept.plugin),
            Some(part) => part_object_name(&read.kept.plugin, part),
        };
        for _ in 0..FENCE_ATTEMPTS {
            let version = Version {
                owner_generation: read.version.owner_generation + 1,
                ..read.version.clone()
            };
            let text = serde_json::to_string(&read.kept).unwrap_or_default();
            match self
                .apply(&name, read.kept.part.is_some(), text, Some(&version))
                .await
            {
                Ok((resource_version, _)) => {
                    read.version = Version {
                        resource_version,
                        ..version
                    };
                    return Ok(read);
                }
                Err(KeeperError::Fenced { .. }) => {
                    let map = self.api.get(&name).await.map_err(|e| self.api_error(e))?;
                    read = self.read(&map)?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(KeeperError::Fenced {
            namespace: self.namespace.clone(),
            name,
        })
    }

    /// Replaces every plugin's state with what the cluster keeps (before leading), taking
    /// each map over (see `Keeper::take_over`); returns the plugins read. A ConfigMap that
    /// does not parse is skipped with an error logged.
    pub async fn load(&self) -> Result<usize, KeeperError> {
        let kept = self
            .list_kept(&format!("{LABEL}=kubewasm,!{PART_LABEL}"))
            .await?;
        let read = kept.len();
        for kept in kept {
            let Read { kept, version } = self.take_over(kept).await?;
            let key = (kept.plugin.clone(), None);
            self.lost().remove(&key);
            self.versions().insert(key, version);
            let store = self.plugins.state_of(&kept.plugin).whole().clone();
            store.replace(kept.entries);
            store.replace_ticks(
                kept.ticks
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.parse().ok()?)))
                    .collect(),
            );
            self.written().insert((kept.plugin, None), store.changes());
        }
        self.loaded.store(true, Ordering::SeqCst);
        tracing::info!(plugins = read, namespace = %self.namespace, "plugin state read");
        Ok(read)
    }

    fn parse(&self, map: &ConfigMap) -> Result<Kept, KeeperError> {
        let name = map.metadata.name.clone().unwrap_or_default();
        let invalid = |message: String| KeeperError::Invalid {
            namespace: self.namespace.clone(),
            name: name.clone(),
            message,
        };
        let text = map
            .data
            .as_ref()
            .and_then(|d| d.get(DATA_KEY))
            .ok_or_else(|| invalid(format!("no {DATA_KEY}")))?;
        let kept: Kept =
            serde_json::from_str(text).map_err(|e| invalid(format!("{DATA_KEY}: {e}")))?;
        let expected = match &kept.part {
            None => object_name(&kept.plugin),
            Some(part) => part_object_name(&kept.plugin, part),
        };
        if expected != name {
            return Err(invalid(format!(
                "holds the state of plugin {:?}, which is kept under another name",
                kept.plugin
            )));
        }
        Ok(kept)
    }

    /// Reads the part maps that fall in `share` (slices being taken over), takes each over
    /// (see `Keeper::take_over`) and holds them; returns how many were read. On an error the
    /// caller tries again before it delivers those slices (what was held is read again).
    pub async fn load_parts(&self, share: &Share) -> Result<usize, KeeperError> {
        let kept = self
            .list_kept(&format!("{LABEL}=kubewasm,{PART_LABEL}=part"))
            .await?;
        let mut read = 0;
        for found in kept {
            let Some(id) = found.kept.part.clone() else {
                continue;
            };
            let Some(part) = Part::from_id(&id) else {
                tracing::error!(plugin = %found.kept.plugin, part = %id, "plugin state of an unknown part: skipped");
                continue;
            };
            if !share.holds(part.hash()) {
                continue;
            }
            let Read { kept, version } = self.take_over(found).await?;
            let key = (kept.plugin.clone(), Some(id.clone()));
            self.lost().remove(&key);
            self.versions().insert(key, version);
            let store = self
                .plugins
                .state_of(&kept.plugin)
                .set_part(&id, kept.entries);
            self.written()
                .insert((kept.plugin, Some(id)), store.changes());
            read += 1;
        }
        Ok(read)
    }

    /// Writes the part maps held that fall in `share` (slices being given up) if changed,
    /// then stops holding them. On an error none is dropped: the caller tries again before
    /// it lets the slices go (or, cut off, [`Self::forget_parts`]).
    pub async fn flush_parts(&self, share: &Share) -> Result<usize, KeeperError> {
        let _writing = self.writing.lock().await;
        let held = self.parts_in(share);
        let mut wrote = 0;
        for (plugin, _, id, store) in &held {
            if self.write_if_changed(plugin, Some(id), store).await? {
                wrote += 1;
            }
        }
        self.drop_parts(held);
        Ok(wrote)
    }

    /// Stops holding the part maps that fall in `share` without writing them: this replica
    /// lost the slices without handing them over (cut off), and whoever takes them reads
    /// what was last written.
    pub async fn forget_parts(&self, share: &Share) {
        let _writing = self.writing.lock().await;
        self.drop_parts(self.parts_in(share));
    }

    /// The part maps held that fall in `share`.
    fn parts_in(&self, share: &Share) -> Vec<HeldPart> {
        let mut held = Vec::new();
        for (plugin, state) in self.plugins.states() {
            for (id, store) in state.parts() {
                if Part::from_id(&id).is_some_and(|p| share.holds(p.hash())) {
                    held.push((plugin.clone(), state.clone(), id, store));
                }
            }
        }
        held
    }

    /// Stops holding `held`, and forgets when they were written.
    fn drop_parts(&self, held: Vec<HeldPart>) {
        let mut written = self.written();
        let (mut versions, mut lost) = (self.versions(), self.lost());
        for (plugin, state, id, _) in held {
            state.drop_part(&id);
            let key = (plugin, Some(id));
            versions.remove(&key);
            lost.remove(&key);
            written.remove(&key);
        }
    }

    /// True when `store` (plugin `plugin`'s whole map, or part `part`'s) changed since it
    /// was last written or read.
    fn changed(&self, plugin: &str, part: Option<&str>, store: &StateStore) -> bool {
        let count = store.changes();
        let key = (plugin.to_owned(), part.map(str::to_owned));
        match self.written().get(&key) {
            Some(last) => *last != count,
            None => count != 0,
        }
    }

    /// Writes `store` (plugin `plugin`'s whole map, or part `part`'s) if it changed since it
    /// was last written or read; whether it wrote.
    async fn write_if_changed(
        &self,
        plugin: &str,
        part: Option<&str>,
        store: &StateStore,
    ) -> Result<bool, KeeperError> {
        let key = (plugin.to_owned(), part.map(str::to_owned));
        if !self.changed(plugin, part, store) || self.lost().contains(&key) {
            return Ok(false);
        }
        let count = store.changes();
        match self.write(plugin, part, store).await {
            Ok(bytes) => {
                self.written().insert(key, count);
                self.writes.fetch_add(1, Ordering::Relaxed);
                let rate = self.write_rate(plugin);
                self.pacer().wrote(plugin, rate, bytes, Instant::now());
                self.plugins
                    .state_of(plugin)
                    .written_bytes
                    .fetch_add(u64::try_from(bytes).unwrap_or(u64::MAX), Ordering::Relaxed);
                Ok(true)
            }
            Err(e @ KeeperError::Fenced { .. }) => {
                // Another replica owns it now: never written from here again until it is
                // taken over anew.
                self.fenced.fetch_add(1, Ordering::Relaxed);
                self.lost().insert(key);
                Err(e)
            }
            Err(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Writes every map changed since it was last written or read: the whole maps while
    /// this replica leads (once they were read), and the part maps it holds, at most
    /// `most_parts` of those per plugin (the rest wait for a later call, which starts where
    /// this one stopped); returns how many.
    pub async fn write_changed(&self, most_parts: usize) -> usize {
        let _writing = self.writing.lock().await;
        let whole = self.plugins.leading() && self.loaded.load(Ordering::SeqCst);
        let round = self.rounds.fetch_add(1, Ordering::Relaxed);
        let mut wrote = 0;
        for (plugin, state) in self.plugins.states() {
            let changed: Vec<(Option<String>, Arc<StateStore>)> = state
                .parts()
                .into_iter()
                .map(|(id, store)| (Some(id), store))
                .filter(|(part, store)| self.changed(&plugin, part.as_deref(), store))
                .collect();
            let mut maps = take_turns(changed, round, most_parts);
            if whole {
                maps.push((None, state.whole().clone()));
            }
            for (part, store) in maps {
                if !self.changed(&plugin, part.as_deref(), &store) {
                    continue;
                }
                let rate = self.write_rate(&plugin);
                if !self.pacer().may_write(&plugin, rate, Instant::now()) {
                    // It stays changed: written whole, as it is then, once the rate allows.
                    state.writes_deferred.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                match self
                    .write_if_changed(&plugin, part.as_deref(), &store)
                    .await
                {
                    Ok(true) => wrote += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(plugin = %plugin, part = part.as_deref().unwrap_or("whole"), "{e}: tried again within a second");
                    }
                }
            }
        }
        wrote
    }

    /// Plugin `plugin`'s write rate, in bytes a second (0: none).
    fn write_rate(&self, plugin: &str) -> u32 {
        self.plugins
            .settings()
            .settings(plugin)
            .limits
            .state
            .write_bytes_per_second
    }

    fn pacer(&self) -> std::sync::MutexGuard<'_, Pacer> {
        self.pacer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes the map, on the condition that it is still the version this replica last
    /// read or wrote (none known: the map is written whatever is there); the bytes of its
    /// text.
    async fn write(
        &self,
        plugin: &str,
        part: Option<&str>,
        store: &StateStore,
    ) -> Result<usize, KeeperError> {
        let text = encode(plugin, part, store);
        let name = match part {
            None => object_name(plugin),
            Some(part) => part_object_name(plugin, part),
        };
        let key = (plugin.to_owned(), part.map(str::to_owned));
        let version = self.versions().get(&key).cloned();
        let (resource_version, bytes) = self
            .apply(&name, part.is_some(), text, version.as_ref())
            .await?;
        self.versions().insert(
            key,
            Version {
                resource_version,
                owner_generation: version.map_or(0, |v| v.owner_generation),
            },
        );
        Ok(bytes)
    }

    /// Applies ConfigMap `name` holding `text` (a part's map when `part`), on the condition
    /// that it is at `version` when one is given (then with its owner generation): its new
    /// resourceVersion and the bytes of `text`; [`KeeperError::Fenced`] when it is not.
    async fn apply(
        &self,
        name: &str,
        part: bool,
        text: String,
        version: Option<&Version>,
    ) -> Result<(String, usize), KeeperError> {
        let mut labels = BTreeMap::from([
            (LABEL.to_owned(), "kubewasm".to_owned()),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                "kubewasm".to_owned(),
            ),
        ]);
        if part {
            labels.insert(PART_LABEL.to_owned(), "part".to_owned());
        }
        if text.len() > MAX_BYTES {
            return Err(KeeperError::Invalid {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
                message: format!(
                    "{} bytes: more than a ConfigMap holds (lower stateKiB)",
                    text.len()
                ),
            });
        }
        let bytes = text.len();
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                annotations: version.map(|v| {
                    BTreeMap::from([(OWNER_GENERATION.to_owned(), v.owner_generation.to_string())])
                }),
                // A precondition: the API server refuses the apply (409) once the map has
                // moved past this version.
                resource_version: version.map(|v| v.resource_version.clone()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(DATA_KEY.to_owned(), text)])),
            ..ConfigMap::default()
        };
        let mut value = serde_json::to_value(&map).unwrap_or_default();
        value["apiVersion"] = "v1".into();
        value["kind"] = "ConfigMap".into();
        let written = self
            .api
            .patch(
                name,
                &PatchParams::apply("kubewasm").force(),
                &Patch::Apply(value),
            )
            .await;
        match written {
            Ok(map) => Ok((map.metadata.resource_version.unwrap_or_default(), bytes)),
            Err(kube::Error::Api(status)) if status.code == 409 => Err(KeeperError::Fenced {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            }),
            Err(e) => Err(self.api_error(e)),
        }
    }

    /// Writes changed maps every `interval`: the whole maps while this replica leads
    /// (reading the kept state first if that has not succeeded yet), and the part maps it
    /// holds. Runs until dropped.
    pub async fn run(&self, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if self.plugins.leading()
                && !self.loaded.load(Ordering::SeqCst)
                && let Err(e) = self.load().await
            {
                tracing::warn!("{e}: plugin state not read yet, nothing written");
            }
            self.write_changed(PART_WRITES).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::manifest::{MAX_NAME_BYTES, MAX_SCHEDULES};
    use crate::wasm::state::{MAX_STATE_ENTRIES, MAX_STATE_KIB};

    #[test]
    fn the_largest_state_allowed_fits_one_config_map_however_it_escapes() {
        // Every byte a control character (JSON writes each as six), as many entries as
        // allowed, every schedule with the longest name: the worst a plugin can keep.
        // The 26 control characters JSON has no short escape for (\b \t \n \f \r have).
        let six: Vec<char> = (1u8..32)
            .filter(|b| ![8, 9, 10, 12, 13].contains(b))
            .map(char::from)
            .collect();
        let control = |i: usize| six[i % six.len()];
        let budget = MAX_STATE_KIB << 10;
        let key_len = 3;
        let value_len = budget / MAX_STATE_ENTRIES - key_len;
        let entries: BTreeMap<String, String> = (0..MAX_STATE_ENTRIES)
            .map(|i| {
                let key: String = [i, i / 26, i / 676].iter().map(|&d| control(d)).collect();
                (key, (0..value_len).map(control).collect())
            })
            .collect();
        assert_eq!(entries.len(), MAX_STATE_ENTRIES, "distinct keys");
        let store = StateStore::default();
        store.replace(entries);
        for s in 0..MAX_SCHEDULES {
            let name: String = (0..MAX_NAME_BYTES).map(|i| control(i + s)).collect();
            store.set_tick(&name, jiff::Timestamp::MAX);
        }
        let plugin: String = (0..MAX_NAME_BYTES).map(control).collect();
        let text = encode(&plugin, None, &store);
        assert!(
            text.len() <= MAX_BYTES,
            "{} bytes of JSON for {budget} bytes of state",
            text.len()
        );
        assert!(
            text.len() > MAX_BYTES * 9 / 10,
            "near the worst: {}",
            text.len()
        );
    }

    #[test]
    fn writes_are_paced_per_plugin_and_in_all() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(100_000);
        assert!(pacer.may_write("a", 10_000, t0));
        // A map of 30 KB at 10 KB a second: written, then the next waits three seconds.
        pacer.wrote("a", 10_000, 30_000, t0);
        assert!(!pacer.may_write("a", 10_000, t0 + Duration::from_millis(1900)));
        assert!(pacer.may_write("a", 10_000, t0 + Duration::from_secs(2)));
        // Others are not held by it, until all together pass the total (100 KB a second).
        let t2 = t0 + Duration::from_secs(2);
        assert!(pacer.may_write("b", 0, t2));
        pacer.wrote("b", 0, 200_000, t2);
        assert!(
            !pacer.may_write("c", 10_000, t2 + Duration::from_millis(900)),
            "past the total, every plugin waits"
        );
        assert!(pacer.may_write("c", 10_000, t2 + Duration::from_secs(1)));
    }

    #[test]
    fn names_are_readable_when_they_can_be_and_distinct_when_not() {
        assert_eq!(object_name("pod-phase"), "kubewasm-state-pod-phase");
        let odd = object_name("Pod_Phase");
        assert!(
            odd.starts_with("kubewasm-state-") && odd.len() == 31,
            "{odd}"
        );
        assert_ne!(odd, object_name("Pod_Phase2"));
        assert_ne!(object_name("-x"), "kubewasm-state--x");
    }

    #[test]
    fn part_names_are_distinct_and_fit_an_object_name() {
        for plugin in ["pod-phase".to_owned(), "p".repeat(MAX_NAME_BYTES)] {
            let a = part_object_name(&plugin, "namespace/team-a");
            assert!(a.len() <= 253, "{} bytes", a.len());
            assert!(a.starts_with(&object_name(&plugin)));
            assert_ne!(a, part_object_name(&plugin, "namespace/team-b"));
            assert_ne!(a, object_name(&plugin));
        }
    }

    #[test]
    fn changed_parts_take_turns_and_all_are_written_within_a_few_rounds() {
        let parts: Vec<u32> = (0..40).collect();
        assert_eq!(
            take_turns(parts[..10].to_vec(), 7, 16),
            parts[..10],
            "few: all"
        );
        let mut seen = std::collections::BTreeSet::new();
        for round in 0..3 {
            let taken = take_turns(parts.clone(), round, 16);
            assert_eq!(taken.len(), 16);
            seen.extend(taken);
        }
        assert_eq!(seen.len(), 40, "every part within 40 / 16 + 1 rounds");
    }
}
