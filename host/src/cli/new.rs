//! `kubewasm new`: a plugin project outside the checkout that builds as it is, with a test
//! file and the language's own test running `kubewasm test` on it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::ValueEnum;

/// Languages a plugin project can be created in.
#[derive(Clone, Copy, ValueEnum)]
pub enum Lang {
    /// Rust, with the kubewasm-sdk crate.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Javascript,
    /// Go, built with Go's tool chain and `kubewasm build`.
    Go,
}

/// Arguments of `kubewasm new`.
#[derive(clap::Args)]
pub struct NewArgs {
    /// The plugin's name (lowercase letters, digits and `-`): its folder, package and file
    /// name, and so its name in the host configuration.
    name: String,
    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,
    /// A controller (`reconcile` by key, owned children pruned) instead of an event handler.
    #[arg(long)]
    controller: bool,
    /// Where to create it (default: a folder NAME here).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The kubewasm checkout, for the SDKs and the contract (default: the one this binary was
    /// built from).
    #[arg(long, env = "KUBEWASM_CHECKOUT")]
    checkout: Option<PathBuf>,
}

const TEST: &str = include_str!("../../templates/test.yaml");
const CONTROLLER_TEST: &str = include_str!("../../templates/controller.test.yaml");
/// The checkout's own tool chain file: a new Rust project pins the same channel.
const TOOLCHAIN: &str = include_str!("../../../rust-toolchain.toml");

/// The channel `rust-toolchain.toml` names.
fn rust_channel() -> &'static str {
    TOOLCHAIN
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map_or("stable", |c| c.trim_matches('"'))
}
const WIT: &str = include_str!("../../../wit/plugin.wit");

/// The files of a project in `lang`, a controller or an event handler: path and template.
fn files(lang: Lang, name: &str, controller: bool) -> Vec<(String, &'static str)> {
    let mut files = handler_files(lang, name);
    if controller {
        let source = match lang {
            Lang::Rust => include_str!("../../templates/rust/controller.rs"),
            Lang::Python => include_str!("../../templates/python/controller.py"),
            Lang::Javascript => include_str!("../../templates/javascript/controller.js"),
            Lang::Go => include_str!("../../templates/go/controller.go"),
        };
        let main = ["src/lib.rs", "app.py", "plugin.js", "main.go"];
        for (path, template) in &mut files {
            if main.contains(&path.as_str()) {
                *template = source;
            } else if path.ends_with(".test.yaml") {
                *template = CONTROLLER_TEST;
            }
        }
    }
    files
}

/// The files of an event handler's project in `lang`: path and template.
fn handler_files(lang: Lang, name: &str) -> Vec<(String, &'static str)> {
    let test = (format!("tests/{name}.test.yaml"), TEST);
    match lang {
        Lang::Rust => vec![
            (
                "Cargo.toml".into(),
                include_str!("../../templates/rust/Cargo.toml"),
            ),
            (
                "src/lib.rs".into(),
                include_str!("../../templates/rust/lib.rs"),
            ),
            (
                "tests/plugin.rs".into(),
                include_str!("../../templates/rust/plugin.rs"),
            ),
            (
                "README.md".into(),
                include_str!("../../templates/rust/README.md"),
            ),
            (
                "rust-toolchain.toml".into(),
                include_str!("../../templates/rust/rust-toolchain.toml"),
            ),
            (".gitignore".into(), "/target\n"),
            test,
        ],
        Lang::Python => vec![
            (
                "app.py".into(),
                include_str!("../../templates/python/app.py"),
            ),
            (
                "build.sh".into(),
                include_str!("../../templates/python/build.sh"),
            ),
            (
                "test_plugin.py".into(),
                include_str!("../../templates/python/test_plugin.py"),
            ),
            (
                "README.md".into(),
                include_str!("../../templates/python/README.md"),
            ),
            ("wit/plugin.wit".into(), WIT),
            (".gitignore".into(), "*.wasm\n.venv/\n__pycache__/\n"),
            test,
        ],
        Lang::Javascript => vec![
            (
                "plugin.js".into(),
                include_str!("../../templates/javascript/plugin.js"),
            ),
            (
                "build.mjs".into(),
                include_str!("../../templates/javascript/build.mjs"),
            ),
            (
                "package.json".into(),
                include_str!("../../templates/javascript/package.json"),
            ),
            (
                "plugin.test.mjs".into(),
                include_str!("../../templates/javascript/plugin.test.mjs"),
            ),
            (
                "README.md".into(),
                include_str!("../../templates/javascript/README.md"),
            ),
            ("wit/plugin.wit".into(), WIT),
            (".gitignore".into(), "*.wasm\nnode_modules/\n"),
            // componentize-js cannot read a linked package outside the project.
            (".npmrc".into(), "install-links=true\n"),
            test,
        ],
        Lang::Go => vec![
            ("go.mod".into(), include_str!("../../templates/go/go.mod")),
            ("main.go".into(), include_str!("../../templates/go/main.go")),
            (
                "plugin_test.go".into(),
                include_str!("../../templates/go/plugin_test.go"),
            ),
            (
                "README.md".into(),
                include_str!("../../templates/go/README.md"),
            ),
            (".gitignore".into(), "*.wasm\n"),
            test,
        ],
    }
}

/// True for a name usable as a plugin, package and file name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
        && name.len() <= 63
}

/// `kubewasm new`.
pub async fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    let name = &args.name;
    anyhow::ensure!(
        valid_name(name),
        "{name:?} is not a plugin name: lowercase letters, digits and '-', starting with a letter (at most 63)"
    );
    let checkout = args
        .checkout
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
    let checkout = checkout.canonicalize().with_context(|| {
        format!(
            "the kubewasm checkout {} (for the SDKs): pass --checkout",
            checkout.display()
        )
    })?;
    anyhow::ensure!(
        checkout.join("plugin-sdk/Cargo.toml").exists(),
        "{} is not a kubewasm checkout (no plugin-sdk/Cargo.toml): pass --checkout",
        checkout.display()
    );
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(name));
    anyhow::ensure!(
        !dir.exists() || std::fs::read_dir(&dir)?.next().is_none(),
        "{} exists and is not empty",
        dir.display()
    );
    let kubewasm = std::env::current_exe().context("this binary's path")?;
    let crate_name = name.replace('-', "_");
    let wasm = match args.lang {
        Lang::Rust => format!("../target/wasm/wasm32-wasip2/release/{crate_name}.wasm"),
        Lang::Python | Lang::Javascript | Lang::Go => format!("../{name}.wasm"),
    };
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{crate}}", &crate_name)
            .replace("{{rust}}", rust_channel())
            .replace("{{wasm}}", &wasm)
            .replace("{{checkout}}", &checkout.display().to_string())
            .replace("{{kubewasm}}", &kubewasm.display().to_string())
            .replace(
                "{{sdk_rust}}",
                &checkout.join("plugin-sdk").display().to_string(),
            )
            .replace(
                "{{sdk_python}}",
                &checkout.join("plugin-sdk/python").display().to_string(),
            )
            .replace(
                "{{sdk_js}}",
                &checkout.join("plugin-sdk/javascript").display().to_string(),
            )
            .replace(
                "{{sdk_go}}",
                &checkout.join("plugin-sdk/go").display().to_string(),
            )
    };
    for (path, template) in files(args.lang, name, args.controller) {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| parent.display().to_string())?;
        }
        std::fs::write(&path, fill(template)).with_context(|| path.display().to_string())?;
        println!("created {}", path.display());
    }
    let next = match args.lang {
        Lang::Rust => "cargo test",
        Lang::Python => {
            "python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1 pytest && COMPONENTIZE_PY=.venv/bin/componentize-py .venv/bin/pytest"
        }
        Lang::Javascript => "npm install && npm test",
        Lang::Go => "go test",
    };
    println!("next: cd {} && {next}", dir.display());
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_what_every_language_and_the_host_accept() {
        for good in ["hello", "ns-quota", "a1"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "Hello", "ns_quota", "1a", "a-", "a.b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_rust_project_pins_the_checkouts_tool_chain_and_the_guest_target() {
        let channel = rust_channel();
        assert!(channel.starts_with("1."), "{channel}");
        let pinned = include_str!("../../templates/rust/rust-toolchain.toml");
        assert!(pinned.contains("wasm32-wasip2") && pinned.contains("{{rust}}"));
    }

    #[test]
    fn every_placeholder_of_every_template_is_filled() {
        for lang in [Lang::Rust, Lang::Python, Lang::Javascript, Lang::Go] {
            for (path, template) in [files(lang, "x", false), files(lang, "x", true)].concat() {
                let known = [
                    "{{name}}",
                    "{{crate}}",
                    "{{rust}}",
                    "{{wasm}}",
                    "{{checkout}}",
                    "{{kubewasm}}",
                    "{{sdk_rust}}",
                    "{{sdk_python}}",
                    "{{sdk_js}}",
                    "{{sdk_go}}",
                ];
                let mut rest = template.to_owned();
                for k in known {
                    rest = rest.replace(k, "");
                }
                assert!(!rest.contains("{{"), "{path}: an unknown placeholder");
            }
        }
    }
}
