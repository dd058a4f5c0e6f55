//! Plugins pulled from OCI registries: each one's source followed on a task of its own.
//!
//! A plugin whose configuration has a `source` is pulled at start; a tag is then looked up
//! again every `pollSeconds`, and when it names a new manifest, that artifact is pulled,
//! checked (digest, signature, size) and applied through the same path as a changed file:
//! prepared completely, then swapped in, or refused while the running version keeps serving.
//! Failures are retried with a backoff (1 s doubling up to the poll period), each new reason
//! logged once and shown in status.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::oci::{ArtifactCache, Digest, OciError, Puller, Source};
use crate::plugins::folder::SyncReport;
use crate::plugins::{Outcome, PluginError, PluginFile, PluginHost, Reason};

/// First delay after a failed pull or load.
const RETRY_BASE: Duration = Duration::from_secs(1);

/// The tasks following registry sources, one per plugin; dropping it stops them.
pub struct RegistryPlugins {
    host: Arc<PluginHost>,
    cache: Option<ArtifactCache>,
    tasks: Mutex<BTreeMap<String, JoinHandle<()>>>,
}

impl Drop for RegistryPlugins {
    fn drop(&mut self) {
        for task in self.tasks().values() {
            task.abort();
        }
    }
}

impl RegistryPlugins {
    /// Pulls and loads every plugin the host's settings give a registry source (waiting for
    /// each one's first attempt), then follows them. Content is cached in `cache` when given.
    pub async fn start(host: Arc<PluginHost>, cache: Option<ArtifactCache>) -> (Self, SyncReport) {
        let registry = Self {
            host,
            cache,
            tasks: Mutex::default(),
        };
        let followers: Vec<Follower> = registry
            .host
            .settings()
            .registry_sources()
            .map(|(name, source)| registry.follower(name, source.clone()))
            .collect();
        let first = futures::future::join_all(followers.into_iter().map(|mut f| async move {
            let result = f.attempt().await;
            (f, result)
        }))
        .await;
        let mut report = SyncReport::default();
        for (follower, result) in first {
            let name = follower.name.clone();
            match &result {
                Ok(Outcome::Loaded) => report.loaded.push(name.clone()),
                Ok(Outcome::Replaced) => report.replaced.push(name.clone()),
                Ok(Outcome::Unchanged) => {}
                Err(()) => report.failed.push(name.clone()),
            }
            let task = tokio::spawn(follower.follow(result.is_ok()));
            registry.tasks().insert(name, task);
        }
        (registry, report)
    }

    /// A follower of plugin `name` from `source`, nothing loaded from it yet.
    fn follower(&self, name: &str, source: Source) -> Follower {
        Follower {
            name: name.to_owned(),
            source,
            host: self.host.clone(),
            cache: self.cache.clone(),
            loaded: None,
        }
    }

    fn tasks(&self) -> MutexGuard<'_, BTreeMap<String, JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows plugin `name` from `source` from now on, in place of what it followed (its
    /// first attempt runs at once, on the task); `None` stops following it (the caller
    /// unloads it).
    pub fn follow(&self, name: &str, source: Option<Source>) {
        let mut tasks = self.tasks();
        if let Some(task) = tasks.remove(name) {
            task.abort();
        }
        let Some(source) = source else {
            return;
        };
        let mut follower = self.follower(name, source);
        let task = tokio::spawn(async move {
            let healthy = follower.attempt().await.is_ok();
            follower.follow(healthy).await;
        });
        tasks.insert(name.to_owned(), task);
    }
}

/// One plugin's registry source.
struct Follower {
    name: String,
    source: Source,
    host: Arc<PluginHost>,
    cache: Option<ArtifactCache>,
    /// The manifest digest of the version loaded from it.
    loaded: Option<Digest>,
}

impl Follower {
    /// Looks the source up again after every poll period (retrying failures sooner) for as
    /// long as it can move.
    async fn follow(mut self, mut healthy: bool) {
        let mut retry = RETRY_BASE;
        loop {
            if healthy && !self.source.follows_a_tag() {
                // Pinned and loaded: nothing can change.
                return;
            }
            let wait = if healthy { self.source.poll } else { retry };
            tokio::time::sleep(wait).await;
            healthy = self.attempt().await.is_ok();
            retry = if healthy {
                RETRY_BASE
            } else {
                (retry * 2).min(self.source.poll)
            };
        }
    }

    /// One round: resolve, and pull and apply what is new. Failures are recorded on the host.
    async fn attempt(&mut self) -> Result<Outcome, ()> {
        match self.pull().await {
            Ok(None) => {
                // The loaded version is what the source names: earlier failures are moot.
                self.host.forget_failure(&self.name);
                Ok(Outcome::Unchanged)
            }
            Ok(Some((digest, file))) => {
                if self.host.known_failure(&file) {
                    // This content failed to load before: wait for another.
                    return Err(());
                }
                let host = self.host.clone();
                let applied = tokio::task::spawn_blocking(move || host.apply(&file)).await;
                match applied {
                    Ok(Ok(outcome)) => {
                        if outcome != Outcome::Unchanged {
                            tracing::info!(plugin = %self.name, manifest = %digest, "plugin pulled from {}", self.source.reference);
                        }
                        self.loaded = Some(digest);
                        Ok(outcome)
                    }
                    Ok(Err(e)) => {
                        tracing::error!("{e}");
                        Err(())
                    }
                    Err(e) => {
                        tracing::error!(plugin = %self.name, "loading the pulled plugin panicked: {e}");
                        Err(())
                    }
                }
            }
            Err(e) => {
                self.host.record(PluginError {
                    plugin: self.name.clone(),
                    path: PathBuf::from(self.source.reference.to_string()),
                    reason: Reason::Pull(Box::new(e)),
                });
                Err(())
            }
        }
    }

    /// The component the source names now, unless it is the one loaded.
    async fn pull(&self) -> Result<Option<(Digest, PluginFile)>, OciError> {
        // Settings files are read on every attempt: a rotated pull secret, CA or key is used
        // from its next lookup on.
        let puller = Puller::new(
            self.source.clone(),
            self.cache.clone(),
            self.host.max_file_bytes(),
        )?;
        let manifest = puller.manifest().await?;
        if self.loaded.as_ref() == Some(&manifest.digest) {
            return Ok(None);
        }
        let span = crate::traces::Span::start(
            "pull",
            opentelemetry::trace::SpanKind::Client,
            None,
            || {
                vec![
                    opentelemetry::KeyValue::new("kubewasm.plugin", self.name.clone()),
                    opentelemetry::KeyValue::new(
                        "kubewasm.pull.reference",
                        self.source.reference.to_string(),
                    ),
                    opentelemetry::KeyValue::new(
                        "kubewasm.pull.manifest",
                        manifest.digest.to_string(),
                    ),
                ]
            },
        );
        let pulled = puller.pull(manifest).await;
        if let Some(mut span) = span {
            match &pulled {
                Ok(p) => {
                    span.set(opentelemetry::KeyValue::new(
                        "kubewasm.pull.verified",
                        p.verified_with.is_some(),
                    ));
                    span.end(None);
                }
                Err(e) => span.end(Some(&e.to_string())),
            }
        }
        let pulled = pulled?;
        if let Some(kind) = pulled.verified_with {
            tracing::info!(plugin = %self.name, manifest = %pulled.manifest, "cosign signature verified with the {kind} key");
        }
        let origin = self.source.reference.at(&pulled.manifest).to_string();
        let file = PluginFile::named(&self.name, Path::new(&origin), pulled.wasm);
        Ok(Some((pulled.manifest, file)))
    }
}
