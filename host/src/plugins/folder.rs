//! The plugins folder: make the loaded plugins match it, and follow its changes.
//!
//! Every `*.wasm` entry of the folder (symlinks followed, hidden names skipped) is a plugin
//! named after its file. Versions are keyed by content hash: touching or rewriting a file with
//! the same bytes does nothing, and content that failed once is not retried until it changes.
//! A ConfigMap volume's `..data` symlink swap, a rename into place and an editor's several
//! writes all end as events on the folder; after a quiet period (debounce) the folder is
//! reconciled once: new files load, changed ones replace their plugin, removed ones unload.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use notify::RecursiveMode;

use crate::follow::DEBOUNCE;
use crate::plugins::{Outcome, PluginFile, PluginHost, plugin_name};

/// What one reconciliation did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Plugins loaded for the first time.
    pub loaded: Vec<String>,
    /// Plugins whose new version replaced the running one.
    pub replaced: Vec<String>,
    /// Plugins unloaded because their file went away.
    pub unloaded: Vec<String>,
    /// Files that failed to load (the previous version, if any, keeps running).
    pub failed: Vec<String>,
    /// Files still being written, left for the next round.
    pub unstable: Vec<String>,
}

/// The plugin files of `dir`: `*.wasm` files, hidden names skipped, sorted.
pub fn plugin_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

fn fingerprint(path: &Path) -> Option<(u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// Makes the loaded plugins match `dir`. Blocking (compiles): call it off the async runtime.
pub fn sync_dir(host: &PluginHost, dir: &Path) -> std::io::Result<SyncReport> {
    let mut report = SyncReport::default();
    let settings = host.settings();
    // Plugins with a registry source are the registry's, even when a file has their name.
    let (files, shadowed): (Vec<PathBuf>, Vec<PathBuf>) = plugin_files(dir)?
        .into_iter()
        .partition(|p| !settings.from_registry(&plugin_name(p)));
    for path in shadowed {
        tracing::warn!(file = %path.display(), plugin = %plugin_name(&path), "ignored: the configuration pulls this plugin from a registry (plugins.NAME.source)");
    }
    let present: Vec<String> = files.iter().map(|p| plugin_name(p)).collect();
    for status in host.status() {
        if !present.contains(&status.name)
            && !settings.from_registry(&status.name)
            && host.unload(&status.name)
        {
            report.unloaded.push(status.name);
        }
    }
    for path in files {
        let before = fingerprint(&path);
        let file = match PluginFile::read(&path, host.max_file_bytes()) {
            // A file that changed while we read it is still being written: next round.
            Ok(file) if before.is_some() && fingerprint(&path) == before => file,
            Ok(_) => {
                report.unstable.push(plugin_name(&path));
                continue;
            }
            Err(e) => {
                // Too large, gone, unreadable: fails like any load, once per content.
                match host.refuse(&path, e) {
                    Some(name) => report.failed.push(name),
                    None => report.unstable.push(plugin_name(&path)),
                }
                continue;
            }
        };
        if host.known_failure(&file) {
            continue;
        }
        match host.apply(&file) {
            Ok(Outcome::Loaded) => report.loaded.push(file.name),
            Ok(Outcome::Replaced) => report.replaced.push(file.name),
            Ok(Outcome::Unchanged) => {}
            Err(e) => {
                tracing::error!("{e}");
                report.failed.push(file.name);
            }
        }
    }
    Ok(report)
}

/// Follows a plugins folder until dropped.
pub struct FolderWatcher {
    _watcher: notify::RecommendedWatcher,
}

impl FolderWatcher {
    /// Reconciles `dir` now, then after every burst of changes. Blocking for the first
    /// reconciliation (it compiles); call it off the async runtime.
    pub fn start(host: Arc<PluginHost>, dir: &Path) -> anyhow::Result<(Self, SyncReport)> {
        // Watch first, so that a change during the first reconciliation is not missed.
        let folder = dir.to_owned();
        let watched = host.clone();
        let watcher = crate::follow::debounced(
            dir,
            RecursiveMode::NonRecursive,
            "plugins-folder",
            // The folder is small: every burst reads it whole.
            move |_| match sync_dir(&watched, &folder) {
                Ok(report) if !report.unstable.is_empty() => {
                    // Still being written: look again once it has settled.
                    std::thread::sleep(DEBOUNCE);
                    let _ = sync_dir(&watched, &folder);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(folder = %folder.display(), "cannot read the plugins folder: {e}")
                }
            },
        )?;
        let first = sync_dir(&host, dir)?;
        Ok((Self { _watcher: watcher }, first))
    }
}
