//! Helpers that more than one bench target needs, kept once so that every bench computes its
//! figures the same way. Each bench includes this folder as a module of its own
//! (`mod common;` from a top-level bench file, `#[path = "../common/mod.rs"] mod common;` from a
//! bench in its own folder); it is a folder, not `benches/common.rs`, so that cargo does not take
//! it for a bench target.

pub mod percentile;
pub mod proc_stat;
