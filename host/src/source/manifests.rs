//! A folder of YAML and JSON manifests playing the API server, for local runs and tests.
//!
//! Every `.yaml`, `.yml` and `.json` file under the folder (recursively, hidden entries skipped)
//! holds one or more objects: multi-document YAML and `kind: List` are expanded. The folder's
//! state is the union of its files. After each change (debounced) the folder is rescanned and
//! diffed against what was last reported: a new or changed object is an `Applied`, a vanished one
//! a `Deleted`. Renaming a file therefore produces no event. A file that fails to parse is
//! reported once with its path and the reason, and its last good objects stay in place.
//!
//! Objects without `metadata.resourceVersion` get one from a folder-wide counter, and objects
//! without `metadata.uid` get one derived from their type and key, so owner references can be
//! written by hand.

use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::stream::BoxStream;
use notify::RecursiveMode;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use crate::gvk::Gvk;
use crate::object::{KubeObject, Transform};
use crate::source::{Source, SourceEvent};

/// Why the folder could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// The path is not a readable directory.
    #[error("cluster folder {path}: {source}")]
    Unreadable {
        /// The folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file watcher could not be started.
    #[error("cluster folder {path}: cannot watch for changes: {source}")]
    Watch {
        /// The folder.
        path: PathBuf,
        /// The watcher error.
        source: std::io::Error,
    },
}

/// One object as written in a file, before the folder adds its resource version.
#[derive(Clone)]
struct Written {
    gvk: Gvk,
    key: String,
    /// The object as JSON text exactly as written (after the transform): the change detector.
    text: String,
    value: Value,
}

/// A file's last read text and its last good objects.
struct FileEntry {
    text: String,
    objects: Vec<Written>,
    error: Option<String>,
}

/// An object the folder has reported.
struct Reported {
    text: String,
    object: Arc<KubeObject>,
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileEntry>,
    objects: BTreeMap<(Gvk, String), Reported>,
    watchers: Vec<(Gvk, UnboundedSender<SourceEvent>)>,
    version: u64,
    /// Manifest-named entries that are not regular files, already reported.
    skipped: BTreeSet<PathBuf>,
}

struct Shared {
    root: PathBuf,
    transform: Transform,
    state: Mutex<State>,
}

/// A source that reads objects from a folder of manifests and follows its changes.
pub struct ManifestFolder {
    shared: Arc<Shared>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl ManifestFolder {
    /// Reads the folder and follows its changes until dropped.
    pub fn open(root: &Path, transform: Transform) -> Result<Self, FolderError> {
        let folder = Self::snapshot(root, transform)?;
        let shared = folder.shared.clone();
        // Each burst of changes ends with one rescan once the folder is quiet.
        let watcher = crate::watch::debounced(
            root,
            RecursiveMode::Recursive,
            "manifest-folder",
            move || shared.rescan(),
        )
        .map_err(|source| FolderError::Watch {
            path: root.to_owned(),
            source,
        })?;
        Ok(Self {
            _watcher: Some(watcher),
            ..folder
        })
    }

    /// Reads the folder once, without following changes (call [`Self::rescan`] to re-read).
    pub fn snapshot(root: &Path, transform: Transform) -> Result<Self, FolderError> {
        std::fs::read_dir(root).map_err(|source| FolderError::Unreadable {
            path: root.to_owned(),
            source,
        })?;
        let shared = Arc::new(Shared {
            root: root.to_owned(),
            transform,
            state: Mutex::new(State::default()),
        });
        shared.rescan();
        Ok(Self {
            shared,
            _watcher: None,
        })
    }

    /// Re-reads the folder now and reports what changed.
    pub fn rescan(&self) {
        self.shared.rescan();
    }

    /// Files that currently fail to parse, with the reason.
    pub fn errors(&self) -> Vec<(PathBuf, String)> {
        self.shared
            .state()
            .files
            .iter()
            .filter_map(|(path, f)| f.error.clone().map(|e| (path.clone(), e)))
            .collect()
    }

    /// Number of objects currently in the folder.
    pub fn len(&self) -> usize {
        self.shared.state().objects.len()
    }

    /// True when the folder holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Source for ManifestFolder {
    fn watch(&self, gvk: &Gvk) -> BoxStream<'static, SourceEvent> {
        let (tx, mut rx) = unbounded_channel();
        let mut state = self.shared.state();
        let listed = state
            .objects
            .iter()
            .filter(|((g, _), _)| g == gvk)
            .map(|(_, r)| SourceEvent::Listed(r.object.clone()));
        // The receiver is still in hand, so these sends cannot fail.
        for event in std::iter::once(SourceEvent::ListStarted)
            .chain(listed)
            .chain([SourceEvent::ListDone])
        {
            let _ = tx.send(event);
        }
        state.watchers.push((gvk.clone(), tx));
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn rescan(&self) {
        let (paths, skipped) = manifest_files(&self.root);
        let mut state = self.state();
        for path in skipped.difference(&state.skipped) {
            tracing::warn!(file = %path.display(), "skipping: not a regular file (a FIFO, device or socket is never read)");
        }
        state.skipped = skipped;
        let mut files = BTreeMap::new();
        for path in paths {
            let previous = state.files.remove(&path);
            let entry = self.read_file(&path, previous);
            files.insert(path, entry);
        }
        state.files = files;

        // The folder's desired state: the union of every file's objects. The first file (in
        // path order) that defines an object wins.
        let mut desired: BTreeMap<(Gvk, String), (&PathBuf, &Written)> = BTreeMap::new();
        for (path, entry) in &state.files {
            for written in &entry.objects {
                match desired.entry((written.gvk.clone(), written.key.clone())) {
                    btree_map::Entry::Vacant(v) => {
                        v.insert((path, written));
                    }
                    btree_map::Entry::Occupied(o) => tracing::warn!(
                        file = %path.display(),
                        first = %o.get().0.display(),
                        resource = %written.gvk,
                        key = %written.key,
                        "object defined twice; using the first file's definition"
                    ),
                }
            }
        }
        let desired: Vec<((Gvk, String), PathBuf, Written)> = desired
            .into_iter()
            .map(|(id, (path, w))| (id, path.clone(), w.clone()))
            .collect();

        let mut events: Vec<(Gvk, SourceEvent)> = Vec::new();
        let mut live = std::collections::BTreeSet::new();
        for (id, path, written) in desired {
            live.insert(id.clone());
            if state
                .objects
                .get(&id)
                .is_some_and(|r| r.text == written.text)
            {
                continue;
            }
            state.version += 1;
            let version = state.version;
            match self.materialize(written.value, version) {
                Ok(object) => {
                    let object = Arc::new(object);
                    events.push((id.0.clone(), SourceEvent::Applied(object.clone())));
                    state.objects.insert(
                        id,
                        Reported {
                            text: written.text,
                            object,
                        },
                    );
                }
                Err(e) => tracing::error!(file = %path.display(), key = %id.1, "{e}"),
            }
        }
        let gone: Vec<(Gvk, String)> = state
            .objects
            .keys()
            .filter(|id| !live.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(r) = state.objects.remove(&id) {
                events.push((id.0, SourceEvent::Deleted(r.object)));
            }
        }
        for (gvk, event) in events {
            state
                .watchers
                .retain(|(g, tx)| g != &gvk || tx.send(event.clone()).is_ok());
        }
    }

    fn read_file(&self, path: &Path, previous: Option<FileEntry>) -> FileEntry {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                // Vanished between listing and reading, or unreadable: keep what we had.
                tracing::error!(file = %path.display(), "cannot read manifest: {e}");
                return previous.unwrap_or(FileEntry {
                    text: String::new(),
                    objects: Vec::new(),
                    error: Some(e.to_string()),
                });
            }
        };
        let previous = match previous {
            Some(unchanged) if unchanged.text == text => return unchanged,
            other => other,
        };
        match parse_manifest(path, &text, &self.transform) {
            Ok(objects) => FileEntry {
                text,
                objects,
                error: None,
            },
            Err(error) => {
                tracing::error!(
                    file = %path.display(),
                    "invalid manifest, keeping its last good objects ({}): {error}",
                    previous.as_ref().map_or(0, |p| p.objects.len())
                );
                FileEntry {
                    text,
                    objects: previous.map(|p| p.objects).unwrap_or_default(),
                    error: Some(error),
                }
            }
        }
    }

    /// Adds the folder's resource version (and a derived uid when absent) and builds the object.
    fn materialize(
        &self,
        mut value: Value,
        version: u64,
    ) -> Result<KubeObject, crate::object::ObjectError> {
        let identity = format!(
            "{}/{}/{}/{}",
            value_str(&value, "/apiVersion"),
            value_str(&value, "/kind"),
            value_str(&value, "/metadata/namespace"),
            value_str(&value, "/metadata/name")
        );
        if let Some(Value::Object(meta)) = value.get_mut("metadata") {
            meta.entry("resourceVersion")
                .or_insert_with(|| Value::String(version.to_string()));
            meta.entry("uid")
                .or_insert_with(|| Value::String(derived_uid(&identity)));
        }
        KubeObject::from_value(value, &self.transform)
    }
}

fn value_str<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A stable uid in UUID form derived from an object's identity.
fn derived_uid(identity: &str) -> String {
    let digest = Sha256::digest(identity.as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Manifest files under `root`, sorted, skipping hidden files and folders.
/// The manifest files under `root` (sorted), and the manifest-named entries that are not
/// regular files (never opened: reading a FIFO would block for good). Each directory is read
/// once, however many symlinks lead to it.
fn manifest_files(root: &Path) -> (Vec<PathBuf>, BTreeSet<PathBuf>) {
    let mut out = Vec::new();
    let mut skipped = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(real) = std::fs::canonicalize(&dir) else {
            continue;
        };
        if !seen.insert(real) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name.ends_with('~') {
                continue;
            }
            let path = entry.path();
            // Symlinks followed: what they point at decides.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml" | "json")
            ) {
                if meta.is_file() {
                    out.push(path);
                } else {
                    skipped.insert(path);
                }
            }
        }
    }
    out.sort();
    (out, skipped)
}

/// Parses one file into its objects; an error names the document and the reason.
fn parse_manifest(path: &Path, text: &str, transform: &Transform) -> Result<Vec<Written>, String> {
    let documents: Vec<Value> = if path.extension().is_some_and(|e| e == "json") {
        vec![serde_json::from_str(text).map_err(|e| e.to_string())?]
    } else {
        let mut docs = Vec::new();
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let value: Value = serde::Deserialize::deserialize(doc)
                .map_err(|e| format!("document {}: {e}", i + 1))?;
            docs.push(value);
        }
        docs
    };
    let mut objects = Vec::new();
    for (i, doc) in documents.into_iter().enumerate() {
        let items = match doc {
            Value::Null => continue,
            Value::Object(mut map) if is_list(&map) => match map.remove("items") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            },
            other => vec![other],
        };
        for item in items {
            let object = KubeObject::from_value(item.clone(), transform)
                .map_err(|e| format!("document {}: {e}", i + 1))?;
            let mut value = item;
            if let Value::Object(map) = &mut value {
                transform.apply(map);
            }
            objects.push(Written {
                gvk: object.gvk,
                key: object.key,
                text: object.json.into_string(),
                value,
            });
        }
    }
    Ok(objects)
}

/// True for `kind: List` (or any `*List`) documents with an `items` array.
fn is_list(map: &serde_json::Map<String, Value>) -> bool {
    map.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && map.get("items").is_some_and(Value::is_array)
}

#[cfg(test)]
mod tests;
