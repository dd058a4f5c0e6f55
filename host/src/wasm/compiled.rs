//! The compiled-code cache: machine code on disk, named by the component's SHA-256 and the
//! engine's compatibility hash, bounded in size (least recently used evicted first).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use wasmtime::component::Component;

/// The default bound on the cache folder.
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// A folder of precompiled components.
pub struct CompiledCache {
    dir: PathBuf,
    max_bytes: u64,
    /// The engine's compatibility hash, part of every file name.
    engine: u64,
}

impl CompiledCache {
    /// The cache in `dir` (created if missing), holding at most `max_bytes`.
    pub fn open(dir: &Path, max_bytes: u64, engine: &wasmtime::Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            max_bytes,
            engine: hasher.finish(),
        })
    }

    fn path(&self, sha256: &str) -> PathBuf {
        self.dir
            .join(format!("{sha256}-{:016x}.cwasm", self.engine))
    }

    /// The machine code cached for content `sha256`, if any (then marked recently used).
    pub fn lookup(&self, engine: &wasmtime::Engine, sha256: &str) -> Option<Component> {
        let path = self.path(sha256);
        if !path.exists() {
            return None;
        }
        match load_precompiled(engine, &path) {
            Ok(component) => {
                let _ = std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(SystemTime::now()));
                Some(component)
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), "ignoring unusable precompiled code: {e:#}");
                None
            }
        }
    }

    /// Compiles `bytes` (content `sha256`), keeps the machine code, and evicts what no
    /// longer fits. A cache folder that cannot take the code (full, read-only, removed) is
    /// logged and the code used from memory: the plugin loads either way.
    pub fn compile(
        &self,
        engine: &wasmtime::Engine,
        bytes: &[u8],
        sha256: &str,
    ) -> wasmtime::Result<Component> {
        let compiled = engine.precompile_component(bytes)?;
        self.store(engine, sha256, &compiled)
    }

    /// Keeps machine code this host compiled for content `sha256` (in a child process, or
    /// just now) and loads it; evicts what no longer fits. A folder that cannot take it is
    /// logged and the code used from memory.
    pub fn store(
        &self,
        engine: &wasmtime::Engine,
        sha256: &str,
        compiled: &[u8],
    ) -> wasmtime::Result<Component> {
        let path = self.path(sha256);
        match crate::whole_file::write(&path, compiled) {
            Ok(()) => {
                self.evict(&path);
                // Another host sharing the folder may have evicted the file already.
                load_precompiled(engine, &path).or_else(|e| {
                    tracing::warn!(file = %path.display(), "cached code unusable, using it from memory: {e:#}");
                    from_memory(engine, compiled)
                })
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), "compiled code not cached: {e}");
                from_memory(engine, compiled)
            }
        }
    }

    /// Removes the least recently used files until the folder fits its bound, keeping `keep`.
    fn evict(&self, keep: &Path) {
        let code = |p: &Path| p.extension().is_some_and(|x| x == "cwasm");
        crate::whole_file::evict_oldest(&self.dir, self.max_bytes, keep, code, "compiled code");
    }
}

/// Loads machine code this host has just produced with `Engine::precompile_component`, in
/// this process or in a compiling child of its own binary (`compiler.rs`).
#[allow(unsafe_code)]
pub fn from_memory(engine: &wasmtime::Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: the bytes come from `precompile_component` of an engine with this engine's
    // settings a moment ago: this process's, or a child process of this host's own binary
    // that handed them over a pipe and nothing else; wasmtime also checks their header,
    // version and settings.
    unsafe { Component::deserialize(engine, compiled) }
}

/// Maps precompiled code written by [`CompiledCache::compile`] back in.
#[allow(unsafe_code)]
fn load_precompiled(engine: &wasmtime::Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was produced by `Engine::precompile_component` of this host into its
    // own cache folder (written to a temporary name, then renamed), and is named by the
    // source's hash and the engine's compatibility hash; wasmtime also checks its header,
    // version and settings. The operator keeps that folder writable by the host alone.
    unsafe { Component::deserialize_file(engine, path) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> Vec<u8> {
        wat::parse_str("(component (core module (func (export \"f\"))))").expect("wat")
    }

    fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .expect("read cache folder")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == extension))
            .collect()
    }

    #[test]
    fn hosts_compiling_the_same_component_at_once_all_load_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = wasmtime::Engine::default();
        let bytes = component();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    // One cache per thread, as separate hosts sharing a folder have.
                    let cache = CompiledCache::open(dir.path(), DEFAULT_CACHE_BYTES, &engine)
                        .expect("open cache");
                    for _ in 0..10 {
                        cache
                            .compile(&engine, &bytes, "same")
                            .expect("compiled and loaded");
                    }
                });
            }
        });
        assert_eq!(files(dir.path(), "cwasm").len(), 1);
        assert_eq!(files(dir.path(), "partial"), Vec::<PathBuf>::new());
        let cache = CompiledCache::open(dir.path(), DEFAULT_CACHE_BYTES, &engine).expect("open");
        assert!(cache.lookup(&engine, "same").is_some());
    }

    #[test]
    fn a_folder_that_cannot_take_the_code_still_loads_the_plugin() {
        let dir = tempfile::tempdir().expect("temp dir");
        let engine = wasmtime::Engine::default();
        let cache = CompiledCache::open(dir.path(), DEFAULT_CACHE_BYTES, &engine).expect("open");
        std::fs::remove_dir(dir.path()).expect("remove the folder under the cache");
        cache
            .compile(&engine, &component(), "gone")
            .expect("loaded from memory");
        assert!(cache.lookup(&engine, "gone").is_none());
    }
}
