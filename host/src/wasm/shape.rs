//! What a component costs, read before compiling it: its functions, exports and largest
//! function (compiling cost), and the memory wasmtime keeps outside linear memories and tables
//! for each instance (globals, function references), counted in one pass over its sections
//! (nested modules and components included).

/// Most functions (defined in core modules) a plugin component may have (the Python example:
/// 13,367; JavaScript: 12,718; Rust: about 300).
pub const MAX_FUNCTIONS: u64 = 100_000;
/// Most exports (of core modules and components together) a plugin component may have (the
/// Python example: 4,222; a 917 KB component with 50,000 took 628 MB to compile).
pub const MAX_EXPORTS: u64 = 10_000;
/// Largest body of one function, in bytes. The largest measured in real components: 427 KB
/// (the Python example's interpreter loop), 84 KB (JavaScript), 6 KB (Rust). Compiling costs
/// more than linearly in a function's size for some code (a function of 140,000 constant
/// additions, 0.8 MB, took 12 s and 1.1 GB to compile; one of a million, 51 s and past 4 GB).
pub const MAX_FUNCTION_BYTES: u64 = 1 << 20;

/// Bytes wasmtime keeps per global of a core instance (a `VMGlobalDefinition`).
const GLOBAL_BYTES: u64 = 16;
/// Bytes counted per function of a core instance, defined or imported: about what wasmtime
/// keeps for its function reference and import slot in the instance's context.
const FUNCTION_BYTES: u64 = 32;

/// Counts of a component's contents.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Functions defined in its core modules.
    pub functions: u64,
    /// Exports of its core modules and components.
    pub exports: u64,
    /// Bytes of the largest function body.
    pub largest_function: u64,
    /// Bytes one instance of the component keeps outside its linear memories and tables:
    /// the globals and functions of every core instance it creates, as often as it creates
    /// each (a module instantiated 60 times counts 60 times).
    pub instance_bytes: u64,
}

/// One component or module being read, innermost last.
enum Frame {
    Module {
        cost: u64,
    },
    Component {
        /// Per-instantiation cost of each entry of the core module index space.
        modules: Vec<u64>,
        /// Per-instantiation cost of each entry of the component index space.
        components: Vec<u64>,
        /// Cost of instantiating this component once.
        cost: u64,
    },
}

/// The counts of `bytes`, stopping as soon as one is over its limit. Bytes that do not parse
/// count as far as they do: compiling them fails with wasmtime's own error.
pub fn shape(bytes: &[u8]) -> Shape {
    use wasmparser::{
        ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
        Encoding, Instance, Payload, TypeRef,
    };
    let mut shape = Shape::default();
    let mut stack: Vec<Frame> = Vec::new();
    // An entry the reader cannot follow (an import, an export of an instance) costs as much
    // as the costliest known one.
    let unknown = |costs: &[u64]| costs.iter().copied().max().unwrap_or(0);
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else { break };
        match (payload, stack.last_mut()) {
            (Payload::Version { encoding, .. }, _) => stack.push(match encoding {
                Encoding::Module => Frame::Module { cost: 0 },
                Encoding::Component => Frame::Component {
                    modules: Vec::new(),
                    components: Vec::new(),
                    cost: 0,
                },
            }),
            (Payload::FunctionSection(r), Some(Frame::Module { cost })) => {
                shape.functions += u64::from(r.count());
                *cost += u64::from(r.count()) * FUNCTION_BYTES;
            }
            (Payload::ImportSection(r), Some(Frame::Module { cost })) => {
                for import in r.into_imports().flatten() {
                    if matches!(import.ty, TypeRef::Func(_)) {
                        *cost += FUNCTION_BYTES;
                    }
                }
            }
            (Payload::GlobalSection(r), Some(Frame::Module { cost })) => {
                *cost += u64::from(r.count()) * GLOBAL_BYTES;
            }
            (Payload::CodeSectionEntry(body), _) => {
                let range = body.range();
                let size = range.end.saturating_sub(range.start);
                shape.largest_function = shape.largest_function.max(size);
            }
            (Payload::ExportSection(r), _) => shape.exports += u64::from(r.count()),
            (Payload::ComponentExportSection(r), _) => shape.exports += u64::from(r.count()),
            (
                Payload::ComponentImportSection(r),
                Some(Frame::Component {
                    modules,
                    components,
                    ..
                }),
            ) => {
                for import in r.into_iter().flatten() {
                    match import.ty {
                        wasmparser::ComponentTypeRef::Module(_) => modules.push(unknown(modules)),
                        wasmparser::ComponentTypeRef::Component(_) => {
                            components.push(unknown(components))
                        }
                        _ => {}
                    }
                }
            }
            (Payload::ComponentAliasSection(r), Some(Frame::Component { .. })) => {
                for alias in r.into_iter().flatten() {
                    let (kind, pushed) = match alias {
                        ComponentAlias::Outer { kind, count, index } => {
                            let outer = stack
                                .len()
                                .checked_sub(1 + usize::try_from(count).unwrap_or(usize::MAX))
                                .and_then(|i| stack.get(i));
                            let cost = match (outer, kind) {
                                (
                                    Some(Frame::Component { modules, .. }),
                                    ComponentOuterAliasKind::CoreModule,
                                ) => modules.get(index as usize).copied(),
                                (
                                    Some(Frame::Component { components, .. }),
                                    ComponentOuterAliasKind::Component,
                                ) => components.get(index as usize).copied(),
                                _ => None,
                            };
                            match kind {
                                ComponentOuterAliasKind::CoreModule => (Some(true), cost),
                                ComponentOuterAliasKind::Component => (Some(false), cost),
                                _ => (None, None),
                            }
                        }
                        ComponentAlias::InstanceExport { kind, .. } => match kind {
                            ComponentExternalKind::Module => (Some(true), None),
                            ComponentExternalKind::Component => (Some(false), None),
                            _ => (None, None),
                        },
                        ComponentAlias::CoreInstanceExport { .. } => (None, None),
                    };
                    if let Some(Frame::Component {
                        modules,
                        components,
                        ..
                    }) = stack.last_mut()
                    {
                        match kind {
                            Some(true) => {
                                let cost = pushed.unwrap_or_else(|| unknown(modules));
                                modules.push(cost);
                            }
                            Some(false) => {
                                let cost = pushed.unwrap_or_else(|| unknown(components));
                                components.push(cost);
                            }
                            None => {}
                        }
                    }
                }
            }
            (Payload::InstanceSection(r), Some(Frame::Component { modules, cost, .. })) => {
                for instance in r.into_iter().flatten() {
                    if let Instance::Instantiate { module_index, .. } = instance {
                        let each = modules
                            .get(module_index as usize)
                            .copied()
                            .unwrap_or_else(|| unknown(modules));
                        *cost = cost.saturating_add(each);
                    }
                }
            }
            (
                Payload::ComponentInstanceSection(r),
                Some(Frame::Component {
                    components, cost, ..
                }),
            ) => {
                for instance in r.into_iter().flatten() {
                    if let ComponentInstance::Instantiate {
                        component_index, ..
                    } = instance
                    {
                        let each = components
                            .get(component_index as usize)
                            .copied()
                            .unwrap_or_else(|| unknown(components));
                        *cost = cost.saturating_add(each);
                    }
                }
            }
            (Payload::End(_), _) => {
                let done = stack.pop();
                match (done, stack.last_mut()) {
                    (Some(Frame::Module { cost }), Some(Frame::Component { modules, .. })) => {
                        modules.push(cost)
                    }
                    (
                        Some(Frame::Component { cost, .. }),
                        Some(Frame::Component { components, .. }),
                    ) => components.push(cost),
                    (Some(Frame::Component { cost, .. }), None) => shape.instance_bytes = cost,
                    _ => {}
                }
            }
            _ => {}
        }
        if shape.functions > MAX_FUNCTIONS
            || shape.exports > MAX_EXPORTS
            || shape.largest_function > MAX_FUNCTION_BYTES
        {
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
    if shape.largest_function > MAX_FUNCTION_BYTES {
        return Some(format!(
            "a function of more than {MAX_FUNCTION_BYTES} bytes: refused before compiling"
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
        let s = shape(&bytes);
        assert_eq!((s.functions, s.exports), (3, 3));
        assert_eq!(
            s.instance_bytes,
            3 * FUNCTION_BYTES,
            "one instance of three functions"
        );
        assert_eq!(refusal(s), None);
    }

    #[test]
    fn a_module_instantiated_many_times_counts_its_globals_each_time() {
        let globals: String = (0..1000)
            .map(|i| format!("(global (mut i32) (i32.const {i}))"))
            .collect();
        let instances: String = (0..60)
            .map(|i| format!("(core instance $i{i} (instantiate $m))"))
            .collect();
        let wat = format!(
            "(component (core module $m {globals} (func)) {instances}
               (component $c (core module $n (global i32 (i32.const 0)))
                 (core instance (instantiate $n)) (core instance (instantiate $n)))
               (instance (instantiate $c)) (instance (instantiate $c)))"
        );
        let bytes = wat::parse_str(wat).expect("valid component");
        let per_module = 1000 * GLOBAL_BYTES + FUNCTION_BYTES;
        assert_eq!(
            shape(&bytes).instance_bytes,
            60 * per_module + 4 * GLOBAL_BYTES
        );
    }

    #[test]
    fn a_function_larger_than_the_limit_is_refused_before_compiling() {
        let body = "local.get 0\ni32.const 100000\ni32.add\n".repeat(200_000);
        let wat =
            format!("(component (core module (func (param i32) (result i32) local.get 0 {body})))");
        let bytes = wat::parse_str(wat).expect("valid component");
        assert!(shape(&bytes).largest_function > MAX_FUNCTION_BYTES);
        let refused = refusal(shape(&bytes)).expect("refused");
        assert!(refused.contains("function of more than"), "{refused}");
    }

    #[test]
    fn the_example_plugins_pass_with_room() {
        let mut examples = vec![kubewasm_plugin_artifacts::POD_PHASE];
        examples.extend(kubewasm_plugin_artifacts::OWNER_CHAIN_PY);
        examples.extend(kubewasm_plugin_artifacts::OWNER_CHAIN_JS);
        for path in examples {
            let bytes = std::fs::read(path).expect("built");
            let s = shape(&bytes);
            assert_eq!(refusal(s), None, "{path}");
            assert!(s.largest_function * 2 < MAX_FUNCTION_BYTES, "{path}: {s:?}");
            assert!(s.instance_bytes < 1 << 20, "{path}: {s:?}");
        }
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
