//! What a component's import and export names say: which version of the contract it was
//! built for (`kubewasm:plugin/cache@0.1.0`), so an old plugin gets one clear error, and
//! whether it can query the cache by index.

use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

/// The contract version this host speaks.
pub const CONTRACT: &str = "0.2.0";

const PACKAGE: &str = "kubewasm:plugin/";

/// The other contract version `component` was built for (`kubewasm:plugin@0.1.0`), if any.
pub fn foreign(component: &Component, engine: &wasmtime::Engine) -> Option<String> {
    let ty = component.component_type();
    let imports = ty.imports(engine).map(|(name, _)| name);
    let exports = ty.exports(engine).map(|(name, _)| name);
    imports.chain(exports).find_map(|name| {
        let (_, version) = name.strip_prefix(PACKAGE)?.split_once('@')?;
        (version != CONTRACT).then(|| format!("kubewasm:plugin@{version}"))
    })
}

/// The cache queries that read indexes: `list-objects` starts from the `namespace` or
/// `label` index.
const INDEX_QUERIES: [&str; 4] = ["list-objects", "by-index", "index-keys", "index-values"];

/// True when `component` imports a cache query that reads indexes. Rust components import only
/// the functions they call; Python and JavaScript ones import them all.
pub fn queries_indexes(component: &Component, engine: &wasmtime::Engine) -> bool {
    let ty = component.component_type();
    let cache = format!("{PACKAGE}cache@{CONTRACT}");
    ty.imports(engine).any(|(name, import)| match import.ty {
        ComponentItem::ComponentInstance(instance) if name == cache => instance
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
                && message.contains("kubewasm:plugin@0.2.0"),
            "{message}"
        );
    }

    #[test]
    fn the_current_version_passes_the_check() {
        let wat = r#"(component
            (import "kubewasm:plugin/logging@0.2.0" (instance))
        )"#;
        let engine = Engine::new().expect("engine");
        let component =
            wasmtime::component::Component::new(&engine.engine, wat).expect("valid component");
        assert_eq!(super::foreign(&component, &engine.engine), None);
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
