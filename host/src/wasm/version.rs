//! What a component's import and export names say: which version of the contract it was
//! built for (`kubewasm:plugin/cache@0.1.0`), so a component of a version the host does not
//! speak gets one clear error, and whether it can query the cache by index.

use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

/// The contract version this host speaks and plugins are built against.
pub const CONTRACT: &str = "0.5.0";

/// The versions the host runs: the current one, 0.4, 0.3 and 0.2 (their imports answered by
/// 0.5's).
const RUNS: [Contract; 4] = [Contract::V5, Contract::V4, Contract::V3, Contract::V2];

const PACKAGE: &str = "kubewasm:plugin/";

/// A contract version the host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// 0.5.
    V5,
    /// 0.4.
    V4,
    /// 0.3.
    V3,
    /// 0.2.
    V2,
}

impl Contract {
    /// The version as components name it (`0.4.0`).
    pub fn version(self) -> &'static str {
        match self {
            Contract::V5 => CONTRACT,
            Contract::V4 => "0.4.0",
            Contract::V3 => "0.3.0",
            Contract::V2 => "0.2.0",
        }
    }
}

/// The earlier versions the host runs, for messages (`0.4.0, 0.3.0 and 0.2.0`).
pub fn earlier() -> String {
    let versions: Vec<&str> = RUNS[1..].iter().map(|c| c.version()).collect();
    match versions.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The contract `component` was built for; the version it names when the host runs no such
/// version (`kubewasm:plugin@0.1.0`), or when it mixes two.
pub fn of(component: &Component, engine: &wasmtime::Engine) -> Result<Contract, String> {
    let ty = component.component_type();
    let imports = ty.imports(engine).map(|(name, _)| name);
    let exports = ty.exports(engine).map(|(name, _)| name);
    let mut found: Option<&str> = None;
    for name in imports.chain(exports) {
        let Some((_, version)) = name.strip_prefix(PACKAGE).and_then(|n| n.split_once('@')) else {
            continue;
        };
        if !RUNS.iter().any(|c| c.version() == version) {
            return Err(format!("kubewasm:plugin@{version}"));
        }
        match found {
            Some(seen) if seen != version => {
                return Err(format!("kubewasm:plugin@{seen} and @{version} at once"));
            }
            _ => found = Some(version),
        }
    }
    Ok(RUNS
        .into_iter()
        .find(|c| Some(c.version()) == found)
        .unwrap_or(Contract::V5))
}

/// The cache queries that read indexes: `list-objects` starts from the `namespace` or
/// `label` index.
const INDEX_QUERIES: [&str; 4] = ["list-objects", "by-index", "index-keys", "index-values"];

/// True when `component` imports a cache query that reads indexes. Rust components import only
/// the functions they call; Python and JavaScript ones import them all.
pub fn queries_indexes(component: &Component, engine: &wasmtime::Engine) -> bool {
    let ty = component.component_type();
    let caches = RUNS.map(|c| format!("{PACKAGE}cache@{}", c.version()));
    ty.imports(engine).any(|(name, import)| match import.ty {
        ComponentItem::ComponentInstance(instance) if caches.iter().any(|c| c == name) => instance
            .exports(engine)
            .any(|(function, _)| INDEX_QUERIES.contains(&function)),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use crate::wasm::{Engine, LoadError};

    #[test]
    fn a_component_built_for_0_1_gets_one_error_naming_its_version() {
        let wat = r#"(component
            (import "kubewasm:plugin/logging@0.1.0" (instance
                (export "log" (func (param "message" string)))))
        )"#;
        let engine = Engine::new().expect("engine");
        let error = engine.compile(wat.as_bytes(), "0").err().expect("refused");
        assert!(
            matches!(&error, LoadError::WrongVersion { found } if found == "kubewasm:plugin@0.1.0"),
            "{error}"
        );
        let message = error.to_string();
        assert!(
            message.contains("built for kubewasm:plugin@0.1.0")
                && message.contains("kubewasm:plugin@0.5.0")
                && message.contains("0.4.0, 0.3.0 and 0.2.0"),
            "{message}"
        );
    }

    #[test]
    fn the_current_and_the_previous_version_are_told_apart_and_a_mix_refused() {
        let engine = Engine::new().expect("engine");
        let of = |imports: &str| {
            let wat = format!("(component {imports})");
            let component =
                wasmtime::component::Component::new(&engine.engine, wat).expect("valid component");
            super::of(&component, &engine.engine)
        };
        let import = |v: &str| format!(r#"(import "kubewasm:plugin/logging@{v}" (instance))"#);
        assert_eq!(of(&import("0.5.0")), Ok(super::Contract::V5));
        assert_eq!(of(&import("0.4.0")), Ok(super::Contract::V4));
        assert_eq!(of(&import("0.3.0")), Ok(super::Contract::V3));
        assert_eq!(of(&import("0.2.0")), Ok(super::Contract::V2));
        assert_eq!(of(""), Ok(super::Contract::V5), "imports nothing of ours");
        let mixed = of(&format!(
            "{} {}",
            import("0.2.0"),
            import("0.3.0").replace("logging", "cache")
        ));
        assert!(mixed.is_err_and(|e| e.contains("at once")));
    }

    #[test]
    fn only_a_component_importing_an_index_query_queries_indexes() {
        let engine = Engine::new().expect("engine");
        let with = |cache: &str, functions: &str| {
            let wat =
                format!(r#"(component (import "kubewasm:plugin/{cache}" (instance {functions})))"#);
            let component =
                wasmtime::component::Component::new(&engine.engine, wat).expect("valid component");
            super::queries_indexes(&component, &engine.engine)
        };
        for query in ["list-objects", "by-index", "index-keys", "index-values"] {
            let functions = format!(r#"(export "get" (func)) (export "{query}" (func))"#);
            assert!(with("cache@0.2.0", &functions), "{query}");
            assert!(
                !with("logging@0.2.0", &functions),
                "{query} of another interface"
            );
        }
        assert!(!with("cache@0.2.0", r#"(export "get" (func))"#));
        assert!(!with("cache@0.2.0", ""));
    }
}
