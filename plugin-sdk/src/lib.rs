//! Write kubewasm plugins in Rust.
pub mod selector;
