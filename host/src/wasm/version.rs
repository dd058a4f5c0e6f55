//! Which version of the contract a component was built for, read from its import and export
//! names (`kubewasm:plugin/cache@0.1.0`), so an old plugin gets one clear error.

use wasmtime::component::Component;

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
}
