//! Power loss on SQLite, simulated (issue 24 item 3; `RELIABILITY.md` §11).
//!
//! The real store runs over the `fronta-powercut` VFS shim, which keeps what each file
//! had fsynced apart from what it was written since. A write load — enqueuers (one run per
//! call, several at once, so group commits form) and a worker that claims and completes
//! runs — goes until the power is cut at the Nth write/truncate/sync of the database's
//! files (N drawn by a seeded generator across the load's length). The disk after the cut
//! is each file's synced image with none, an in-order prefix or a random subset of its
//! unsynced writes torn in (a torn write may land in part). That image is written to a
//! fresh folder and opened with the platform VFS:
//!
//! - the database opens and `PRAGMA integrity_check` answers `ok`;
//! - every run whose enqueue was acknowledged is there (read through the store's API);
//! - every run whose completion was acknowledged is `completed`.
//!
//! With the store's production setting (`synchronous = FULL`, the default) nothing
//! acknowledged may be lost. `synchronous = NORMAL` is measured alongside: in WAL mode it
//! syncs at checkpoints only, so a commit may be acknowledged before it is durable; the
//! test asserts the file stays whole and reports how many acknowledged runs were lost.
//!
//! And a full disk without root (the shim's `set_full`): readiness answers the failure of
//! the last write until a write fits again, and clears by itself once space is back.
//!
//! Quick tier: 200 crash points for FULL, 100 for NORMAL. `FRONTA_POWERCUT_POINTS=n` sets
//! the number for FULL (`.ci/full` runs 5000); the seed base is `FRONTA_POWERCUT_SEED`
//! (else `FRONTA_SIM_SEED_BASE`, else 1), printed with every failure. The crash point
//! and the tear replay from a seed; the composition of group commits follows thread
//! timing, so a replay cuts at the same count of operations, not always the same bytes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fronta_engine::store::{ClaimParams, Finish, FinishAction, FinishReply};
use fronta_engine::{NewRun, RunId, RunStatus, RunStore, Trigger};
use fronta_powercut::{Rng, Session, Survival, Tear};
use fronta_store_sqlite::{SqliteConfig, SqliteStore, Synchronous};
use serde_json::json;

const DB: &str = "fronta.db";
/// Runs each load enqueues (when the power holds).
const RUNS: usize = 32;
/// Enqueuers at once.
const ENQUEUERS: usize = 4;

fn seed_base() -> u64 {
    ["FRONTA_POWERCUT_SEED", "FRONTA_SIM_SEED_BASE"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.parse().ok())
        .unwrap_or(1)
}

fn points(default: u64) -> u64 {
    std::env::var("FRONTA_POWERCUT_POINTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn config(path: &Path, synchronous: Synchronous) -> SqliteConfig {
    let mut config = SqliteConfig::new(path);
    config.synchronous = synchronous;
    config.read_connections = 2;
    config
}

/// A migrated, checkpointed database file to start every load from (the migrations'
/// own writes are not what this harness is about).
fn template(dir: &Path) -> Vec<u8> {
    let path = dir.join(DB);
    let store = SqliteStore::open(config(&path, Synchronous::Full)).expect("open the template");
    drop(store);
    // The writer thread closes its connection (checkpointing the WAL into the file) once
    // it sees the store gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    while path.with_file_name(format!("{DB}-wal")).exists() {
        assert!(
            Instant::now() < deadline,
            "the template's WAL is folded in within 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::read(&path).expect("read the template")
}

/// What a load got acknowledged before the power went.
#[derive(Debug, Default)]
struct Acked {
    enqueued: Vec<RunId>,
    completed: Vec<RunId>,
}

fn new_run(id: RunId) -> NewRun {
    NewRun {
        id,
        tenant: "power".into(),
        kind: "order".into(),
        payload: json!({"order": id.to_string()}),
        trigger: Trigger::Api,
        unique_key: None,
        priority: 0,
        delay: None,
        run_at: None,
        max_retries: 3,
    }
}

/// The write load on `store` until it is done or a write fails (the power went).
async fn load(store: &SqliteStore) -> Acked {
    let acked = Arc::new(Mutex::new(Acked::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..ENQUEUERS {
        let store = store.clone();
        let acked = acked.clone();
        tasks.spawn(async move {
            for _ in 0..RUNS / ENQUEUERS {
                let id = RunId::new_v7();
                if store.run_enqueue_many(vec![new_run(id)]).await.is_err() {
                    return;
                }
                acked.lock().expect("the acked list").enqueued.push(id);
            }
        });
    }
    {
        let store = store.clone();
        let acked = acked.clone();
        tasks.spawn(async move {
            let params = ClaimParams {
                limit: 4,
                default_lease: Duration::from_secs(60),
                leases: HashMap::new(),
                max_reclaims: 3,
                holder: None,
            };
            let mut done = 0;
            let mut idle = 0;
            while done < RUNS && idle < 200 {
                let Ok(batch) = store.run_claim(params.clone()).await else {
                    return;
                };
                if batch.claimed.is_empty() {
                    idle += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                let finishes = batch
                    .claimed
                    .iter()
                    .map(|claimed| Finish {
                        id: claimed.run.id,
                        owner: claimed.owner,
                        action: FinishAction::Complete { result: None },
                    })
                    .collect();
                let Ok(replies) = store.run_finish_many(finishes).await else {
                    return;
                };
                for reply in replies {
                    if let FinishReply::Applied {
                        id,
                        status: RunStatus::Completed,
                    } = reply
                    {
                        done += 1;
                        acked.lock().expect("the acked list").completed.push(id);
                    }
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("a load task");
    }
    std::mem::take(&mut *acked.lock().expect("the acked list"))
}

/// One crash point's outcome.
#[derive(Debug, Default)]
struct Outcome {
    acked_enqueues: usize,
    acked_completions: usize,
    lost_enqueues: Vec<RunId>,
    lost_completions: Vec<RunId>,
    survival: Survival,
    cut_by_the_count: bool,
}

/// A load over the shim in a fresh folder, cut at the `cut_at`th operation (`None`: let
/// it run and count), the surviving image checked: the outcome and the load's count of
/// operations.
async fn crash(
    template: &[u8],
    synchronous: Synchronous,
    cut_at: Option<u64>,
    tear: Tear,
    rng: &mut Rng,
    what: &str,
) -> (Outcome, u64) {
    let live = tempfile::tempdir().expect("a folder");
    std::fs::write(live.path().join(DB), template).expect("copy the template");
    let session = Session::start(live.path(), cut_at).expect("a power-cut session");
    let store = SqliteStore::open(config(&live.path().join(DB), synchronous));
    let acked = match &store {
        Ok(store) => load(store).await,
        // The cut came while opening: nothing was acknowledged.
        Err(_) => Acked::default(),
    };
    let cut_by_the_count = session.is_cut();
    let ops = session.ops();
    session.cut_now();
    drop(store);

    let after = tempfile::tempdir().expect("a folder");
    let survival = session
        .write_surviving(tear, rng, after.path())
        .expect("write the surviving image");
    let path = after.path().join(DB);
    let conn = rusqlite::Connection::open_with_flags_and_vfs(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE,
        c"unix",
    )
    .unwrap_or_else(|err| panic!("{what}: the surviving database opens: {err}"));
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap_or_else(|err| panic!("{what}: integrity_check runs: {err}"));
    assert_eq!(check, "ok", "{what}: PRAGMA integrity_check after the cut");
    drop(conn);

    let reopened = SqliteStore::open(config(&path, Synchronous::Full))
        .unwrap_or_else(|err| panic!("{what}: the store opens the surviving file: {err}"));
    let mut outcome = Outcome {
        acked_enqueues: acked.enqueued.len(),
        acked_completions: acked.completed.len(),
        survival,
        cut_by_the_count,
        ..Outcome::default()
    };
    for id in &acked.enqueued {
        let run = reopened
            .run_get(*id)
            .await
            .unwrap_or_else(|err| panic!("{what}: read run {id}: {err}"));
        if run.is_none() {
            outcome.lost_enqueues.push(*id);
        }
    }
    for id in &acked.completed {
        let run = reopened
            .run_get(*id)
            .await
            .unwrap_or_else(|err| panic!("{what}: read run {id}: {err}"));
        if run.is_none_or(|run| run.status != RunStatus::Completed) {
            outcome.lost_completions.push(*id);
        }
    }
    (outcome, ops)
}

/// `points` crash points over loads with `synchronous`: the outcomes, and the load's
/// length in operations.
async fn campaign(synchronous: Synchronous, points: u64, label: &str) -> (Vec<Outcome>, u64) {
    fronta_powercut::install();
    let seed = seed_base();
    let dir = tempfile::tempdir().expect("a folder");
    let template = template(dir.path());
    let (whole, length) = crash(
        &template,
        synchronous,
        None,
        Tear::Clean,
        &mut Rng(seed),
        &format!("{label}: the uncut load"),
    )
    .await;
    assert_eq!(
        whole.acked_enqueues, RUNS,
        "{label}: the uncut load has all its runs acknowledged: {whole:?}"
    );
    if synchronous == Synchronous::Full {
        assert!(
            whole.lost_enqueues.is_empty() && whole.lost_completions.is_empty(),
            "{label}: a cut after the whole load loses nothing acknowledged: {whole:?}"
        );
    }
    eprintln!(
        "power_loss {label}: a clean cut just after the whole load ({} enqueues and {} \
         completions acknowledged) lost {} enqueues and {} completions",
        whole.acked_enqueues,
        whole.acked_completions,
        whole.lost_enqueues.len(),
        whole.lost_completions.len()
    );
    let mut outcomes = Vec::new();
    for point in 0..points {
        let point_seed = seed.wrapping_mul(1_000_003).wrapping_add(point);
        let mut rng = Rng(point_seed);
        let cut_at = rng.between(1, length + length / 10);
        let tear = Tear::ALL[rng.between(0, 2) as usize];
        let what = format!(
            "{label} crash point {point} (cut at operation {cut_at} of ~{length}, {tear:?}; \
             replay: FRONTA_POWERCUT_SEED={seed} — point seed {point_seed})"
        );
        let (outcome, _) = crash(&template, synchronous, Some(cut_at), tear, &mut rng, &what).await;
        if synchronous == Synchronous::Full {
            assert!(
                outcome.lost_enqueues.is_empty() && outcome.lost_completions.is_empty(),
                "{what}: acknowledged writes lost with synchronous=FULL: {outcome:?}"
            );
        }
        outcomes.push(outcome);
    }
    (outcomes, length)
}

fn report(label: &str, outcomes: &[Outcome], length: u64, started: Instant) {
    let cut = outcomes.iter().filter(|o| o.cut_by_the_count).count();
    let acked: usize = outcomes.iter().map(|o| o.acked_enqueues).sum();
    let completions: usize = outcomes.iter().map(|o| o.acked_completions).sum();
    let lost: usize = outcomes.iter().map(|o| o.lost_enqueues.len()).sum();
    let lost_completions: usize = outcomes.iter().map(|o| o.lost_completions.len()).sum();
    let losing = outcomes
        .iter()
        .filter(|o| !o.lost_enqueues.is_empty() || !o.lost_completions.is_empty())
        .count();
    let pending: usize = outcomes.iter().map(|o| o.survival.pending).sum();
    let torn: usize = outcomes.iter().map(|o| o.survival.torn_in).sum();
    let partial: usize = outcomes.iter().map(|o| o.survival.partial).sum();
    eprintln!(
        "power_loss {label}: {} crash points ({cut} inside the load of ~{length} operations, the \
         rest after it) in {:.1} s; integrity_check ok at every one; {acked} acknowledged \
         enqueues and {completions} acknowledged completions, {lost} enqueues and \
         {lost_completions} completions lost (at {losing} points); unsynced operations at the \
         cuts {pending}, {torn} torn in ({partial} in part)",
        outcomes.len(),
        started.elapsed().as_secs_f64(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_with_synchronous_full_lose_no_acknowledged_run_and_leave_a_whole_file() {
    let started = Instant::now();
    let (outcomes, length) = campaign(Synchronous::Full, points(200), "FULL").await;
    assert!(
        outcomes.len() >= 200 || std::env::var("FRONTA_POWERCUT_POINTS").is_ok(),
        "at least 200 crash points"
    );
    let inside = outcomes.iter().filter(|o| o.cut_by_the_count).count();
    assert!(
        inside * 2 > outcomes.len(),
        "most cuts land inside the load: {inside} of {}",
        outcomes.len()
    );
    report("FULL", &outcomes, length, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_with_synchronous_normal_leave_a_whole_file_and_are_measured() {
    let started = Instant::now();
    let count = points(200) / 2;
    let (outcomes, length) = campaign(Synchronous::Normal, count.max(1), "NORMAL").await;
    report("NORMAL", &outcomes, length, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_makes_the_store_not_ready_until_a_write_fits_again() {
    fronta_powercut::install();
    let dir = tempfile::tempdir().expect("a folder");
    let template = template(dir.path());
    let live = tempfile::tempdir().expect("a folder");
    std::fs::write(live.path().join(DB), &template).expect("copy the template");
    let session = Session::start(live.path(), None).expect("a session");
    let store = SqliteStore::open(config(&live.path().join(DB), Synchronous::Full))
        .expect("open the store");
    let before = RunId::new_v7();
    store
        .run_enqueue_many(vec![new_run(before)])
        .await
        .expect("an enqueue while there is space");
    store
        .store_ready()
        .await
        .expect("ready while there is space");

    session.set_full(true);
    let refused = RunId::new_v7();
    let answer = store.run_enqueue_many(vec![new_run(refused)]).await;
    assert!(
        matches!(answer, Err(fronta_engine::StoreError::Unavailable(_))),
        "an enqueue on a full disk is Unavailable (a 503), got {answer:?}"
    );
    for probe in 0..3 {
        let ready = store.store_ready().await;
        assert!(
            matches!(ready, Err(fronta_engine::StoreError::Unavailable(_))),
            "probe {probe}: not ready while the disk stays full, got {ready:?}"
        );
    }

    session.set_full(false);
    store
        .store_ready()
        .await
        .expect("ready again once a write fits, with no other write first");
    store
        .store_ready()
        .await
        .expect("and it stays ready (the failure cleared)");
    let after = RunId::new_v7();
    store
        .run_enqueue_many(vec![new_run(after)])
        .await
        .expect("an enqueue after the space is back");
    for (id, present) in [(before, true), (refused, false), (after, true)] {
        assert_eq!(
            store.run_get(id).await.expect("read a run").is_some(),
            present,
            "run {id}: present = {present}"
        );
    }
    drop(store);
}
