//! Group enqueue: concurrent enqueues of one process share one statement and one commit.
//!
//! On Postgres every enqueue alone is one commit, and a commit waits for its WAL flush:
//! 32 webhooks arriving together were 32 flushes, so 32 callers enqueued hardly faster
//! than one. SQLite's writer thread already groups what arrives while it writes; this is
//! the same idea for the Postgres store, in front of [`crate::PgStore`]'s enqueue.
//!
//! # Contract
//!
//! - A call whose runs arrive while fewer than `writers` groups are being written is
//!   written at once, with whatever else is waiting: nothing lingers, so a lone enqueue
//!   costs what it did (one statement, one commit) plus a task hop.
//! - Otherwise it waits for a writer, and the calls that gathered meanwhile are written as
//!   one group: their runs in one transaction, one commit for all of them (at most
//!   `max_runs` runs per group; a call of that many runs or more is written alone).
//! - Every call is answered with its own answers in its input order, exactly what
//!   `run_enqueue_many` alone would answer: a unique key repeated across the calls of a
//!   group is inserted once, the later calls answered `Existing` — as if they had come
//!   one after the other.
//! - A group that fails with `Unavailable` answers `Unavailable` to every call in it (the
//!   commit's outcome may be unknown; each call may be repeated, as alone). A group that
//!   fails otherwise wrote nothing: its calls are written again one by one, so one
//!   call's bad runs (a duplicate id) fail that call only.
//! - The write runs on a task of its own: a caller that stops waiting (its request
//!   dropped) stops neither its runs' write nor the other calls'.
//! - Keyed runs are written in (tenant, key) order, so two groups written at once take
//!   the unique index's row locks in one order and cannot deadlock each other.
//!
//! `writers = 0` turns grouping off: every call is its own transaction.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use fronta_engine::store::{Enqueued, StoreResult};
use fronta_engine::{NewRun, StoreError};
use tokio::sync::oneshot;

/// Settings of group enqueue (see the module's contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupConfig {
    /// Groups written at once; 0 = no grouping.
    pub writers: usize,
    /// Runs per group at most; a call of this many runs or more is written alone.
    pub max_runs: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        // One writer: 32 callers of one run each enqueued 14,600–16,100 runs/s with
        // one, 10,500–11,300 with two and 6,100–8,200 with four (one commit is one WAL
        // flush; a second writer only halves the groups), 1,300–1,600 without grouping.
        Self {
            writers: 1,
            max_runs: 1_000,
        }
    }
}

/// What the groups did, for tests, metrics and the bench.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Groups written (a call written alone counts as a group of one).
    pub groups: u64,
    /// Calls answered through a group.
    pub calls: u64,
    /// Groups that failed other than `Unavailable` and were written again call by call.
    pub split: u64,
    /// Calls waiting for a writer now.
    pub waiting: u64,
}

/// Where a call's answers go.
type Reply = oneshot::Sender<StoreResult<Vec<Enqueued>>>;

struct Call {
    runs: Vec<NewRun>,
    reply: Reply,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Call>,
    writing: usize,
}

/// The queue of calls waiting for a writer, shared by the store's clones.
#[derive(Default)]
pub(crate) struct Groups {
    config: GroupConfig,
    queue: Mutex<Queue>,
    groups: AtomicU64,
    calls: AtomicU64,
    split: AtomicU64,
}

impl Groups {
    pub(crate) fn new(config: GroupConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Whether a call of `runs` runs goes through a group at all.
    pub(crate) fn takes(&self, runs: usize) -> bool {
        self.config.writers > 0 && runs < self.config.max_runs
    }

    pub(crate) fn stats(&self) -> GroupStats {
        GroupStats {
            groups: self.groups.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            split: self.split.load(Ordering::Relaxed),
            waiting: self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .waiting
                .len() as u64,
        }
    }

    /// Queue `runs` and wait for their answers. `write` writes one group's runs in one
    /// transaction (the store's own enqueue); it is called on spawned tasks.
    pub(crate) async fn enqueue<W>(
        self: &Arc<Self>,
        runs: Vec<NewRun>,
        write: W,
    ) -> StoreResult<Vec<Enqueued>>
    where
        W: WriteGroup,
    {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queue = self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            queue.waiting.push_back(Call { runs, reply });
            if queue.writing < self.config.writers {
                queue.writing += 1;
                self.take(&mut queue)
            } else {
                Vec::new()
            }
        };
        if !start.is_empty() {
            let slot = Slot {
                groups: Arc::clone(self),
                held: true,
            };
            tokio::spawn(write_until_empty(slot, start, write));
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the enqueue's writer stopped before it answered; the runs may or may not be stored"
                    .into(),
            ))
        })
    }

    /// The next group: waiting calls in arrival order up to `max_runs` runs (always at
    /// least one call).
    fn take(&self, queue: &mut Queue) -> Vec<Call> {
        let max_runs = self.config.max_runs;
        let mut group = Vec::new();
        let mut runs = 0;
        while let Some(call) = queue.waiting.front() {
            if !group.is_empty() && runs + call.runs.len() > max_runs {
                break;
            }
            runs += call.runs.len();
            group.extend(queue.waiting.pop_front());
        }
        group
    }

    async fn write_one<W: WriteGroup>(&self, mut group: Vec<Call>, write: &W) {
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.calls.fetch_add(group.len() as u64, Ordering::Relaxed);
        if group.len() == 1 {
            let call = group.remove(0);
            let answer = write.write(&call.runs).await;
            let _ = call.reply.send(answer);
            return;
        }
        let calls = group.len();
        let (runs, order, replies) = merge(group);
        tracing::debug!(
            calls,
            runs = runs.len(),
            "postgres: one commit for a group of enqueues"
        );
        let lengths: Vec<usize> = replies.iter().map(|(length, _)| *length).collect();
        match write.write(&runs).await {
            Ok(answers) => {
                let answers = unmerge(answers, &order, &lengths);
                for ((_, reply), answers) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answers));
                }
            }
            Err(StoreError::Unavailable(reason)) => {
                for (_, reply) in replies {
                    let _ = reply.send(Err(StoreError::Unavailable(reason.clone())));
                }
            }
            Err(err) => {
                self.split.fetch_add(1, Ordering::Relaxed);
                tracing::info!(calls, error = %err,
                    "postgres: a group of enqueues failed and wrote nothing; writing its calls one by one");
                let each = unmerge(runs, &order, &lengths);
                for ((_, reply), runs) in replies.into_iter().zip(each) {
                    let _ = reply.send(write.write(&runs).await);
                }
            }
        }
    }
}

/// Write `group`, then every group that gathered meanwhile, until none waits; then give
/// the writer's place back.
async fn write_until_empty<W: WriteGroup>(mut slot: Slot, mut group: Vec<Call>, write: W) {
    loop {
        slot.groups.write_one(group, &write).await;
        let mut queue = slot
            .groups
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if queue.waiting.is_empty() {
            // Under the same lock as the look at the queue: a call queued after it
            // finds the place free and starts a writer of its own.
            queue.writing -= 1;
            drop(queue);
            slot.held = false;
            return;
        }
        group = slot.groups.take(&mut queue);
    }
}

/// A writer's place, given back if the writer ends without giving it back itself (a
/// panic, its runtime shutting down): then the calls waiting are dropped, so they answer
/// `Unavailable` at once instead of waiting for a writer that never comes, and the next
/// call starts a writer again.
struct Slot {
    groups: Arc<Groups>,
    held: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let dropped = {
            let mut queue = self
                .groups
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            queue.writing -= 1;
            std::mem::take(&mut queue.waiting)
        };
        tracing::warn!(
            waiting = dropped.len(),
            "postgres: an enqueue writer stopped before its calls were answered"
        );
    }
}

/// Writes one group's runs in one transaction: the store's own enqueue.
pub(crate) trait WriteGroup: Send + Sync + 'static {
    fn write(
        &self,
        runs: &[NewRun],
    ) -> impl std::future::Future<Output = StoreResult<Vec<Enqueued>>> + Send;
}

/// The group's runs moved into one list — unkeyed runs first in arrival order, then
/// keyed runs in (tenant, key) order, the order of arrival among equal keys — with, per
/// position of the list, the run's place in arrival order, and each call's length and
/// reply.
fn merge(group: Vec<Call>) -> (Vec<NewRun>, Vec<usize>, Vec<(usize, Reply)>) {
    let mut arrived = Vec::new();
    let mut replies = Vec::with_capacity(group.len());
    for call in group {
        replies.push((call.runs.len(), call.reply));
        arrived.extend(call.runs);
    }
    let mut order: Vec<usize> = (0..arrived.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |index: usize| {
            let run: &NewRun = &arrived[index];
            run.unique_key
                .as_deref()
                .map(|key| (run.tenant.as_str(), key))
        };
        key(a).cmp(&key(b))
    });
    let mut slots: Vec<Option<NewRun>> = arrived.into_iter().map(Some).collect();
    let runs = order
        .iter()
        .filter_map(|&index| slots[index].take())
        .collect();
    (runs, order, replies)
}

/// Items of the merged list (its runs, or their answers) back in arrival order, cut into
/// the calls' `lengths`.
fn unmerge<T>(items: Vec<T>, order: &[usize], lengths: &[usize]) -> Vec<Vec<T>> {
    let mut arrived: Vec<Option<T>> = (0..order.len()).map(|_| None).collect();
    for (item, &index) in items.into_iter().zip(order) {
        arrived[index] = Some(item);
    }
    let mut arrived = arrived.into_iter();
    lengths
        .iter()
        .map(|&length| arrived.by_ref().take(length).flatten().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fronta_engine::{RunId, Trigger};

    fn run(tenant: &str, key: Option<&str>) -> NewRun {
        NewRun {
            id: RunId::new_v7(),
            tenant: tenant.into(),
            kind: "k".into(),
            payload: serde_json::json!({}),
            trigger: Trigger::Api,
            unique_key: key.map(str::to_owned),
            priority: 0,
            delay: None,
            run_at: None,
            max_retries: 0,
        }
    }

    fn call(runs: Vec<NewRun>) -> Call {
        Call {
            runs,
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn merge_puts_keyed_runs_in_key_order_and_unmerge_gives_each_call_its_own() {
        let group = vec![
            call(vec![run("b", Some("z")), run("a", None)]),
            call(vec![run("a", Some("y"))]),
            call(vec![
                run("a", None),
                run("b", Some("a")),
                run("a", Some("y")),
            ]),
        ];
        let arrived: Vec<Vec<RunId>> = group
            .iter()
            .map(|call| call.runs.iter().map(|run| run.id).collect())
            .collect();
        let (runs, order, replies) = merge(group);
        let lengths: Vec<usize> = replies.iter().map(|(length, _)| *length).collect();
        assert_eq!(lengths, vec![2, 1, 3]);
        let keys: Vec<(String, Option<String>)> = runs
            .iter()
            .map(|run| (run.tenant.clone(), run.unique_key.clone()))
            .collect();
        let key = |tenant: &str, key: Option<&str>| (tenant.to_owned(), key.map(str::to_owned));
        assert_eq!(
            keys,
            vec![
                key("a", None),
                key("a", None),
                key("a", Some("y")),
                key("a", Some("y")),
                key("b", Some("a")),
                key("b", Some("z")),
            ]
        );
        // The earlier arrival of a repeated key comes first: it is the one inserted.
        assert_eq!(runs[2].id, arrived[1][0]);
        let answers: Vec<Enqueued> = runs.iter().map(|run| Enqueued::Inserted(run.id)).collect();
        let split = unmerge(answers, &order, &lengths);
        let ids = |answers: &[Enqueued]| answers.iter().map(|a| a.id()).collect::<Vec<_>>();
        for (want, answers) in arrived.iter().zip(&split) {
            assert_eq!(&ids(answers), want);
        }
        // A failed group's runs go back to their calls the same way.
        let each = unmerge(runs, &order, &lengths);
        for (want, runs) in arrived.iter().zip(&each) {
            assert_eq!(&runs.iter().map(|run| run.id).collect::<Vec<_>>(), want);
        }
    }

    /// Answers every run `Inserted`, but panics on the first write when told to.
    struct Fake {
        panic_once: std::sync::atomic::AtomicBool,
    }

    impl WriteGroup for Arc<Fake> {
        async fn write(&self, runs: &[NewRun]) -> StoreResult<Vec<Enqueued>> {
            if self.panic_once.swap(false, Ordering::SeqCst) {
                panic!("a planted writer panic");
            }
            Ok(runs.iter().map(|run| Enqueued::Inserted(run.id)).collect())
        }
    }

    #[tokio::test]
    async fn a_writer_that_panics_answers_unavailable_and_the_next_call_writes_again() {
        let groups = Arc::new(Groups::new(GroupConfig {
            writers: 1,
            max_runs: 10,
        }));
        let fake = Arc::new(Fake {
            panic_once: true.into(),
        });
        let lost = groups.enqueue(vec![run("a", None)], fake.clone()).await;
        assert!(matches!(lost, Err(StoreError::Unavailable(_))), "{lost:?}");
        let next = run("a", None);
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            groups.enqueue(vec![next.clone()], fake),
        )
        .await
        .expect("the next call is written, not left waiting for the lost writer");
        assert_eq!(
            answer,
            Ok(vec![Enqueued::Inserted(next.id)]),
            "the slot was given back"
        );
    }

    #[test]
    fn a_group_stops_before_max_runs_but_always_takes_one_call() {
        let groups = Groups::new(GroupConfig {
            writers: 1,
            max_runs: 3,
        });
        let mut queue = Queue::default();
        for n in [5, 1, 2, 1] {
            queue
                .waiting
                .push_back(call((0..n).map(|_| run("a", None)).collect()));
        }
        let sizes = |group: Vec<Call>| group.iter().map(|call| call.runs.len()).collect::<Vec<_>>();
        assert_eq!(sizes(groups.take(&mut queue)), vec![5]);
        assert_eq!(sizes(groups.take(&mut queue)), vec![1, 2]);
        assert_eq!(sizes(groups.take(&mut queue)), vec![1]);
        assert!(queue.waiting.is_empty());
    }
}
