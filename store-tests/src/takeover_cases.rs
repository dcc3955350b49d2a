//! The process registry and the takeover of a dead process's runs
//! (`fronta_engine::liveness`, the `process_*` methods of the port): a process registers,
//! beats and leaves; claims and hand-offs name their holder; a takeover ends the leases of
//! the dead holder's running runs at once — reclaimed by the next claim with a fresh
//! owner token, the old owner's writes refused — and touches nothing else; the liveness
//! service takes over a process of this host whose pid is gone at once, and one of
//! another host only once its beat is older than the timeout.

use std::time::Duration;

use fronta_engine::liveness::{Liveness, LivenessConfig, ProcessFacts, ProcessId};
use fronta_engine::{FinishAction, FinishReply, HandOff, RunStatus};
use tokio_util::sync::CancellationToken;

use crate::StoreFactory;
use crate::support::{Env, KIND_A, LEASE, params, request};

fn facts(host: &str, pid: u32) -> ProcessFacts {
    ProcessFacts {
        host: host.into(),
        pid,
        started: "12345".into(),
    }
}

fn held_by(limit: usize, holder: ProcessId) -> fronta_engine::ClaimParams {
    let mut params = params(limit);
    params.holder = Some(holder);
    params
}

/// Register, list, beat, deregister: rows with their facts and beats by the store's clock.
pub async fn registry_keeps_processes_with_their_facts_and_beats(factory: &dyn StoreFactory) {
    let env = Env::open(factory).await;
    let (a, b) = (ProcessId::fresh(), ProcessId::fresh());
    env.store
        .process_register(a, &facts("one", 10))
        .await
        .expect("register a");
    env.advance(Duration::from_secs(2));
    env.store
        .process_register(b, &facts("two", 20))
        .await
        .expect("register b");
    let list = env.store.process_list().await.expect("list");
    assert_eq!(list.now, env.now(), "the list carries the store's now");
    assert_eq!(
        list.processes.len(),
        2,
        "both processes are listed: {list:?}"
    );
    let row_a = list
        .processes
        .iter()
        .find(|p| p.id == a)
        .expect("a is listed");
    assert_eq!(row_a.facts, facts("one", 10), "a's facts read back");
    assert_eq!(
        row_a.beat_at,
        env.now() - chrono::Duration::seconds(2),
        "a's beat is its registration"
    );

    env.advance(Duration::from_secs(3));
    assert!(
        env.store.process_beat(a).await.expect("beat a"),
        "a's row is there"
    );
    let list = env.store.process_list().await.expect("list");
    let row_a = list
        .processes
        .iter()
        .find(|p| p.id == a)
        .expect("a is listed");
    assert_eq!(row_a.beat_at, env.now(), "a beat now");

    env.store.process_deregister(a).await.expect("deregister a");
    assert!(
        !env.store.process_beat(a).await.expect("beat a again"),
        "a beat of a process that left finds no row"
    );
    let list = env.store.process_list().await.expect("list");
    assert_eq!(
        list.processes.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![b],
        "only b is left"
    );
    // Registering again (a process taken over that lives on) writes its row back.
    env.store
        .process_register(a, &facts("one", 11))
        .await
        .expect("register a again");
    let list = env.store.process_list().await.expect("list");
    let row_a = list
        .processes
        .iter()
        .find(|p| p.id == a)
        .expect("a is back");
    assert_eq!(row_a.facts.pid, 11, "the new facts are kept");
}

/// The dead process's running runs — claimed and handed off — are claimable at once and
/// reclaimed with a fresh owner token; the dead owner's writes are refused; the other
/// process's run, pending runs and finished runs are untouched.
pub async fn takeover_releases_the_dead_holder_s_runs_at_once_and_fences_it(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let (dead, alive) = (ProcessId::fresh(), ProcessId::fresh());
    env.store
        .process_register(dead, &facts("one", 10))
        .await
        .expect("register dead");
    env.store
        .process_register(alive, &facts("one", 20))
        .await
        .expect("register alive");

    // The dead process holds a claimed run and a handed-off one; one it finished.
    let claimed_id = env.enqueue_a().await;
    let finished_id = env.enqueue_a().await;
    let batch = env.claim(held_by(2, dead)).await;
    assert_eq!(batch.claimed.len(), 2, "the dead process claimed two runs");
    let claimed = batch
        .claimed
        .iter()
        .find(|c| c.run.id == claimed_id)
        .expect("the first run")
        .clone();
    let finished = batch
        .claimed
        .iter()
        .find(|c| c.run.id == finished_id)
        .expect("the second run")
        .clone();
    let reply = env
        .finish(
            finished_id,
            finished.owner,
            FinishAction::Complete { result: None },
        )
        .await;
    assert!(
        matches!(reply, FinishReply::Applied { .. }),
        "finished: {reply:?}"
    );
    let run = env
        .dispatcher
        .prepare(request(KIND_A).tenant("other"))
        .expect("valid");
    let handed_id = run.id;
    let handed = match env
        .store
        .run_enqueue_started(run, LEASE, Some(dead))
        .await
        .expect("hand-off")
    {
        HandOff::Started(claimed) => *claimed,
        other => panic!("nothing was due: the run is handed over, got {other:?}"),
    };
    // The live process holds one run; one run stays pending.
    let alive_id = env.enqueue(request(KIND_A).tenant("third")).await;
    let alive_batch = env.claim(held_by(1, alive)).await;
    assert_eq!(
        alive_batch.claimed.len(),
        1,
        "the live process claimed one run"
    );
    assert_eq!(alive_batch.claimed[0].run.id, alive_id, "its run");
    let pending_id = env.enqueue(request(KIND_A).tenant("fourth")).await;

    let signal = env.store.enqueue_signal();
    let woken = signal.notified();
    let mut woken = std::pin::pin!(woken);
    woken.as_mut().enable();
    let released = env.store.process_takeover(dead).await.expect("takeover");
    assert_eq!(
        released, 2,
        "the dead process's two running runs are released"
    );
    tokio::time::timeout(Duration::from_secs(5), woken)
        .await
        .expect("a takeover that released runs wakes the enqueue signal");
    let list = env.store.process_list().await.expect("list");
    assert!(
        list.processes.iter().all(|p| p.id != dead),
        "the dead process's row is gone: {list:?}"
    );

    // Without moving the clock, a claim reclaims both (and takes the pending one).
    let batch = env.claim(held_by(10, alive)).await;
    let mut reclaimed: Vec<_> = batch.claimed.iter().filter(|c| c.reclaimed).collect();
    reclaimed.sort_by_key(|c| c.run.id.0);
    let mut expected = vec![claimed_id, handed_id];
    expected.sort_by_key(|id| id.0);
    assert_eq!(
        reclaimed.iter().map(|c| c.run.id).collect::<Vec<_>>(),
        expected,
        "both of the dead process's runs are reclaimed at once, the live one's not"
    );
    for again in &reclaimed {
        assert_eq!(again.run.reclaims, 1, "a takeover is counted as a reclaim");
        assert_eq!(again.run.attempts, 0, "and spends no attempt");
    }
    assert!(
        batch
            .claimed
            .iter()
            .any(|c| c.run.id == pending_id && !c.reclaimed),
        "the pending run is claimed as usual: {:?}",
        batch.claimed
    );
    assert_eq!(
        batch.claimed.len(),
        3,
        "nothing else was claimable: {:?}",
        batch.claimed
    );

    // Fencing: the dead owner's writes are refused.
    for (id, owner) in [(claimed_id, claimed.owner), (handed_id, handed.owner)] {
        let reply = env
            .finish(id, owner, FinishAction::Complete { result: None })
            .await;
        assert_eq!(
            reply,
            FinishReply::LeaseLost { id },
            "the dead owner's finish is refused"
        );
    }
    let still = env.get(alive_id).await;
    assert_eq!(
        still.status,
        RunStatus::Running,
        "the live process's run still runs"
    );
    assert_eq!(still.reclaims, 0, "and was not reclaimed");
    assert_eq!(
        env.get(finished_id).await.status,
        RunStatus::Completed,
        "a finished run is untouched"
    );
    assert_eq!(
        env.store
            .process_takeover(dead)
            .await
            .expect("takeover again"),
        0,
        "a second takeover of the same process releases nothing"
    );
}

/// The liveness service on this store: a process of this host whose pid is gone is
/// taken over at once; one of another host only once silent past the timeout; the
/// service never takes itself over and leaves the registry on a clean stop.
pub async fn liveness_takes_over_a_gone_pid_at_once_and_a_silent_remote_after_the_timeout(
    factory: &dyn StoreFactory,
) {
    let env = Env::open(factory).await;
    let here = ProcessFacts::of_this_process();
    if here.started.is_empty() {
        return; // no /proc: the pid rule cannot be shown here (the beat rule is below)
    }
    let config = LivenessConfig {
        beat: Duration::from_secs(1),
        timeout: Duration::from_secs(10),
    };
    // A crashed process of this host (a pid no process has), and a remote one.
    let gone = ProcessId::fresh();
    let mut gone_facts = here.clone();
    gone_facts.pid = u32::MAX - 7;
    env.store
        .process_register(gone, &gone_facts)
        .await
        .expect("register gone");
    let remote = ProcessId::fresh();
    env.store
        .process_register(remote, &facts("elsewhere/boot/ns", 10))
        .await
        .expect("register remote");
    let gone_run = env.enqueue_a().await;
    assert_eq!(
        env.claim(held_by(1, gone)).await.claimed.len(),
        1,
        "gone holds a run"
    );
    let remote_run = env.enqueue(request(KIND_A).tenant("remote")).await;
    assert_eq!(
        env.claim(held_by(1, remote)).await.claimed.len(),
        1,
        "remote holds a run"
    );

    let me = ProcessId::fresh();
    let liveness = Liveness::start(env.store.clone(), me, config)
        .await
        .expect("start");
    // The start's first pass took the gone process over: its run is claimable now.
    let batch = env.claim(held_by(10, me)).await;
    assert_eq!(
        batch.claimed.iter().map(|c| c.run.id).collect::<Vec<_>>(),
        vec![gone_run],
        "the process whose pid is gone is taken over at once, the remote one is not"
    );

    env.advance(Duration::from_secs(10));
    assert!(
        liveness.pass().await.expect("pass").is_empty(),
        "10 s of silence is not past the timeout"
    );
    env.advance(Duration::from_millis(1));
    let taken = liveness.pass().await.expect("pass");
    assert_eq!(
        taken
            .iter()
            .map(|(t, runs)| (t.id, *runs))
            .collect::<Vec<_>>(),
        vec![(remote, 1)],
        "the remote process silent past the timeout is taken over with its run"
    );
    let batch = env.claim(held_by(10, me)).await;
    assert_eq!(
        batch.claimed.iter().map(|c| c.run.id).collect::<Vec<_>>(),
        vec![remote_run],
        "its run is claimable"
    );
    let list = env.store.process_list().await.expect("list");
    assert_eq!(
        list.processes.iter().map(|p| p.id).collect::<Vec<_>>(),
        vec![me],
        "only the judge is left: it never takes itself over (its own beat is 10 s old)"
    );

    let shutdown = CancellationToken::new();
    shutdown.cancel();
    liveness.run(shutdown).await;
    let list = env.store.process_list().await.expect("list");
    assert!(
        list.processes.is_empty(),
        "a clean stop leaves the registry: {list:?}"
    );
}
