//! The library's one layering rule: a module uses only modules below it in [`LAYERS`] (and
//! itself). docs/ARCHITECTURE.md draws the same picture.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The library's top-level modules, lowest first.
const LAYERS: [&str; 35] = [
    "clock",
    "text",
    "priority",
    "rate",
    "cpu",
    "schedule",
    "captured_log",
    "whole_file",
    "gvk",
    "yaml",
    "object",
    "shard",
    "write",
    "histogram",
    "plugin_metrics",
    "follow",
    "leader",
    "members",
    "rbac",
    "oci",
    "traces",
    "otlp_metrics",
    "source",
    "informer",
    "controller",
    "wasm",
    "plugins",
    "keeper",
    "admission",
    "config",
    "crd",
    "split",
    "serve",
    "agent",
    "testing",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a library file belongs to (`None` for lib.rs and the binary).
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src()).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main" | "cli")).then(|| name.to_owned())
}

/// The top-level modules named by `crate::NAME` paths in `text`.
fn uses(text: &str) -> BTreeSet<String> {
    text.match_indices("crate::")
        .filter(|(i, _)| {
            // Not part of a longer name such as `kubewasm_crate::`.
            text[..*i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn no_module_uses_one_above_it() {
    let rank = |name: &str| LAYERS.iter().position(|l| *l == name);
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut upward = Vec::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let own = rank(&module)
            .unwrap_or_else(|| panic!("module {module} is not placed in LAYERS (tests/layers.rs)"));
        let text = std::fs::read_to_string(file).expect("read");
        for used in uses(&text) {
            let other = rank(&used).unwrap_or_else(|| {
                panic!(
                    "{} uses crate::{used}, which is not in LAYERS",
                    file.display()
                )
            });
            if other > own {
                upward.push(format!("{} ({module}) uses crate::{used}", file.display()));
            }
        }
    }
    assert!(upward.is_empty(), "upward imports:\n{}", upward.join("\n"));
}

#[test]
fn every_library_module_has_a_layer() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("read lib.rs");
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    let layered: BTreeSet<&str> = LAYERS.into_iter().collect();
    assert_eq!(declared, layered);
}

#[test]
fn the_layer_list_in_the_crate_docs_is_this_one() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).expect("read lib.rs");
    let docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join(" ");
    let start = docs.find("Layers, lowest first").expect("the layer list");
    let end = start + docs[start..].find("`testing`").expect("ends with testing") + 9;
    let named: Vec<&str> = docs[start..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    assert_eq!(named, LAYERS, "lib.rs's layer list, in order");
}

#[test]
fn the_checker_sees_an_upward_use() {
    let found = uses("use crate::agent::Agent;\nlet x = kubewasm_crate::y; crate::gvk::Gvk::new");
    assert_eq!(found, BTreeSet::from(["agent".into(), "gvk".into()]));
}
