//! Shared by the benchmarks.

#![allow(dead_code)] // Each benchmark uses part of it.

pub mod alloc;
pub mod cpu;
pub mod double_process;
pub mod each;
pub mod instance;
pub mod logging;
pub mod plugins;
pub mod rounds;
pub mod rss;
