//! What a component costs to compile, read before compiling it: its functions and exports,
//! counted in one pass over its sections (nested modules and components included).

/// Most functions (defined in core modules) a plugin component may have (the Python example:
/// 13,367; JavaScript: 12,718; Rust: about 300).
pub const MAX_FUNCTIONS: u64 = 100_000;
/// Most exports (of core modules and components together) a plugin component may have (the
/// Python example: 4,222; a 917 KB component with 50,000 took 628 MB to compile).
pub const MAX_EXPORTS: u64 = 10_000;

/// Counts of a component's contents.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Functions defined in its core modules.
    pub functions: u64,
    /// Exports of its core modules and components.
    pub exports: u64,
}

/// The counts of `bytes`, stopping as soon as one is over its limit. Bytes that do not parse
/// count as far as they do: compiling them fails with wasmtime's own error.
pub fn shape(bytes: &[u8]) -> Shape {
    use wasmparser::Payload;
    let mut shape = Shape::default();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload {
            Ok(Payload::FunctionSection(r)) => shape.functions += u64::from(r.count()),
            Ok(Payload::ExportSection(r)) => shape.exports += u64::from(r.count()),
            Ok(Payload::ComponentExportSection(r)) => shape.exports += u64::from(r.count()),
            Ok(_) => {}
            Err(_) => break,
        }
        if shape.functions > MAX_FUNCTIONS || shape.exports > MAX_EXPORTS {
            break;
        }
    }
    shape
}

/// Why a component is refused before compiling, if it is.
pub fn refusal(shape: Shape) -> Option<String> {
    if shape.functions > MAX_FUNCTIONS {
        return Some(format!(
            "more than {MAX_FUNCTIONS} functions: refused before compiling"
        ));
    }
    if shape.exports > MAX_EXPORTS {
        return Some(format!(
            "more than {MAX_EXPORTS} exports: refused before compiling"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_functions_and_exports_of_nested_modules() {
        let wat = r#"(component
            (core module $m
                (func (export "a")) (func (export "b")) (func))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "a")))
            (export "f" (func $f)))"#;
        let bytes = wat::parse_str(wat).expect("valid component");
        assert_eq!(
            shape(&bytes),
            Shape {
                functions: 3,
                exports: 3
            }
        );
        assert_eq!(refusal(shape(&bytes)), None);
    }

    #[test]
    fn a_module_of_many_exports_is_refused_before_compiling() {
        let funcs: String = (0..=MAX_EXPORTS)
            .map(|i| format!("(func (export \"f{i}\"))"))
            .collect();
        let bytes = wat::parse_str(format!("(module {funcs})")).expect("valid module");
        let refused = refusal(shape(&bytes)).expect("refused");
        assert!(refused.contains("exports"), "{refused}");
        let engine = crate::wasm::Engine::new().expect("engine");
        let error = engine
            .compile(&bytes, "0")
            .err()
            .expect("the engine refuses it");
        assert!(
            matches!(error, crate::wasm::LoadError::TooComplex(_)),
            "{error}"
        );
    }
}
