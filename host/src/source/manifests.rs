//! A folder of YAML and JSON manifests playing the API server, for local runs and tests.
//!
//! Every `.yaml`, `.yml` and `.json` file under the folder (recursively, hidden entries skipped,
//! regular files only) holds objects, read as kubectl reads them (`parse.rs`): documents one
//! by one, `kind: List` expanded. A document that is not a valid object is reported with its
//! file, number and line, and the file's other documents load. The folder's state is the union
//! of its files; the first file (in path order) to define an object wins.
//!
//! After each change the files it touched are read again and their objects diffed against
//! what was last reported, by the content of each object (not its written `resourceVersion`):
//! a new or changed object is an `Applied`, a vanished one a `Deleted`; renaming a file
//! produces no event. An index of which files stand for each object makes a change cost its
//! files, not the folder; a change to a CustomResourceDefinition (which may move objects of
//! any file) or to a folder decides everything again. While a file has
//! errors, the objects it defined before stay as they were, so a half-saved edit deletes
//! nothing. Namespaces follow kubectl (`scope.rs`): a namespaced object without one lands in
//! `default` (or the namespace the folder was opened in), a cluster-scoped object's namespace
//! is dropped.
//!
//! The folder sets every resource version itself, from a folder-wide counter, and derives a uid
//! from type and key for objects without one, so owner references can be written by hand. Once
//! a scan has reported its objects the folder keeps only a digest of each (the objects
//! themselves are the cache's); one needed again later (a losing duplicate that now wins, a
//! kind whose scope changed) is read again from its file.

use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::stream::BoxStream;
use notify::RecursiveMode;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use crate::gvk::Gvk;
use crate::object::{KubeObject, Transform, names, object_key};
use crate::source::{Source, SourceEvent};
use scope::Scopes;

/// Why the folder could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// The path is not a readable directory.
    #[error("cluster folder {path}: {cause}")]
    Unreadable {
        /// The folder.
        path: PathBuf,
        /// The I/O error (in the message, so not a `source`: printed once).
        cause: std::io::Error,
    },
    /// The file watcher could not be started.
    #[error("cluster folder {path}: cannot watch for changes: {cause}")]
    Watch {
        /// The folder.
        path: PathBuf,
        /// The watcher error (in the message).
        cause: std::io::Error,
    },
}

/// An object's type and key: what the folder holds one of.
type Id = (Gvk, String);

/// SHA-256 of some bytes.
type Digest32 = [u8; 32];

fn digest(bytes: &[u8]) -> Digest32 {
    Sha256::digest(bytes).into()
}

/// One valid object of a file, remembered by its digest only (its content is read again
/// from the file when the folder must report it).
struct Doc {
    gvk: Gvk,
    /// The namespace as written (the folder's scope rules decide where it lands).
    namespace: Option<String>,
    name: String,
    /// Its position among the file's items (see `parse::items`).
    item: usize,
    /// SHA-256 of the object as it would be cached, resource version aside: the change
    /// detector.
    digest: Digest32,
    /// The kind it defines, when it is a CustomResourceDefinition.
    defines: Option<scope::Defined>,
    /// The object as JSON, from the scan that parsed it until that scan reports it.
    json: Option<Box<str>>,
}

/// What the folder knows of one file.
#[derive(Default)]
struct FileEntry {
    /// SHA-256 of the file's bytes when last read.
    hash: Digest32,
    docs: Vec<Doc>,
    /// Why some of its documents are not objects: `document N (line L): reason`.
    errors: Vec<String>,
    /// Why it could not be read at the last scan.
    unreadable: Option<String>,
    /// What each of its bad documents may stand for: the kind and name it names, each where
    /// that could be read (`None`: any).
    bad: Vec<parse::Named>,
    /// Every object it stood for at the last scan: its docs and, while it has errors, the
    /// objects it defined before (kept unchanged, so a half-saved edit deletes nothing).
    owned: Vec<Id>,
}

impl FileEntry {
    fn broken(&self) -> bool {
        !self.errors.is_empty() || self.unreadable.is_some()
    }

    /// Whether one of its documents is a CustomResourceDefinition.
    fn defines(&self) -> bool {
        self.docs.iter().any(|d| d.defines.is_some())
    }

    /// Whether object `id`, which a valid document of this file defined before, may be what
    /// one of its bad documents stands for now: kept then, since a half-saved edit deletes
    /// nothing. An object no bad document can be (they all name other objects) was removed
    /// from the file, and goes.
    fn may_stand_for(&self, id: &Id) -> bool {
        if self.unreadable.is_some() {
            return true;
        }
        let name = id.1.rsplit('/').next().unwrap_or(&id.1);
        self.bad.iter().any(|(kind, named)| {
            kind.as_ref().is_none_or(|k| *k == id.0.kind)
                && named.as_ref().is_none_or(|n| n == name)
        })
    }
}

/// An object the folder has reported.
struct Reported {
    digest: Digest32,
    object: Arc<KubeObject>,
}

/// What a file gives for an object it defines.
#[derive(Clone, Copy)]
enum Want {
    /// A valid document: its index into the file's `docs`.
    Doc(usize),
    /// A broken file's earlier object: whatever was reported stays.
    Keep,
}

/// What a reading touched, for [`Shared::reconcile`].
enum Touched {
    /// Every file, perhaps the scope rules: everything is decided again.
    All,
    /// These files, with the objects each stood for before; the scope rules are unchanged.
    Files(Vec<(PathBuf, Vec<Id>)>),
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileEntry>,
    objects: BTreeMap<Id, Reported>,
    /// Each watch: its type, what it keeps of each object, where its events go.
    watchers: Vec<(Gvk, crate::object::Keep, UnboundedSender<SourceEvent>)>,
    version: u64,
    /// Entries passed over, already reported.
    skipped: BTreeMap<PathBuf, Skipped>,
    /// Objects defined twice (the file whose definition lost), already reported.
    duplicates: BTreeSet<(Id, PathBuf)>,
    /// Objects plugins created that no file defines (`write.rs`).
    created: BTreeSet<Id>,
    /// File objects plugins deleted, with the digest of the definition they deleted: gone
    /// until that definition changes.
    deleted: BTreeMap<Id, Digest32>,
    /// Events plugins recorded, for folding repeats.
    series: crate::write::EventSeries,
    /// Kinds the folder's CustomResourceDefinitions defined, defined now or not.
    remembered: scope::Remembered,
    /// The scope rules the folder's definitions give now.
    scopes: Scopes,
    /// Every object some file stands for, with those files in path order (the first wins)
    /// and what each gives: the index of a change, so a change costs its files.
    claims: BTreeMap<Id, Vec<(PathBuf, Want)>>,
}

struct Shared {
    root: PathBuf,
    transform: Transform,
    /// Where namespaced objects written without a namespace land.
    default_namespace: String,
    state: Mutex<State>,
    /// Files read so far (what a change costs, for tests and benchmarks).
    files_read: std::sync::atomic::AtomicU64,
}

/// A source that reads objects from a folder of manifests and follows its changes.
pub struct ManifestFolder {
    shared: Arc<Shared>,
    _watcher: Option<notify::RecommendedWatcher>,
}

impl ManifestFolder {
    /// Reads the folder and follows its changes until dropped.
    pub fn open(root: &Path, transform: Transform) -> Result<Self, FolderError> {
        Self::open_in(root, transform, scope::DEFAULT_NAMESPACE)
    }

    /// [`Self::open`], with namespaced objects written without a namespace in `namespace`.
    pub fn open_in(
        root: &Path,
        transform: Transform,
        namespace: &str,
    ) -> Result<Self, FolderError> {
        let folder = Self::snapshot_in(root, transform, namespace)?;
        let shared = folder.shared.clone();
        // Each burst of changes ends with one reading, of the files it changed, once the
        // folder is quiet.
        let watcher = crate::follow::debounced(
            &folder.shared.root,
            RecursiveMode::Recursive,
            "manifest-folder",
            move |changes| shared.changed(changes),
        )
        .map_err(|source| FolderError::Watch {
            path: root.to_owned(),
            cause: source,
        })?;
        Ok(Self {
            _watcher: Some(watcher),
            ..folder
        })
    }

    /// Reads the folder once, without following changes (call [`Self::rescan`] to re-read).
    pub fn snapshot(root: &Path, transform: Transform) -> Result<Self, FolderError> {
        Self::snapshot_in(root, transform, scope::DEFAULT_NAMESPACE)
    }

    /// [`Self::snapshot`], with namespaced objects written without a namespace in `namespace`.
    pub fn snapshot_in(
        root: &Path,
        transform: Transform,
        namespace: &str,
    ) -> Result<Self, FolderError> {
        let unreadable = |source| FolderError::Unreadable {
            path: root.to_owned(),
            cause: source,
        };
        std::fs::read_dir(root).map_err(unreadable)?;
        // Absolute, as the watcher reports the paths it sees (notify joins a relative path to
        // the working folder): a change it reports must name the same file the folder read.
        let root = &std::path::absolute(root).map_err(unreadable)?;
        let shared = Arc::new(Shared {
            root: root.to_owned(),
            transform,
            default_namespace: namespace.to_owned(),
            state: Mutex::new(State::default()),
            files_read: std::sync::atomic::AtomicU64::new(0),
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

    /// Reads what `changes` touched (as the folder's watcher does) and reports what changed.
    pub fn apply_changes(&self, changes: crate::follow::Changes) {
        self.shared.changed(changes);
    }

    /// Files read so far: a change costs the files it touched.
    pub fn files_read(&self) -> u64 {
        self.shared
            .files_read
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every current problem, with its file: documents that are not valid objects
    /// (`document N (line L): reason`) and files that cannot be read.
    pub fn errors(&self) -> Vec<(PathBuf, String)> {
        self.shared
            .state()
            .files
            .iter()
            .flat_map(|(path, f)| {
                f.errors
                    .iter()
                    .chain(&f.unreadable)
                    .map(move |e| (path.clone(), e.clone()))
            })
            .collect()
    }

    /// The object of type `gvk` at `namespace`/`name` as the folder holds it now (its files
    /// and the writes on top of them), as JSON.
    pub fn object(&self, gvk: &Gvk, namespace: Option<&str>, name: &str) -> Option<Value> {
        let state = self.shared.state();
        let id = (gvk.clone(), object_key(namespace, name));
        let reported = state.objects.get(&id)?;
        serde_json::from_str(&reported.object.json()).ok()
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
    /// The whole folder's objects of `gvk`, each cut to what `scope` keeps (as a server's
    /// decode would be): a folder has no server to filter, so the informer keeps only what is
    /// in the scope.
    fn watch(&self, gvk: &Gvk, scope: &super::Scope) -> BoxStream<'static, SourceEvent> {
        let keep = scope.keep().clone();
        let (tx, mut rx) = unbounded_channel();
        let mut state = self.shared.state();
        let listed = state
            .objects
            .iter()
            .filter(|((g, _), _)| g == gvk)
            .map(|(_, r)| SourceEvent::Listed(r.object.kept(&keep)));
        // The receiver is still in hand, so these sends cannot fail.
        for event in std::iter::once(SourceEvent::ListStarted)
            .chain(listed)
            .chain([SourceEvent::ListDone])
        {
            let _ = tx.send(event);
        }
        state.watchers.push((gvk.clone(), keep, tx));
        Box::pin(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }
}

impl State {
    /// Sends `event` to the watchers of `gvk`, its object cut to what each keeps; forgets
    /// the watchers that are gone.
    fn notify(&mut self, gvk: &Gvk, event: &SourceEvent) {
        self.watchers.retain(|(g, keep, tx)| {
            g != gvk
                || tx
                    .send(match event {
                        SourceEvent::Applied(o) => SourceEvent::Applied(o.kept(keep)),
                        SourceEvent::Deleted(o) => SourceEvent::Deleted(o.kept(keep)),
                        other => other.clone(),
                    })
                    .is_ok()
        });
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads every file again (each is parsed only if its bytes changed).
    fn rescan(&self) {
        let (paths, skipped) = manifest_files(&self.root);
        let mut state = self.state();
        for (path, why) in &skipped {
            if state.skipped.get(path) != Some(why) {
                tracing::warn!(file = %path.display(), "{}", why.say());
            }
        }
        let mut files = BTreeMap::new();
        for path in paths {
            let previous = state.files.remove(&path);
            let entry = self.read_file(&path, previous);
            files.insert(path, entry);
        }
        // A folder that can no longer be listed keeps the files it had, as an unreadable
        // file keeps its objects: a permission slip deletes nothing.
        for dir in skipped
            .iter()
            .filter(|(_, why)| matches!(why, Skipped::Unlisted(_)))
            .map(|(dir, _)| dir)
        {
            let kept: Vec<PathBuf> = state
                .files
                .keys()
                .filter(|f| f.starts_with(dir))
                .cloned()
                .collect();
            for path in kept {
                if let Some(entry) = state.files.remove(&path) {
                    files.insert(path, entry);
                }
            }
        }
        state.skipped = skipped;
        self.reconcile(&mut state, files, Touched::All);
    }

    /// Reads what a burst of changes touched: the changed files alone when the changes name
    /// them, so a change costs its file rather than the folder; the whole folder when they
    /// touch anything else (a folder, a symlink, a special file) or may have been missed.
    fn changed(&self, changes: crate::follow::Changes) {
        let mut state = self.state();
        let Some(paths) = self.files_changed(&state, changes) else {
            drop(state);
            return self.rescan();
        };
        if paths.is_empty() {
            return;
        }
        let mut files = std::mem::take(&mut state.files);
        let mut touched = Vec::new();
        // A definition that appears, changes or goes may move objects of every file.
        let mut defines = false;
        for path in paths {
            let previous = files.remove(&path);
            let owned = previous
                .as_ref()
                .map(|p| p.owned.clone())
                .unwrap_or_default();
            defines |= previous.as_ref().is_some_and(FileEntry::defines);
            let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
            if regular {
                let entry = self.read_file(&path, previous);
                defines |= entry.defines();
                files.insert(path.clone(), entry);
            }
            touched.push((path, owned));
        }
        let touched = if defines {
            Touched::All
        } else {
            Touched::Files(touched)
        };
        self.reconcile(&mut state, files, touched);
    }

    /// The manifest files `changes` touched; `None` when the folder must be read whole.
    fn files_changed(
        &self,
        state: &State,
        changes: crate::follow::Changes,
    ) -> Option<BTreeSet<PathBuf>> {
        if changes.all {
            return None;
        }
        let mut files = BTreeSet::new();
        for path in changes.paths {
            let known = state.files.contains_key(&path);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_file() => {
                    if known || manifest_name(&self.root, &path) {
                        files.insert(path);
                    }
                    // Any other regular file (an editor's swap file) is no manifest.
                }
                // A folder, a symlink (a ConfigMap volume's swap), a FIFO: read it all.
                Ok(_) => return None,
                Err(_) if known => {
                    files.insert(path);
                }
                // Gone: a folder that held manifests takes them with it.
                Err(_) if state.files.keys().any(|f| f.starts_with(&path)) => return None,
                Err(_) => {}
            }
        }
        Some(files)
    }

    /// Reports what the files' objects now are against what was reported: every object
    /// after [`Touched::All`], else those the touched files stand for now or stood for.
    fn reconcile(
        &self,
        state: &mut State,
        mut files: BTreeMap<PathBuf, FileEntry>,
        touched: Touched,
    ) {
        let mut affected: BTreeSet<Id> = BTreeSet::new();
        let mut rewritten: Vec<PathBuf> = Vec::new();
        match touched {
            Touched::All => {
                let mut scopes = Scopes::new(&self.default_namespace);
                for doc in files.values().flat_map(|f| &f.docs) {
                    if let Some(defined) = &doc.defines {
                        scopes.define(defined);
                    }
                }
                scopes.remember(&mut state.remembered);
                state.scopes = scopes;
                state.claims.clear();
                affected.extend(state.objects.keys().cloned());
                affected.extend(state.deleted.keys().cloned());
                rewritten.extend(files.keys().cloned());
            }
            Touched::Files(touched) => {
                for (path, owned) in touched {
                    for id in owned {
                        if let btree_map::Entry::Occupied(mut o) = state.claims.entry(id.clone()) {
                            o.get_mut().retain(|(p, _)| *p != path);
                            if o.get().is_empty() {
                                o.remove();
                            }
                        }
                        affected.insert(id);
                    }
                    rewritten.push(path);
                }
            }
        }
        for path in &rewritten {
            if let Some(entry) = files.get_mut(path) {
                claim(&state.scopes, &mut state.claims, path, entry, &mut affected);
            }
        }
        state.files = files;
        Self::note_duplicates(state, &affected);

        // What changed, read again from its file (one read per file).
        let mut gone = BTreeSet::new();
        let mut changed: BTreeMap<PathBuf, Vec<(Id, usize)>> = BTreeMap::new();
        for id in affected {
            let live = match state.claims.get(&id).and_then(|c| c.first()) {
                None => {
                    state.deleted.remove(&id);
                    false
                }
                Some((_, Want::Keep)) => state.objects.contains_key(&id),
                Some((path, Want::Doc(i))) => {
                    let doc = &state.files[path].docs[*i];
                    if state.deleted.get(&id) == Some(&doc.digest) {
                        false
                    } else {
                        // A file defining an object takes it back from plugin writes once its
                        // definition differs from the one a plugin deleted (or the object was
                        // a plugin's creation).
                        state.deleted.remove(&id);
                        state.created.remove(&id);
                        let same = state
                            .objects
                            .get(&id)
                            .is_some_and(|r| r.digest == doc.digest);
                        if !same {
                            changed
                                .entry(path.clone())
                                .or_default()
                                .push((id.clone(), *i));
                        }
                        true
                    }
                }
            };
            if !live && !state.created.contains(&id) {
                gone.insert(id);
            }
        }
        let mut events: Vec<(Gvk, SourceEvent)> = Vec::new();
        let State {
            files,
            objects,
            version,
            ..
        } = &mut *state;
        for (path, wanted) in changed {
            let Some(entry) = files.get_mut(&path) else {
                continue;
            };
            let hash = entry.hash;
            // Read again only when an object parsed in an earlier scan is needed now.
            let mut again: Option<Option<Vec<parse::Item>>> = None;
            for (id, i) in wanted {
                let doc = &mut entry.docs[i];
                let value = match doc.json.take() {
                    Some(json) => serde_json::from_str::<Value>(&json).ok(),
                    None => again
                        .get_or_insert_with(|| self.read_again(&path, hash))
                        .as_mut()
                        .and_then(|items| items.get_mut(doc.item))
                        .and_then(|item| item.value.as_mut().ok())
                        .map(std::mem::take),
                };
                // `None`: changed since it was read; the watcher reports it and the next
                // reading takes it. Until then what was reported stays.
                let Some(value) = value else { continue };
                *version += 1;
                match self.materialize(value, id_namespace(&id), *version, Some(&path)) {
                    Ok(object) => {
                        let object = Arc::new(object);
                        events.push((id.0.clone(), SourceEvent::Applied(object.clone())));
                        let digest = doc.digest;
                        objects.insert(id, Reported { digest, object });
                    }
                    Err(e) => {
                        tracing::error!(file = %path.display(), key = %id.1, "{e}");
                        gone.insert(id);
                    }
                }
            }
        }
        // Only what the cache needs stays: a digest per object, no text.
        for path in &rewritten {
            for doc in files.get_mut(path).into_iter().flat_map(|f| &mut f.docs) {
                doc.json = None;
            }
        }
        for id in gone {
            let Some(r) = state.objects.remove(&id) else {
                continue;
            };
            // As on a server: an object with finalizers is only marked, and stays (as if
            // a plugin had created it) until a write removes the last of them.
            let mut value = serde_json::from_str::<Value>(&r.object.json()).ok();
            let held = value
                .as_mut()
                .filter(|v| write::has_finalizers(v))
                .map(|v| {
                    write::mark_deleted(v);
                    std::mem::take(v)
                });
            let Some(value) = held else {
                events.push((id.0, SourceEvent::Deleted(r.object)));
                continue;
            };
            state.version += 1;
            match self.materialize(value, id_namespace(&id), state.version, None) {
                Ok(object) => {
                    let object = Arc::new(object);
                    events.push((id.0.clone(), SourceEvent::Applied(object.clone())));
                    let digest = r.digest;
                    state
                        .objects
                        .insert(id.clone(), Reported { digest, object });
                    state.created.insert(id);
                }
                Err(e) => {
                    tracing::error!(key = %id.1, "{e}");
                    events.push((id.0, SourceEvent::Deleted(r.object)));
                }
            }
        }
        for (gvk, event) in events {
            state.notify(&gvk, &event);
        }
    }

    /// Logs the objects among `affected` that became or stopped being defined twice.
    fn note_duplicates(state: &mut State, affected: &BTreeSet<Id>) {
        for id in affected {
            let before: BTreeSet<PathBuf> = state
                .duplicates
                .range((id.clone(), PathBuf::new())..)
                .take_while(|(i, _)| i == id)
                .map(|(_, p)| p.clone())
                .collect();
            let claims = state.claims.get(id).map_or(&[][..], Vec::as_slice);
            let now: BTreeSet<PathBuf> = claims.iter().skip(1).map(|(p, _)| p.clone()).collect();
            for path in now.difference(&before) {
                let first = claims.first().map(|(p, _)| p.display().to_string());
                tracing::warn!(
                    file = %path.display(),
                    first = %first.unwrap_or_default(),
                    resource = %id.0, key = %id.1,
                    "object defined twice; using the first file's definition"
                );
                state.duplicates.insert((id.clone(), path.clone()));
            }
            for path in before.difference(&now) {
                tracing::info!(file = %path.display(), resource = %id.0, key = %id.1, "object no longer defined twice");
                state.duplicates.remove(&(id.clone(), path.clone()));
            }
        }
    }

    /// Reads `path` and, when its content changed, parses it into its objects. A problem
    /// is logged when it appears and when it clears, not at every scan.
    fn read_file(&self, path: &Path, previous: Option<FileEntry>) -> FileEntry {
        self.files_read
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let read = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| {
                let hash = digest(&bytes);
                String::from_utf8(bytes)
                    .map(|text| (hash, text))
                    .map_err(|_| "not UTF-8 text".to_owned())
            });
        let (hash, text) = match read {
            Ok(read) => read,
            Err(e) => {
                // Unreadable (or vanished between listing and reading): keep what we had.
                let mut entry = previous.unwrap_or_default();
                if entry.unreadable.as_ref() != Some(&e) {
                    tracing::error!(file = %path.display(), "cannot read manifest, keeping its objects: {e}");
                }
                entry.unreadable = Some(e);
                return entry;
            }
        };
        let previous = match previous {
            Some(unchanged) if unchanged.hash == hash && unchanged.unreadable.is_none() => {
                return unchanged;
            }
            Some(mut entry) if entry.hash == hash => {
                tracing::info!(file = %path.display(), "manifest readable again");
                entry.unreadable = None;
                return entry;
            }
            other => other,
        };
        let json = parse::is_json(path, &text);
        let mut docs = Vec::new();
        let mut errors = Vec::new();
        let mut bad = Vec::new();
        for (item, parsed) in parse::items(&text, json).into_iter().enumerate() {
            let (checked, named) = match parsed.value {
                Ok(value) => {
                    let named = vec![parse::names_of(&value)];
                    (self.doc(value, item), named)
                }
                Err(e) => (Err(e), parsed.names),
            };
            match checked {
                Ok(doc) => docs.push(doc),
                Err(e) => {
                    errors.push(format!("{}: {e}", parsed.place));
                    bad.extend(named);
                }
            }
        }
        // A problem is logged when it appears, not again at each change of its file.
        let before = previous.as_ref().map_or(&[][..], |p| p.errors.as_slice());
        for e in errors.iter().filter(|e| !before.contains(e)) {
            tracing::error!(file = %path.display(), "{e}");
        }
        if errors.is_empty() && previous.as_ref().is_some_and(FileEntry::broken) {
            tracing::info!(file = %path.display(), "manifest valid again");
        }
        FileEntry {
            hash,
            docs,
            errors,
            unreadable: None,
            bad,
            owned: previous.map(|p| p.owned).unwrap_or_default(),
        }
    }

    /// The items of `path` when its content still has the digest `hash`.
    fn read_again(&self, path: &Path, hash: Digest32) -> Option<Vec<parse::Item>> {
        let bytes = std::fs::read(path).ok()?;
        if digest(&bytes) != hash {
            return None;
        }
        let text = String::from_utf8(bytes).ok()?;
        Some(parse::items(&text, parse::is_json(path, &text)))
    }

    /// Checks one item is an object the folder can hold, and remembers it by digest.
    fn doc(&self, mut value: Value, item: usize) -> Result<Doc, String> {
        if let Some(api_version) = value.get("apiVersion").and_then(Value::as_str) {
            parse::check_api_version(api_version).map_err(|e| e.to_string())?;
        }
        if let Some(Value::Object(meta)) = value.get_mut("metadata") {
            // The folder plays the API server: it sets resource versions itself.
            meta.remove("resourceVersion");
            if !meta.contains_key("name") && meta.contains_key("generateName") {
                return Err("metadata.generateName without metadata.name: the folder cannot generate names (kubectl apply cannot either); give the object a name".into());
            }
            // The API server reads a null label or annotation value as empty.
            for field in ["labels", "annotations"] {
                if let Some(Value::Object(map)) = meta.get_mut(field) {
                    for v in map.values_mut().filter(|v| v.is_null()) {
                        *v = Value::String(String::new());
                    }
                }
            }
        }
        let defines = scope::Defined::from_crd(&value);
        let object = KubeObject::from_value(value, &self.transform).map_err(|e| e.to_string())?;
        if let Some(why) = scope::unserved(object.gvk()) {
            return Err(why);
        }
        // What a file names becomes a cache key (`namespace/name`) and, for writes, a URL. A
        // built-in cluster-scoped kind's namespace is dropped, so it is not checked.
        let cluster = Scopes::default().of(object.gvk()) == scope::Scope::Cluster;
        names::check(object.name(), object.namespace().filter(|_| !cluster))
            .map_err(|e| e.to_string())?;
        let json = object.json();
        Ok(Doc {
            digest: digest(json.as_bytes()),
            gvk: object.gvk().clone(),
            namespace: object.namespace().map(str::to_owned),
            name: object.name().to_owned(),
            item,
            defines,
            json: Some(json.into_boxed_str()),
        })
    }

    /// Places the object in `namespace` (its scope decided it), adds the folder's resource
    /// version (and a derived uid when absent) and builds it; `file` is where it is written (none:
    /// a plugin wrote it).
    fn materialize(
        &self,
        mut value: Value,
        namespace: Option<&str>,
        version: u64,
        file: Option<&Path>,
    ) -> Result<KubeObject, crate::object::ObjectError> {
        let identity = format!(
            "{}/{}/{}/{}",
            value_str(&value, "/apiVersion"),
            value_str(&value, "/kind"),
            namespace.unwrap_or(""),
            value_str(&value, "/metadata/name")
        );
        let kind = value_str(&value, "/kind").to_owned();
        if let Some(Value::Object(meta)) = value.get_mut("metadata") {
            match namespace {
                Some(ns) => {
                    meta.insert("namespace".into(), Value::String(ns.to_owned()));
                }
                None => {
                    if let Some(Value::String(written)) = meta.remove("namespace")
                        && !written.is_empty()
                    {
                        let name = meta.get("name").and_then(Value::as_str).unwrap_or_default();
                        let file = file.map_or_else(
                            || "(a plugin's write)".into(),
                            |f| f.display().to_string(),
                        );
                        tracing::warn!(%file, namespace = %written, "{kind} {name} is cluster-scoped: the namespace written for it is ignored");
                    }
                }
            }
            meta.insert("resourceVersion".into(), Value::String(version.to_string()));
            meta.entry("uid")
                .or_insert_with(|| Value::String(derived_uid(&identity)));
        }
        KubeObject::from_value(value, &self.transform)
    }
}

/// Files `entry` (at `path`) in `claims` under every object it stands for now: its valid
/// documents and, while it is broken, the objects it defined before that a bad document may
/// still be. Each is added to `affected`.
fn claim(
    scopes: &Scopes,
    claims: &mut BTreeMap<Id, Vec<(PathBuf, Want)>>,
    path: &Path,
    entry: &mut FileEntry,
    affected: &mut BTreeSet<Id>,
) {
    let ids: Vec<Id> = entry.docs.iter().map(|d| id(scopes, d)).collect();
    let kept: Vec<Id> = if entry.broken() {
        let now: BTreeSet<&Id> = ids.iter().collect();
        entry
            .owned
            .iter()
            .filter(|id| !now.contains(id) && entry.may_stand_for(id))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    entry.owned = ids.iter().chain(&kept).cloned().collect();
    let wants = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| (id, Want::Doc(i)))
        .chain(kept.into_iter().map(|id| (id, Want::Keep)));
    for (id, want) in wants {
        let files = claims.entry(id.clone()).or_default();
        // After the files before it in path order, and after its own earlier documents.
        let at = files.partition_point(|(p, _)| p.as_path() <= path);
        files.insert(at, (path.to_owned(), want));
        affected.insert(id);
    }
}

/// Where `doc` lands: its type and key, after the scope rules.
fn id(scopes: &Scopes, doc: &Doc) -> Id {
    let namespace = scopes.namespace(&doc.gvk, doc.namespace.as_deref());
    (doc.gvk.clone(), object_key(namespace, &doc.name))
}

/// The namespace part of an object's key.
fn id_namespace(id: &Id) -> Option<&str> {
    id.1.split_once('/').map(|(ns, _)| ns)
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

/// True for a path under `root` that the folder reads as a manifest: a `.yaml`, `.yml` or
/// `.json` file, with no hidden name (nor a backup `~`) on the way.
fn manifest_name(root: &Path, path: &Path) -> bool {
    let Ok(relative) = path.strip_prefix(root) else {
        return false;
    };
    let visible = relative.components().all(|c| {
        let name = c.as_os_str().to_string_lossy();
        !name.starts_with('.') && !name.ends_with('~')
    });
    visible && manifest_extension(path)
}

/// True for a `.yaml`, `.yml` or `.json` name.
fn manifest_extension(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Why an entry of the folder is not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// Named like a manifest, but a FIFO, device or socket (reading a FIFO would block).
    NotRegular,
    /// A folder reached again through a symlink (a loop, or a second way to one folder).
    ReadAlready,
    /// A folder that cannot be listed (its permissions), with the reason.
    Unlisted(String),
    /// Named like a manifest, but what it names cannot be reached: a dangling symlink or a
    /// loop of symlinks, with the reason.
    Unreachable(String),
}

impl Skipped {
    fn say(&self) -> String {
        match self {
            Skipped::NotRegular => {
                "skipping: not a regular file (a FIFO, device or socket is never read)".into()
            }
            Skipped::ReadAlready => {
                "skipping: a symlink leads to a folder already read (each folder is read once)"
                    .into()
            }
            Skipped::Unlisted(why) => format!(
                "skipping: cannot list this folder ({why}); its manifests are not loaded until it can be"
            ),
            Skipped::Unreachable(why) => {
                format!("skipping: cannot follow this symlink ({why})")
            }
        }
    }
}

/// The manifest files under `root` (sorted, hidden files and folders skipped), and the
/// entries passed over, with why: manifest-named entries that are not regular files (never
/// opened), and folders reached again through a symlink (each directory is read once).
pub fn manifest_files(root: &Path) -> (Vec<PathBuf>, BTreeMap<PathBuf, Skipped>) {
    let mut out = Vec::new();
    let mut skipped = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(dir) = dirs.pop() {
        let Ok(real) = std::fs::canonicalize(&dir) else {
            continue;
        };
        if !seen.insert(real) {
            skipped.insert(dir, Skipped::ReadAlready);
            continue;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                skipped.insert(dir, Skipped::Unlisted(e.to_string()));
                continue;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name.ends_with('~') {
                continue;
            }
            let path = entry.path();
            let manifest = manifest_extension(&path);
            // Symlinks followed: what they point at decides.
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) => {
                    if manifest {
                        skipped.insert(path, Skipped::Unreachable(e.to_string()));
                    }
                    continue;
                }
            };
            if meta.is_dir() {
                dirs.push(path);
            } else if manifest {
                if meta.is_file() {
                    out.push(path);
                } else {
                    skipped.insert(path, Skipped::NotRegular);
                }
            }
        }
    }
    out.sort();
    (out, skipped)
}

pub mod parse;
pub mod scope;
mod served;
mod write;

#[cfg(test)]
mod tests;
