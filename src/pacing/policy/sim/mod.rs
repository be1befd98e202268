//! A deterministic simulation of the adaptive controllers (issue 16): the pure [`Pacing`]
//! against simulated servers, minutes of simulated time per run, with AIMD and an
//! AutoThrottle-style delay as baselines. The tests assert the targets for the learned
//! limit and print every controller on every profile as one table (`cargo test --lib sim --
//! --nocapture`).
//!
//! | file | owns |
//! |---|---|
//! | `servers.rs` | the simulated origins |
//! | `runner.rs` | clients, courtesy's pacing and the origin in simulated time |
//! | `autothrottle.rs` | the AutoThrottle baseline |
//! | `profiles.rs` | the profiles, their figures and the table |

mod autothrottle;
mod profiles;
mod runner;
mod servers;

#[cfg(test)]
mod tests;
