//! The Go SDK's glue stays what the generator makes of the contract, and the generator and the
//! componentizer say what they cannot do instead of producing a broken module.

use std::path::PathBuf;

use kubewasm_go_tools::componentize::{ComponentizeError, add_adapter_allocator, find_arena};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

#[test]
fn bindings_go_is_what_the_generator_makes_of_the_contract() {
    let generated = kubewasm_go_tools::bindings(&root().join("wit")).expect("generate");
    let committed =
        std::fs::read_to_string(root().join("plugin-sdk/go/bindings.go")).expect("read");
    assert!(
        generated == committed,
        "plugin-sdk/go/bindings.go is out of date with wit/plugin.wit: run \
         `cargo run -p kubewasm-go-tools --bin kubewasm-go-gen`"
    );
    // Every function of the contract is there, and nothing is left for a person to write.
    for name in [
        "kubewasm:plugin/cache@0.5.0 by-index",
        "kubewasm:plugin/cluster@0.5.0 delete",
        "kubewasm:plugin/state@0.5.0 keys",
        "kubewasm:plugin/types@0.5.0 [method]object.owner",
        "kubewasm:plugin/types@0.5.0 [resource-drop]object",
        "kubewasm:plugin/triggers@0.5.0 requeue-after",
        "kubewasm:plugin/logging@0.5.0 log",
    ] {
        assert!(
            committed.contains(&format!("//go:wasmimport {name}\n")),
            "{name}"
        );
    }
    for name in ["init", "describe", "handle", "synced", "tick", "admit"] {
        let export = format!("kubewasm:plugin/handler@0.5.0#{name}");
        assert!(
            committed.contains(&format!("//go:wasmexport {export}\n")),
            "{name}"
        );
    }
}

/// A WIT world with one function of the given signature, exported.
fn world(body: &str) -> (wit_parser::Resolve, wit_parser::WorldId) {
    let mut resolve = wit_parser::Resolve::default();
    let text = format!("package t:t;\ninterface i {{\n{body}\n}}\nworld w {{ export i; }}\n");
    let pkg = resolve.push_str("t.wit", &text).expect("parse");
    let world = resolve.select_world(&[pkg], Some("w")).expect("world");
    (resolve, world)
}

#[test]
fn the_generator_names_what_it_does_not_handle() {
    let (resolve, w) = world("flags f { a, b }\nrun: func(x: f);");
    let err = kubewasm_go_tools::generate::generate(&resolve, w, "p", "h").expect_err("refused");
    assert!(err.to_string().contains("flags"), "{err}");
    let (resolve, w) = world("run: func(x: tuple<u32, string>);");
    let err = kubewasm_go_tools::generate::generate(&resolve, w, "p", "h").expect_err("refused");
    assert!(err.to_string().contains("tuple of different"), "{err}");
    // What it handles comes out as Go gofmt accepts.
    let (resolve, w) = world(
        "record r { a: u8, b: list<string>, c: option<s64> }\nvariant v { x(r), y, z(string) }\nrun: func(v: v) -> result<r, v>;",
    );
    let go = kubewasm_go_tools::generate::generate(&resolve, w, "p", "h").expect("generate");
    kubewasm_go_tools::gofmt(&go).expect("gofmt accepts the generated Go");
}

/// A core module whose data holds `data` at address 1024.
fn module_with_data(data: &[u8]) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, Function, FunctionSection, MemorySection, MemoryType,
        Module, TypeSection,
    };
    let mut m = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], []);
    m.section(&types);
    let mut funcs = FunctionSection::new();
    funcs.function(0);
    m.section(&funcs);
    let mut mem = MemorySection::new();
    mem.memory(MemoryType {
        minimum: 8,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    m.section(&mem);
    let mut code = CodeSection::new();
    let mut f = Function::new([]);
    f.instruction(&wasm_encoder::Instruction::End);
    code.function(&f);
    m.section(&code);
    let mut d = DataSection::new();
    d.active(0, &ConstExpr::i32_const(1024), data.iter().copied());
    m.section(&d);
    m.finish()
}

#[test]
fn a_module_without_the_sdk_arena_is_refused_with_the_reason() {
    let err = add_adapter_allocator(&module_with_data(b"no arena here")).expect_err("refused");
    assert!(matches!(err, ComponentizeError::NoArena), "{err}");
    assert!(err.to_string().contains("kubewasm Go SDK"), "{err}");
    let err = add_adapter_allocator(b"not wasm").expect_err("refused");
    assert!(
        err.to_string().contains("not a WebAssembly core module"),
        "{err}"
    );
}

#[test]
fn the_arena_is_found_by_its_marker_and_its_size_is_read() {
    let mut data = b"xxxxkubewasm.arena.100040000".to_vec();
    data.extend([0; 8]);
    let module = module_with_data(&data);
    assert_eq!(find_arena(&module).expect("arena"), (1028, 0x40000));
    let adapted = add_adapter_allocator(&module).expect("adapted");
    wasmparser::validate(&adapted).expect("valid");
    let exports: Vec<String> = wasmparser::Parser::new(0)
        .parse_all(&adapted)
        .filter_map(|p| match p {
            Ok(wasmparser::Payload::ExportSection(r)) => Some(
                r.into_iter()
                    .map(|e| e.expect("export").name.to_owned())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(exports, ["cabi_realloc_adapter"]);
    // Twice is refused: the module already has it.
    assert!(matches!(
        add_adapter_allocator(&adapted),
        Err(ComponentizeError::AlreadyAdapted)
    ));
}
