//! A Go core module (`GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`) as a component:
//! the contract's type information embedded, the WASI preview 1 adapter linked in.
//!
//! One step is Go's own: the adapter allocates its state and stack through the main module
//! while Go's runtime is still starting (`_initialize` asks for the time and random bytes
//! through it), when no Go function may run yet. The Go SDK reserves an array for it (its
//! `adapterArena`, found by a marker in the module's data) and this module adds a small
//! `cabi_realloc_adapter` over that array, written in wasm, which wit-component gives the
//! adapter in place of Go's `cabi_realloc`.

use wasm_encoder::reencode::{RoundtripReencoder, utils};
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, MemArg, Module,
    RawSection, TypeSection, ValType,
};
use wasmparser::{DataKind, Operator, Parser, Payload};

/// The first bytes of the Go SDK's adapter arena; the next eight are its size in hexadecimal
/// (text: Go's linker splits its data where zeros run).
pub const ARENA_MARKER: &[u8; 16] = b"kubewasm.arena.1";

/// Where the arena's bump offset lives, from the arena's start.
const OFFSET_AT: u32 = 24;
/// Where allocations start, from the arena's start.
const DATA_AT: u32 = 32;

/// Why a core module could not become a component.
#[derive(Debug, thiserror::Error)]
pub enum ComponentizeError {
    /// The module is not valid WebAssembly.
    #[error("not a WebAssembly core module: {0}")]
    Parse(#[from] wasmparser::BinaryReaderError),
    /// The module does not carry the Go SDK's arena.
    #[error(
        "the module has no kubewasm adapter arena: build it from a Go package that imports the kubewasm Go SDK (plugin-sdk/go)"
    )]
    NoArena,
    /// The module already defines what this step adds.
    #[error("the module already exports cabi_realloc_adapter")]
    AlreadyAdapted,
    /// Re-encoding a section failed.
    #[error("re-encoding the module: {0}")]
    Reencode(String),
    /// wit-component refused the module.
    #[error("making the component: {0:#}")]
    Component(anyhow::Error),
}

/// The address and size of the arena in `core`'s data.
pub fn find_arena(core: &[u8]) -> Result<(u32, u32), ComponentizeError> {
    for payload in Parser::new(0).parse_all(core) {
        if let Payload::DataSection(reader) = payload? {
            for data in reader {
                let data = data?;
                let DataKind::Active {
                    memory_index: 0,
                    offset_expr,
                } = data.kind
                else {
                    continue;
                };
                let mut ops = offset_expr.get_operators_reader();
                let Operator::I32Const { value: base } = ops.read()? else {
                    continue;
                };
                if let Some(at) = data
                    .data
                    .windows(ARENA_MARKER.len())
                    .position(|w| w == ARENA_MARKER)
                {
                    let size_at = at + ARENA_MARKER.len();
                    let size = data
                        .data
                        .get(size_at..size_at + 8)
                        .and_then(|b| std::str::from_utf8(b).ok())
                        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                        .ok_or(ComponentizeError::NoArena)?;
                    if size <= DATA_AT {
                        return Err(ComponentizeError::NoArena);
                    }
                    return Ok((base as u32 + at as u32, size));
                }
            }
        }
    }
    Err(ComponentizeError::NoArena)
}

/// `core` with `cabi_realloc_adapter` added: a bump allocator over the arena that traps when
/// it is full or asked to grow an allocation (the adapter never frees or grows).
pub fn add_adapter_allocator(core: &[u8]) -> Result<Vec<u8>, ComponentizeError> {
    let (arena, size) = find_arena(core)?;
    let mut imported_funcs = 0u32;
    let mut local_funcs = 0u32;
    let mut type_count = 0u32;
    for payload in Parser::new(0).parse_all(core) {
        match payload? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import?.ty, wasmparser::TypeRef::Func(_)) {
                        imported_funcs += 1;
                    }
                }
            }
            Payload::FunctionSection(reader) => local_funcs = reader.count(),
            Payload::TypeSection(reader) => type_count = reader.count(),
            Payload::ExportSection(reader) => {
                for export in reader {
                    if export?.name == "cabi_realloc_adapter" {
                        return Err(ComponentizeError::AlreadyAdapted);
                    }
                }
            }
            _ => {}
        }
    }
    let new_type = type_count;
    let new_func = imported_funcs + local_funcs;
    let re = |e: wasm_encoder::reencode::Error| ComponentizeError::Reencode(e.to_string());
    let mut module = Module::new();
    let mut rt = RoundtripReencoder;
    let mut code = CodeSection::new();
    let mut bodies_left = local_funcs;
    let mut code_written = false;
    let mut exports_written = false;
    let ours = |exports: &mut ExportSection| {
        exports.export("cabi_realloc_adapter", ExportKind::Func, new_func);
    };
    for payload in Parser::new(0).parse_all(core) {
        let payload = payload?;
        // A module without exports gets an export section where one would be.
        if !exports_written
            && matches!(
                payload,
                Payload::StartSection { .. }
                    | Payload::ElementSection(_)
                    | Payload::DataCountSection { .. }
                    | Payload::CodeSectionStart { .. }
            )
        {
            let mut exports = ExportSection::new();
            ours(&mut exports);
            module.section(&exports);
            exports_written = true;
        }
        match payload {
            Payload::TypeSection(reader) => {
                let mut types = TypeSection::new();
                utils::parse_type_section(&mut rt, &mut types, reader).map_err(re)?;
                types.ty().function([ValType::I32; 4], [ValType::I32]);
                module.section(&types);
            }
            Payload::FunctionSection(reader) => {
                let mut funcs = FunctionSection::new();
                utils::parse_function_section(&mut rt, &mut funcs, reader).map_err(re)?;
                funcs.function(new_type);
                module.section(&funcs);
            }
            Payload::ExportSection(reader) => {
                let mut exports = ExportSection::new();
                utils::parse_export_section(&mut rt, &mut exports, reader).map_err(re)?;
                ours(&mut exports);
                module.section(&exports);
                exports_written = true;
            }
            Payload::CodeSectionStart { .. } => {}
            Payload::CodeSectionEntry(body) => {
                code.raw(body.as_bytes());
                bodies_left -= 1;
                if bodies_left == 0 {
                    code.function(&allocator(arena, size));
                    module.section(&code);
                    code_written = true;
                }
            }
            Payload::End(_) | Payload::Version { .. } => {}
            other => {
                if let Some((id, range)) = other.as_section() {
                    module.section(&RawSection {
                        id,
                        data: &core[range.start as usize..range.end as usize],
                    });
                }
            }
        }
    }
    if !code_written {
        return Err(ComponentizeError::Reencode(
            "the module has no function of its own".into(),
        ));
    }
    let bytes = module.finish();
    wasmparser::validate(&bytes)?;
    Ok(bytes)
}

/// The allocator's body: `(old, old_size, align, new_size) -> ptr`.
fn allocator(arena: u32, size: u32) -> Function {
    let mem = |offset: u64| MemArg {
        offset,
        align: 2,
        memory_index: 0,
    };
    let (offset_at, data_at, end) = (
        (arena + OFFSET_AT) as i32,
        (arena + DATA_AT) as i32,
        arena.wrapping_add(size) as i32,
    );
    // Locals: 4 = the allocation's start, 5 = its end.
    let mut f = Function::new([(2, ValType::I32)]);
    for i in [
        // Growing an allocation is not supported.
        Instruction::LocalGet(0),
        Instruction::If(wasm_encoder::BlockType::Empty),
        Instruction::Unreachable,
        Instruction::End,
        // start = align_up(data + offset, align)
        Instruction::I32Const(offset_at),
        Instruction::I32Load(mem(0)),
        Instruction::I32Const(data_at),
        Instruction::I32Add,
        Instruction::LocalGet(2),
        Instruction::I32Add,
        Instruction::I32Const(1),
        Instruction::I32Sub,
        Instruction::I32Const(0),
        Instruction::LocalGet(2),
        Instruction::I32Sub,
        Instruction::I32And,
        Instruction::LocalTee(4),
        // end = start + new_size, within the arena
        Instruction::LocalGet(3),
        Instruction::I32Add,
        Instruction::LocalTee(5),
        Instruction::I32Const(end),
        Instruction::I32GtU,
        Instruction::If(wasm_encoder::BlockType::Empty),
        Instruction::Unreachable,
        Instruction::End,
        // offset = end - data
        Instruction::I32Const(offset_at),
        Instruction::LocalGet(5),
        Instruction::I32Const(data_at),
        Instruction::I32Sub,
        Instruction::I32Store(mem(0)),
        Instruction::LocalGet(4),
        Instruction::End,
    ] {
        f.instruction(&i);
    }
    f
}

/// `core` as a component of `world` in `resolve`, with the WASI preview 1 reactor adapter.
pub fn componentize(
    core: &[u8],
    resolve: &wit_parser::Resolve,
    world: wit_parser::WorldId,
) -> Result<Vec<u8>, ComponentizeError> {
    let mut module = add_adapter_allocator(core)?;
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(ComponentizeError::Component)?;
    wit_component::ComponentEncoder::default()
        .module(&module)
        .and_then(|e| {
            e.validate(true).adapter(
                "wasi_snapshot_preview1",
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|e| e.encode())
        .map_err(ComponentizeError::Component)
}
