//! The deterministic simulation (`fronta_sim::simulation`) against the SQLite store: the
//! same seeded workers, crashes, stalls and lease expiries as on the memory store, each
//! seed on a fresh database file whose clock is the simulation's `ManualClock`, every
//! answer and every row checked against the contract's model after every step.
//!
//! Fewer seeds than on the memory store (each step is a real transaction):
//! `FRONTA_SIM_SEEDS=<count>` (default [`QUICK_SEEDS`]), `FRONTA_SIM_SEED_BASE=<n>`,
//! `FRONTA_SIM_SEED=<n>` to replay one.

use std::sync::{Arc, Mutex};

use fronta_engine::RunStore;
use fronta_sim::simulation::{SeedPlan, SimConfig, run_plan};
use fronta_store_sqlite::{SqliteConfig, SqliteStore, Synchronous};
use tempfile::TempDir;

/// Seeds per `cargo test` run.
const QUICK_SEEDS: u64 = 30;

#[test]
fn sqlite_store_keeps_every_invariant_over_seeded_simulations() {
    let plan = SeedPlan::from_env(QUICK_SEEDS).unwrap_or_else(|err| panic!("{err}"));
    let dirs: Arc<Mutex<Vec<TempDir>>> = Arc::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("invariant: a test runtime can be built");
    let summary = runtime.block_on(run_plan(
        &plan,
        &SimConfig::default(),
        "cargo test -p fronta-store-sqlite --test simulation -- --nocapture",
        |clock| {
            let dirs = dirs.clone();
            async move {
                let dir = TempDir::new().expect("a temporary directory");
                let mut config = SqliteConfig::new(dir.path().join("sim.db"));
                config.clock = Arc::new(clock);
                // The simulation checks logic, not durability: no fsync per commit.
                config.synchronous = Synchronous::Normal;
                let store = SqliteStore::open(config).expect("a fresh SQLite store opens");
                let mut dirs = dirs.lock().expect("dirs lock");
                // Keep only the current seed's directory.
                dirs.clear();
                dirs.push(dir);
                Arc::new(store) as Arc<dyn RunStore>
            }
        },
    ));
    println!("{}", summary.line("simulation on SqliteStore"));
    assert_eq!(summary.seeds, plan.count, "every seed of the plan ran");
}
