//! `kubewasm-go-gen`: writes the Go SDK's `bindings.go` from the WIT contract.
//!
//! `cargo run -p kubewasm-go-tools --bin kubewasm-go-gen` from the checkout's root, after a
//! change to wit/plugin.wit; the crate's test fails while the file is out of date.

use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let out = root.join("plugin-sdk/go/bindings.go");
    let text = kubewasm_go_tools::bindings(&root.join("wit"))?;
    std::fs::write(&out, text)?;
    println!("wrote {}", out.display());
    Ok(())
}
