//! A temporary plugins folder that tests and benchmarks fill with built plugin files.
//!
//! Setting up "these artifacts under these names" was done by hand in every test; this is the
//! one place that does it. Files arrive whole: each is copied beside its final name and renamed
//! over it, so a host watching the folder never reads half a file. These are test helpers: a
//! copy that fails panics with the file it was copying.

use std::path::{Path, PathBuf};

/// A temporary folder of plugin files, removed when dropped.
pub struct PluginFolder {
    dir: tempfile::TempDir,
}

impl PluginFolder {
    /// An empty folder.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary plugins folder: {e}"));
        Self { dir }
    }

    /// A folder holding each built file (a path) as `NAME.wasm`.
    pub fn with(plugins: &[(&str, &str)]) -> Self {
        let folder = Self::new();
        for (name, built) in plugins {
            folder.put(name, built);
        }
        folder
    }

    /// Puts the built file `built` in the folder as `NAME.wasm`, replacing any file of that
    /// name whole, and returns its path.
    pub fn put(&self, name: &str, built: impl AsRef<Path>) -> PathBuf {
        let built = built.as_ref();
        let aside = self.dir.path().join(format!(".{name}.wasm.part"));
        let path = self.file(name);
        std::fs::copy(built, &aside)
            .and_then(|_| std::fs::rename(&aside, &path))
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), path.display()));
        path
    }

    /// Removes `NAME.wasm` from the folder.
    pub fn remove(&self, name: &str) {
        let path = self.file(name);
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }

    /// The path `NAME.wasm` has (or would have) in the folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.wasm"))
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for PluginFolder {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_replaces_a_file_whole_and_leaves_nothing_aside() {
        let source = tempfile::tempdir().expect("temp dir");
        let (a, b) = (source.path().join("a"), source.path().join("b"));
        std::fs::write(&a, b"first").expect("write");
        std::fs::write(&b, b"second version").expect("write");
        let folder = PluginFolder::with(&[("one", a.to_str().expect("utf-8"))]);
        assert_eq!(std::fs::read(folder.file("one")).expect("read"), b"first");
        let path = folder.put("one", &b);
        assert_eq!(std::fs::read(&path).expect("read"), b"second version");
        let names: Vec<_> = std::fs::read_dir(folder.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["one.wasm"]);
        folder.remove("one");
        assert!(!folder.file("one").exists());
    }

    #[test]
    #[should_panic(expected = "no-such-file")]
    fn a_missing_artifact_names_itself() {
        PluginFolder::new().put("x", "/no-such-file");
    }
}
