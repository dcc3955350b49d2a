//! The deterministic simulation (`fronta_sim::simulation`) against the Postgres store:
//! the same seeded workers, crashes, stalls and lease expiries as on the memory store,
//! each seed on a fresh database whose clock is the simulation's `ManualClock` (injected
//! into every statement in place of `now()`), every answer and every row checked against
//! the contract's model after every step.
//!
//! Fewer seeds than on the memory store (each seed creates a database):
//! `FRONTA_SIM_SEEDS=<count>` (default [`QUICK_SEEDS`]), `FRONTA_SIM_SEED_BASE=<n>`,
//! `FRONTA_SIM_SEED=<n>` to replay one.

mod support;

use std::sync::{Arc, Mutex};

use fronta_engine::RunStore;
use fronta_sim::simulation::{SeedPlan, SimConfig, run_plan};

use crate::support::TestDb;

/// Seeds per `cargo test` run.
const QUICK_SEEDS: u64 = 8;

#[test]
fn postgres_store_keeps_every_invariant_over_seeded_simulations() {
    let plan = SeedPlan::from_env(QUICK_SEEDS).unwrap_or_else(|err| panic!("{err}"));
    let databases: Arc<Mutex<Vec<TestDb>>> = Arc::default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("invariant: a test runtime can be built");
    let summary = runtime.block_on(run_plan(
        &plan,
        &SimConfig::default(),
        "cargo test -p fronta-store-postgres --test simulation -- --nocapture",
        |clock| {
            let databases = databases.clone();
            async move {
                // The previous seed's database is dropped before the next one is made.
                let old: Vec<TestDb> = std::mem::take(&mut *databases.lock().expect("lock"));
                drop(old);
                let database = TestDb::create().await;
                // The simulation checks logic, not durability: no flush per commit.
                let mut conn = database.connection().await;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "ALTER DATABASE \"{}\" SET synchronous_commit TO off",
                    database.name
                )))
                .execute(&mut conn)
                .await
                .expect("synchronous_commit can be set on a test database");
                drop(conn);
                let store = database.store(Some(Arc::new(clock))).await;
                databases.lock().expect("lock").push(database);
                Arc::new(store) as Arc<dyn RunStore>
            }
        },
    ));
    println!("{}", summary.line("simulation on PgStore"));
    assert_eq!(summary.seeds, plan.count, "every seed of the plan ran");
}
