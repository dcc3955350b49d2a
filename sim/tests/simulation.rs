//! The deterministic simulation (`fronta_sim::simulation`) against [`MemoryStore`]:
//! thousands of seeds in the quick tier, and the proof that the simulation can fail —
//! every planted store defect is caught — and that a seed replays exactly.
//!
//! `FRONTA_SIM_SEEDS=<count>` sets how many seeds (default [`QUICK_SEEDS`]),
//! `FRONTA_SIM_SEED_BASE=<n>` the first, `FRONTA_SIM_SEED=<n>` replays one seed and
//! prints its steps.

use std::sync::Arc;

use fronta_engine::{ManualClock, RunStore};
use fronta_sim::MemoryStore;
use fronta_sim::memory::Defect;
use fronta_sim::simulation::{SeedPlan, SimConfig, run_plan, simulate};

/// Seeds per `cargo test` run.
const QUICK_SEEDS: u64 = 2_000;
/// How many seeds a planted defect may survive before the test calls the simulation blind.
const DEFECT_SEEDS: u64 = 200;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("invariant: a test runtime can be built")
}

fn memory(clock: ManualClock) -> Arc<dyn RunStore> {
    Arc::new(MemoryStore::new(Arc::new(clock)))
}

#[test]
fn memory_store_keeps_every_invariant_over_many_seeds() {
    let plan = SeedPlan::from_env(QUICK_SEEDS).unwrap_or_else(|err| panic!("{err}"));
    let summary = runtime().block_on(run_plan(
        &plan,
        &SimConfig::default(),
        "cargo test -p fronta-sim --test simulation memory_store_keeps_every_invariant_over_many_seeds -- --nocapture",
        |clock| async move { memory(clock) },
    ));
    println!("{}", summary.line("simulation on MemoryStore"));
    assert_eq!(summary.seeds, plan.count, "every seed of the plan ran");
    // A replayed single seed need not reach every path; a run of many must.
    if !plan.replay && plan.count >= 100 {
        assert!(
            summary.total.reclaims > 0 && summary.total.stale_writes_refused > 0,
            "the seeds reached reclaims and stale writes: {summary:?}"
        );
    }
}

#[test]
fn every_planted_store_defect_is_caught() {
    let defects = [
        Defect::FinishIgnoresOwner,
        Defect::ReclaimNotCounted,
        Defect::ClaimStealsLiveLeases,
        Defect::PutBackIgnoresCancel,
    ];
    let runtime = runtime();
    for defect in defects {
        let caught = runtime.block_on(async {
            for seed in 0..DEFECT_SEEDS {
                let clock = ManualClock::at_fixed_start();
                let store = MemoryStore::with_defect(Arc::new(clock.clone()), defect);
                if let Err(failure) =
                    simulate(&store, &clock, seed, &SimConfig::default(), false).await
                {
                    return Some(failure);
                }
            }
            None
        });
        let failure = caught.unwrap_or_else(|| {
            panic!(
                "the simulation ran {DEFECT_SEEDS} seeds on a store with {defect:?} and saw nothing"
            )
        });
        println!(
            "{defect:?} caught by seed {}: {}",
            failure.seed, failure.message
        );
    }
}

#[test]
fn a_seed_replays_exactly_and_seeds_differ() {
    let runtime = runtime();
    let run = |seed| {
        runtime.block_on(async {
            let clock = ManualClock::at_fixed_start();
            let store = MemoryStore::new(Arc::new(clock.clone()));
            simulate(&store, &clock, seed, &SimConfig::default(), false)
                .await
                .unwrap_or_else(|failure| panic!("{}", failure.report("(replay)")))
        })
    };
    let first = run(42);
    assert_eq!(
        first,
        run(42),
        "the same seed takes the same steps and gets the same answers"
    );
    assert_ne!(
        first.fingerprint,
        run(43).fingerprint,
        "another seed takes other steps"
    );
}

#[test]
fn seed_plan_reads_its_variables_and_refuses_non_numbers() {
    // Only the parsing: the variables are not set in the test environment unless a person
    // replays a seed, in which case this check is about that plan.
    let plan = SeedPlan::from_env(7).unwrap_or_else(|err| panic!("{err}"));
    if std::env::var("FRONTA_SIM_SEED").is_err() && std::env::var("FRONTA_SIM_SEEDS").is_err() {
        assert_eq!(plan.count, 7, "the default count applies");
        assert!(!plan.replay, "no replay without FRONTA_SIM_SEED");
    }
    let seeds: Vec<u64> = SeedPlan {
        first: 5,
        count: 3,
        replay: false,
    }
    .seeds()
    .collect();
    assert_eq!(seeds, vec![5, 6, 7], "a plan covers count seeds from first");
}
