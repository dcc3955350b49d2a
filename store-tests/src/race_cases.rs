//! Race cases: many concurrent callers on one store, checked by what the contract says
//! every interleaving must keep. Here: cancels racing claims and finishes.
//!
//! The number of runs is `FRONTA_CANCEL_RACES` (default [`DEFAULT_RACES`]). Nothing here
//! depends on which interleaving happened: the checks hold for all of them, and the case
//! prints how many cancels met a pending, a running and a finished run. Half the runs are
//! cancelled as soon as a canceller reaches them (mostly still pending), the other half
//! only once a claimer has taken them (running, or just finished), so every kind of
//! meeting happens in every run of the case.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fronta_engine::{
    CancelReply, ClaimBatch, Finish, FinishAction, FinishReply, OwnerToken, RunId, RunStatus,
    RunStore, StoreError,
};

use crate::StoreFactory;
use crate::support::{Env, KIND_A, params, request};

/// Runs per race case unless `FRONTA_CANCEL_RACES` says otherwise.
pub const DEFAULT_RACES: usize = 2_000;
/// Concurrent claimers and cancellers.
const CLAIMERS: usize = 3;
const CANCELLERS: usize = 2;
/// Runs per enqueue batch.
const BATCH: usize = 500;
/// How long claimers wait for the next cancel while cancels are left: a canceller that
/// died (a store error) would otherwise leave them waiting forever.
const CANCEL_STALL: Duration = Duration::from_secs(120);

fn races() -> usize {
    match std::env::var("FRONTA_CANCEL_RACES") {
        Ok(text) => text.trim().parse().unwrap_or_else(|err| {
            panic!("FRONTA_CANCEL_RACES={text:?} is not a whole number: {err}")
        }),
        Err(_) => DEFAULT_RACES,
    }
}

/// Something that happened to one run, stamped with a global order: `start` is taken
/// before the call, `end` after its answer, so `a.end < b.start` means a came first.
#[derive(Debug, Clone)]
enum Event {
    Claimed {
        start: u64,
        owner: OwnerToken,
    },
    Finished {
        action: &'static str,
        reply: FinishReply,
    },
    Cancel {
        end: u64,
        reply: CancelReply,
    },
}

#[derive(Default)]
struct Log {
    events: Mutex<HashMap<RunId, Vec<Event>>>,
    clock: AtomicU64,
}

impl Log {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn push(&self, id: RunId, event: Event) {
        self.events
            .lock()
            .expect("log lock")
            .entry(id)
            .or_default()
            .push(event);
    }
}

/// Retry a call the contract allows to be repeated (`Unavailable`).
async fn claim(store: &Arc<dyn RunStore>, limit: usize) -> ClaimBatch {
    loop {
        match store.run_claim(params(limit)).await {
            Ok(batch) => return batch,
            Err(StoreError::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(err) => panic!("run_claim failed: {err}"),
        }
    }
}

async fn finish(store: &Arc<dyn RunStore>, finish: Finish) -> FinishReply {
    loop {
        match store.run_finish_many(vec![finish.clone()]).await {
            Ok(mut replies) if replies.len() == 1 => return replies.remove(0),
            Ok(replies) => panic!("one finish answered {replies:?}"),
            Err(StoreError::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(2)).await,
            Err(err) => panic!("run_finish_many failed: {err}"),
        }
    }
}

/// The action the claimers write for the `seen`-th claim of run number `index`: the
/// first claim of most runs puts them back (retry, snooze, release) so they meet the
/// cancels again as pending runs; a second claim completes or fails.
fn action_for(index: usize, seen: usize) -> FinishAction {
    match (seen, index % 6) {
        (0, 0) => FinishAction::Retry {
            delay: Duration::ZERO,
            error: "race retry".into(),
        },
        (0, 1) => FinishAction::Snooze {
            delay: Duration::ZERO,
        },
        (0, 2) => FinishAction::Release,
        (_, 3) => FinishAction::Fail {
            error: "race failure".into(),
        },
        _ => FinishAction::Complete {
            result: Some(serde_json::json!({ "index": index })),
        },
    }
}

/// Cancels race claims and finishes over many runs on one store. Whatever the
/// interleaving:
/// - once `request_cancel` answered `Cancelled`, no claim that started afterwards hands
///   the run out, and the run ends cancelled;
/// - once it answered `Requested`, the run ends cancelled unless a `Complete` or `Fail`
///   was written (they tell what happened); a put-back never makes it pending again;
/// - a finish is never written after one that cancelled the run, a run is completed at
///   most once, and every former owner's late completion afterwards is lease lost and
///   changes nothing;
/// - every run ends terminal.
pub async fn cancels_racing_claims_and_finishes_never_lose_a_cancel(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let total = races();
    let mut ids: Vec<RunId> = Vec::with_capacity(total);
    for chunk in (0..total).collect::<Vec<_>>().chunks(BATCH) {
        let answers = env
            .dispatcher
            .enqueue_many(
                chunk
                    .iter()
                    .map(|index| request(KIND_A).tenant(format!("race-{}", index % 4)))
                    .collect(),
            )
            .await
            .expect("enqueue succeeds");
        ids.extend(answers.into_iter().map(|answer| answer.id()));
    }
    let index_of: Arc<HashMap<RunId, usize>> =
        Arc::new(ids.iter().enumerate().map(|(i, id)| (*id, i)).collect());
    let log = Arc::new(Log::default());
    let cancels_left = Arc::new(AtomicU64::new(total as u64));
    let seen: Arc<Mutex<HashMap<RunId, usize>>> = Arc::default();

    let mut tasks = Vec::new();
    for _ in 0..CLAIMERS {
        let (store, log, index_of, seen, cancels_left) = (
            env.store.clone(),
            log.clone(),
            index_of.clone(),
            seen.clone(),
            cancels_left.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let (mut last_left, mut last_progress) = (u64::MAX, Instant::now());
            loop {
                let start = log.tick();
                let batch = claim(&store, 8).await;
                if batch.claimed.is_empty() {
                    let left = cancels_left.load(Ordering::SeqCst);
                    if left == 0 {
                        return;
                    }
                    if left != last_left {
                        (last_left, last_progress) = (left, Instant::now());
                    }
                    assert!(
                        last_progress.elapsed() < CANCEL_STALL,
                        "{left} cancels left and none came in {CANCEL_STALL:?} (did a canceller fail?)"
                    );
                    tokio::task::yield_now().await;
                    continue;
                }
                for claimed in &batch.claimed {
                    log.push(
                        claimed.run.id,
                        Event::Claimed {
                            start,
                            owner: claimed.owner,
                        },
                    );
                }
                for claimed in batch.claimed {
                    let id = claimed.run.id;
                    let count = {
                        let mut seen = seen.lock().expect("seen lock");
                        let count = seen.entry(id).or_default();
                        *count += 1;
                        *count - 1
                    };
                    // The handler "runs": the cancellers get their turn.
                    tokio::task::yield_now().await;
                    let action = action_for(index_of[&id], count);
                    let name = action.name();
                    let reply = finish(
                        &store,
                        Finish {
                            id,
                            owner: claimed.owner,
                            action,
                        },
                    )
                    .await;
                    log.push(
                        id,
                        Event::Finished {
                            action: name,
                            reply,
                        },
                    );
                }
            }
        }));
    }
    for canceller in 0..CANCELLERS {
        let (store, log, cancels_left, seen, index_of) = (
            env.store.clone(),
            log.clone(),
            cancels_left.clone(),
            seen.clone(),
            index_of.clone(),
        );
        let mine: Vec<RunId> = ids
            .iter()
            .copied()
            .skip(canceller)
            .step_by(CANCELLERS)
            .collect();
        tasks.push(tokio::spawn(async move {
            for id in mine {
                // Odd runs are cancelled only once a claimer has taken them, so their
                // cancel lands on a running run, or just after its finish.
                if index_of[&id] % 2 == 1 {
                    while !seen.lock().expect("seen lock").contains_key(&id) {
                        tokio::task::yield_now().await;
                    }
                }
                let reply = loop {
                    match store.run_request_cancel(id).await {
                        Ok(reply) => break reply,
                        Err(StoreError::Unavailable(_)) => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        Err(err) => panic!("run_request_cancel failed: {err}"),
                    }
                };
                let end = log.tick();
                log.push(id, Event::Cancel { end, reply });
                cancels_left.fetch_sub(1, Ordering::SeqCst);
            }
        }));
    }
    for task in tasks {
        task.await.expect("race task ran to its end");
    }

    // Every run met its cancel, so none can be pending or running any more: a put-back
    // after a requested cancel writes `cancelled`.
    let after = claim(&env.store, 64).await;
    assert!(
        after.claimed.is_empty() && after.cancelled.is_empty() && after.crash_looped.is_empty(),
        "after every run met its cancel, a claim still found work: {after:?}"
    );

    let events = std::mem::take(&mut *log.events.lock().expect("log lock"));
    let (mut met_pending, mut met_running, mut met_finished) = (0, 0, 0);
    let mut late_refused = 0;
    for id in &ids {
        let run = env.get(*id).await;
        let events = events.get(id).cloned().unwrap_or_default();
        assert!(
            run.status.is_terminal(),
            "run {id} ended {} after the race: {events:?}",
            run.status
        );
        let cancel = events.iter().find_map(|event| match event {
            Event::Cancel { end, reply } => Some((*end, *reply)),
            _ => None,
        });
        let (cancel_end, cancel_reply) =
            cancel.unwrap_or_else(|| panic!("run {id} was never cancelled: {events:?}"));
        let applied: Vec<(&'static str, RunStatus)> = events
            .iter()
            .filter_map(|event| match event {
                Event::Finished {
                    action,
                    reply: FinishReply::Applied { status, .. },
                } => Some((*action, *status)),
                _ => None,
            })
            .collect();
        let completions = applied
            .iter()
            .filter(|(_, status)| *status == RunStatus::Completed)
            .count();
        assert!(
            completions <= 1,
            "run {id} completed {completions} times: {events:?}"
        );
        let endings: Vec<RunStatus> = applied
            .iter()
            .map(|(_, status)| *status)
            .filter(|status| status.is_terminal())
            .collect();
        assert!(
            endings.len() <= 1,
            "run {id}: more than one finish ended it (one was written after the run had \
             ended): {events:?}"
        );
        if let Some(ending) = endings.first() {
            assert_eq!(
                *ending, run.status,
                "run {id}: a finish ended it as {ending}, yet it is {}: {events:?}",
                run.status
            );
        }
        match cancel_reply {
            CancelReply::Cancelled => {
                met_pending += 1;
                assert_eq!(
                    run.status,
                    RunStatus::Cancelled,
                    "run {id}: its cancel was acknowledged but it ended {}: {events:?}",
                    run.status
                );
                for event in &events {
                    if let Event::Claimed { start, .. } = event {
                        assert!(
                            *start < cancel_end,
                            "run {id} was handed out by a claim that started after its cancel \
                             was acknowledged: {events:?}"
                        );
                    }
                }
            }
            CancelReply::Requested => {
                met_running += 1;
                // Whether a completion or failure ended it: judged by what each finish
                // wrote, not by the order the claimers logged them in (a claimer may be
                // descheduled between its finish and its log line, while another claims
                // the run, finishes it and logs first).
                let told = applied.iter().any(|(action, status)| {
                    matches!(*action, "complete" | "fail") && status.is_terminal()
                });
                if !told {
                    assert_eq!(
                        run.status,
                        RunStatus::Cancelled,
                        "run {id}: cancel requested while running, no completion or failure \
                         written, yet it ended {}: {events:?}",
                        run.status
                    );
                }
            }
            CancelReply::AlreadyFinished(status) => {
                met_finished += 1;
                assert_eq!(
                    status, run.status,
                    "run {id}: the cancel saw it finished as {status}, it ended {}: {events:?}",
                    run.status
                );
            }
        }
        // Every former owner's late completion is refused and changes nothing.
        let snapshot = env.get(*id).await;
        for event in &events {
            if let Event::Claimed { owner, .. } = event {
                let reply = finish(
                    &env.store,
                    Finish {
                        id: *id,
                        owner: *owner,
                        action: FinishAction::Complete {
                            result: Some(serde_json::json!({ "late": true })),
                        },
                    },
                )
                .await;
                assert_eq!(
                    reply,
                    FinishReply::LeaseLost { id: *id },
                    "run {id}: a late completion by a former owner was not refused"
                );
                late_refused += 1;
            }
        }
        assert_eq!(
            env.get(*id).await,
            snapshot,
            "run {id}: late completions changed the run"
        );
    }
    println!(
        "cancel races: {total} runs; cancels met {met_pending} pending, {met_running} running, \
         {met_finished} finished runs; {late_refused} late completions refused"
    );
}
