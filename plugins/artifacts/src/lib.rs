//! Paths of the guest plugins, built for wasm32-wasip2 by this crate's build script.

include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
