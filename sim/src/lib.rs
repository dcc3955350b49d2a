//! Reliability harnesses for the run engine (see `RELIABILITY.md` at the root).
//!
//! - [`MemoryStore`]: the `RunStore` port in memory, keeping its `# Contract` exactly; it
//!   passes the shared conformance suite like the SQLite and Postgres stores.
//! - [`simulation`]: a deterministic simulation of workers, crashes, stalls, cancels and
//!   lease expiries against any `RunStore` driven by a `ManualClock`, one seeded
//!   [`rng::SplitMix64`] choosing every step, a reference model checking every answer
//!   and every row after every step. A failing seed is printed with the command that
//!   replays it.
//! - [`workers`]: the engine's real `Worker`s against one store on tokio's paused
//!   clock, with crashes, storage storms (failed calls and lost answers), stalls past
//!   the lease and cancels drawn from a seed, and the promises checked at the end.
//! - [`faults`]: [`faults::FaultProxy`], a TCP proxy between a process and its database
//!   that cuts the database off (reset or stall) and gives it back, for the outage
//!   harness of the `fronta` binary (`cli/tests/outage.rs`).
//!
//! What the simulations leave out: real processes and real crashes (the simulated crash
//! drops a worker's memory, not a database connection), network faults (the proxy's
//! harness covers a whole-database outage), and wall-clock timing.

pub mod faults;
pub mod hooked;
pub mod memory;
pub mod rng;
pub mod simulation;
pub mod workers;

pub use memory::MemoryStore;
