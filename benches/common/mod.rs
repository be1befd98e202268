//! Helpers that more than one bench target needs, kept once so that every bench computes its
//! figures the same way. Each bench includes this folder as a module of its own
//! (`mod common;` from a top-level bench file, `#[path = "../common/mod.rs"] mod common;` from a
//! bench in its own folder); it is a folder, not `benches/common.rs`, so that cargo does not take
//! it for a bench target.
//!
//! Each bench is its own crate and uses only some of these helpers, so the rest would be dead code
//! there: the lint is allowed for this folder only.
#![allow(dead_code)]

pub mod accept;
pub mod client;
pub mod percentile;
pub mod ports;
pub mod proc_stat;
pub mod provenance;
