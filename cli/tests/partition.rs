//! Network partitions between fronta processes and Postgres (issue 24 item 1;
//! `RELIABILITY.md` §10).
//!
//! The test makes a network of its own ([`support::netns`]): a network namespace joined to
//! the host by two veth pairs with private addresses — a database link and an API link —
//! and a private Postgres cluster listening on the host side of the database link (and on
//! 127.0.0.1, for the processes that stay on the host and for the checker). The
//! partitioned processes run inside the namespace (`ip netns exec`); the partition is
//! `ip link set <database link> down` (packets dropped, nothing closed), healed by `up`.
//! The kernel here has no netem qdisc, so there is no loss or delay, only the cut.
//!
//! - **A worker cut off past its lease while its handlers run.** Worker A (inside) runs
//!   durable `steps` runs and fire-and-forget `probe` runs; the link is cut after each
//!   `steps` run committed a few checkpoints and every probe started; worker B (on the
//!   host) takes every run over once A's leases expired and completes them all; then the
//!   link heals. Checked: every write A makes after the heal is refused (its stderr says
//!   "lease lost", its exit report completes nothing, the rows are exactly what B left);
//!   each run completed once (one `done` line, by B); no step ran again after its
//!   checkpoint, owners follow each other (A, then B), B resumed from the checkpoint A
//!   had committed before the cut; one reclaim and no attempt per run.
//! - **`fronta serve` cut off under webhook load.** The server (HTTP and its worker)
//!   runs inside; the load comes from the host over the API link, which stays up; the
//!   database link is cut for a while and healed. Checked as in `outage.rs`
//!   ([`support::webhooks`]): no 202 without its committed row, no run id twice, every
//!   other answer a 503 with `Retry-After`, every run completed with no attempt spent,
//!   the server leads again and stops cleanly; and the cut took (503s were answered, and
//!   no request sent during the cut got a 202 before the heal). Reported: the 503s' latencies, the time
//!   from the heal to the first 202, and to the first second at ≥ 90 % of the pre-cut
//!   rate.
//!
//! Where a namespace or the cluster cannot be made (not root, no iproute2, no Postgres
//! server binaries), the test says so loudly and runs the same scenarios through the
//! fault proxy (`fronta_sim::faults`, a stall) on the shared Postgres server;
//! `FRONTA_PARTITION_PROXY=1` forces that. Quick tier by default; `FRONTA_PARTITION_FULL=1`
//! runs 200 webhooks/s with a 30 s cut, and holds the worker's partition 30 s.

mod support;

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fronta_sim::faults::{Cut, FaultProxy};
use fronta_store_postgres::{PgConfig, PgStore};
use support::netns::{Cluster, Namespace};
use support::webhooks::{self, Load, quantile_ms, rate_before, recovery};
use support::{TakenOver, all_runs, check_taken_over, checkpoint_of, pg, read_log};

const FULL_ENV: &str = "FRONTA_PARTITION_FULL";
const PROXY_ENV: &str = "FRONTA_PARTITION_PROXY";

fn full() -> bool {
    std::env::var(FULL_ENV).is_ok_and(|value| value == "1")
}

/// Where the partitioned processes run and how they are cut off. Fields drop in order:
/// the namespace (and the processes left in it) before the cluster.
enum Net {
    Namespace {
        namespace: Namespace,
        cluster: Cluster,
    },
    Proxy {
        proxy: FaultProxy,
        db: pg::TestDb,
    },
}

impl Net {
    /// A namespace with a database link (0) and an API link (1), and a cluster on the
    /// database link; the fault proxy when they cannot be made (said loudly).
    async fn make(test: &str) -> Net {
        let why = if std::env::var(PROXY_ENV).is_ok_and(|value| value == "1") {
            format!("{PROXY_ENV}=1")
        } else {
            let made = Namespace::create(2).and_then(|namespace| {
                let cluster = Cluster::start(&[namespace.links[0].host_addr])?;
                Ok((namespace, cluster))
            });
            match made {
                Ok((namespace, cluster)) => {
                    eprintln!(
                        "partition ({test}): namespace {} (database link {} ↔ {}, API link {} ↔ {}), Postgres on port {}",
                        namespace.name,
                        namespace.links[0].inside_addr,
                        namespace.links[0].host_addr,
                        namespace.links[1].inside_addr,
                        namespace.links[1].host_addr,
                        cluster.port
                    );
                    return Net::Namespace { namespace, cluster };
                }
                Err(err) => err,
            }
        };
        eprintln!(
            "\n*** partition ({test}): NO NETWORK NAMESPACE: {why}\n*** \
             falling back to the fault proxy (a stall) on the shared Postgres server: \
             this run does not test a real network partition ***\n"
        );
        let db = pg::TestDb::create().await;
        let proxy = FaultProxy::start(support::pg_upstream().await)
            .await
            .expect("start the fault proxy");
        Net::Proxy { proxy, db }
    }

    fn mode(&self) -> &'static str {
        match self {
            Net::Namespace { .. } => "network namespace, link down",
            Net::Proxy { .. } => "FALLBACK: fault proxy stall",
        }
    }

    /// The words that start a partitioned process.
    fn wrapper(&self) -> Vec<String> {
        match self {
            Net::Namespace { namespace, .. } => namespace.wrapper(),
            Net::Proxy { .. } => Vec::new(),
        }
    }

    /// The database URL of the partitioned processes.
    fn inside_url(&self) -> String {
        match self {
            Net::Namespace { namespace, cluster } => cluster.url(namespace.links[0].host_addr),
            Net::Proxy { proxy, db } => support::url_through(&db.url, proxy.local_addr()),
        }
    }

    /// The database URL of the processes never cut off, and of the checker.
    fn direct_url(&self) -> String {
        match self {
            Net::Namespace { cluster, .. } => cluster.url(std::net::Ipv4Addr::LOCALHOST),
            Net::Proxy { db, .. } => db.url.clone(),
        }
    }

    /// Where a partitioned `fronta serve` listens (reachable from the host throughout).
    fn listen(&self) -> String {
        match self {
            Net::Namespace { namespace, .. } => format!("{}:0", namespace.links[1].inside_addr),
            Net::Proxy { .. } => "127.0.0.1:0".to_owned(),
        }
    }

    async fn cut(&self) {
        match self {
            Net::Namespace { namespace, .. } => {
                namespace.set_link(0, false).expect("cut the database link")
            }
            Net::Proxy { proxy, .. } => proxy.cut(Cut::Stall).await,
        }
    }

    async fn heal(&self) {
        match self {
            Net::Namespace { namespace, .. } => {
                namespace.set_link(0, true).expect("heal the database link")
            }
            Net::Proxy { proxy, .. } => proxy.restore().await.expect("restore the proxy"),
        }
    }

    /// The checker's store: straight to Postgres, no listener.
    async fn store(&self) -> PgStore {
        let mut config = PgConfig::new(self.direct_url());
        config.max_connections = 4;
        config.listen = false;
        PgStore::connect(config)
            .await
            .expect("the checker's store connects")
    }
}

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0)
}

/// The "N claimed, M completed" figure of a worker's exit report.
fn report_completed(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|line| line.contains("worker done:"))
        .unwrap_or_else(|| panic!("an exit report: {stderr}"));
    let after = line.split("claimed, ").nth(1).expect("report shape");
    after
        .split(' ')
        .next()
        .and_then(|count| count.parse().ok())
        .expect("completed count")
}

async fn wait_exit(child: Child, within: Duration, what: &str) -> std::process::ExitStatus {
    let pid = child.id();
    let waited = tokio::time::timeout(
        within,
        tokio::task::spawn_blocking(move || {
            let mut child = child;
            child.wait()
        }),
    )
    .await;
    match waited {
        Ok(joined) => joined.expect("join").expect("wait"),
        Err(_) => {
            support::signal(pid, "KILL");
            panic!("{what} did not exit within {within:?}")
        }
    }
}

/// A worker started through `wrapper` on `url`, stderr to `stderr`.
fn worker(
    wrapper: &[String],
    url: &str,
    log: &std::path::Path,
    stderr: &std::path::Path,
    args: &[&str],
) -> Child {
    let err = std::fs::File::create(stderr).expect("create the worker's stderr file");
    support::fronta_in(wrapper, url)
        .arg("worker")
        .args(args)
        .env("FRONTA_PROBE_LOG", log)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("start a worker process")
}

/// How A's `probe` executions met B's: the runs whose A execution was still going when B
/// started it (its `end` line after B's `start`, or none: stopped later), and the
/// longest such overlap seen (seconds, from A's `end` lines).
fn probe_overlaps(log: &std::path::Path, a_pid: u32, b_pid: u32) -> (usize, f64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut a_end: HashMap<&str, u128> = HashMap::new();
    let mut b_start: HashMap<&str, u128> = HashMap::new();
    let mut a_started: Vec<&str> = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [event, run, pid, at] = parts.as_slice() else {
            continue;
        };
        let (Ok(pid), Ok(at)) = (pid.parse::<u32>(), at.parse::<u128>()) else {
            continue;
        };
        match (*event, pid) {
            ("start", pid) if pid == a_pid => a_started.push(run),
            ("end", pid) if pid == a_pid => {
                a_end.insert(run, at);
            }
            ("start", pid) if pid == b_pid => {
                b_start.insert(run, at);
            }
            _ => {}
        }
    }
    let mut overlapped = 0;
    let mut longest = 0f64;
    for run in a_started {
        let Some(b) = b_start.get(run) else { continue };
        match a_end.get(run) {
            Some(end) if end <= b => {}
            Some(end) => {
                overlapped += 1;
                longest = longest.max((end - b) as f64 / 1e9);
            }
            None => overlapped += 1,
        }
    }
    (overlapped, longest)
}

struct WorkerPlan {
    steps_runs: usize,
    steps: u64,
    step_ms: u64,
    probes: usize,
    probe_ms: u64,
    /// The partition lasts at least this long (and until B has finished).
    hold: Duration,
}

fn worker_plan() -> WorkerPlan {
    if full() {
        WorkerPlan {
            steps_runs: 12,
            steps: 16,
            step_ms: 250,
            probes: 12,
            probe_ms: 4000,
            hold: Duration::from_secs(30),
        }
    } else {
        WorkerPlan {
            steps_runs: 4,
            steps: 16,
            step_ms: 250,
            probes: 4,
            probe_ms: 4000,
            hold: Duration::ZERO,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_past_its_lease_is_refused_every_write_after_the_partition_heals() {
    let plan = worker_plan();
    let net = Net::make("worker").await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let log = dir.path().join("probes.log");
    let direct = net.direct_url();
    let store = net.store().await;
    for _ in 0..plan.steps_runs {
        let payload = format!(r#"{{"steps": {}, "ms": {}}}"#, plan.steps, plan.step_ms);
        support::enqueue(&direct, &["steps", "--payload", &payload]);
    }
    for _ in 0..plan.probes {
        let payload = format!(r#"{{"ms": {}}}"#, plan.probe_ms);
        support::enqueue(&direct, &["probe", "--payload", &payload]);
    }
    let concurrency = (plan.steps_runs + plan.probes).to_string();
    let args = [
        "--concurrency",
        &concurrency,
        "--lease",
        "2s",
        "--poll",
        "50ms",
        "--until-idle",
    ];
    let a_err = dir.path().join("a.err");
    let a = worker(&net.wrapper(), &net.inside_url(), &log, &a_err, &args);
    let a_pid = a.id();

    // Cut once every steps run committed two checkpoints and every probe started in A.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let runs = all_runs(&store).await;
        let steps_ready = runs
            .iter()
            .filter(|run| run.kind == "steps")
            .all(|run| checkpoint_of(&run.state) >= 2);
        let probes = read_log(&log).1;
        let probes_started =
            probes.len() == plan.probes && probes.values().all(|starts| starts.contains(&a_pid));
        if steps_ready && probes_started {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A did not get its runs going within 60 s (log: {})",
            a_err.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    net.cut().await;
    let cut_at = Instant::now();
    let cut_nanos = unix_nanos();
    // Nothing of A reaches the database from here on: what is committed now is what B
    // finds (a write already in the server's hands gets a moment to land).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_cut: HashMap<String, u64> = all_runs(&store)
        .await
        .into_iter()
        .filter(|run| run.kind == "steps")
        .map(|run| (run.id.to_string(), checkpoint_of(&run.state)))
        .collect();

    // B, on the host, takes every run over once A's leases expired, and completes them.
    let b_err = dir.path().join("b.err");
    let b = worker(&[], &direct, &log, &b_err, &args);
    let b_pid = b.id();
    let status = wait_exit(b, Duration::from_secs(120), "worker B").await;
    let b_text = std::fs::read_to_string(&b_err).unwrap_or_default();
    assert!(status.success(), "B exits 0: {b_text}");
    let total = (plan.steps_runs + plan.probes) as u64;
    assert_eq!(
        report_completed(&b_text),
        total,
        "B completed every run: {b_text}"
    );
    let b_done = cut_at.elapsed();
    let after_b = serde_json::to_value(all_runs(&store).await).expect("json");
    tokio::time::sleep(plan.hold.saturating_sub(cut_at.elapsed())).await;

    // The partition heals: whatever A writes now is refused.
    net.heal().await;
    let cut_for = cut_at.elapsed();
    let healed = Instant::now();
    let status = wait_exit(a, Duration::from_secs(180), "worker A").await;
    let a_exit = healed.elapsed();
    let a_text = std::fs::read_to_string(&a_err).unwrap_or_default();
    assert!(status.success(), "A exits 0 once idle: {a_text}");
    assert!(
        a_text.contains("lease lost"),
        "A was told its leases were lost: {a_text}"
    );
    assert_eq!(
        report_completed(&a_text),
        0,
        "A completed nothing: {a_text}"
    );
    let after_a = serde_json::to_value(all_runs(&store).await).expect("json");
    assert_eq!(
        after_a, after_b,
        "A's writes after the heal changed nothing"
    );

    let runs = all_runs(&store).await;
    assert_eq!(runs.len() as u64, total, "no run lost, none added");
    let TakenOver {
        refused,
        first_b_line,
    } = check_taken_over(
        &runs,
        &log,
        plan.steps,
        (a_pid, b_pid),
        |key| at_cut[key],
        "B resumed from the checkpoint A committed before the cut",
    );
    let (overlapped, longest_overlap) = probe_overlaps(&log, a_pid, b_pid);
    let takeover = (first_b_line.saturating_sub(cut_nanos)) as f64 / 1e9;
    eprintln!(
        "partition (worker, {}): A (pid {a_pid}) cut off with {} steps runs at checkpoints {:?} and {} probes running; \
         B (pid {b_pid}) took the first run over {takeover:.1} s after the cut and completed all {total} runs {:.1} s after it; \
         the partition lasted {:.1} s; after the heal A exited in {:.1} s with every write refused \
         ({refused} checkpoints refused in the steps log; in its log {} finishes refused, {} runs found lost by its heartbeat), \
         rows unchanged; one completion each, 0 lost, 1 reclaim and 0 attempts per run; \
         {overlapped} of {} probes were still running in A when B started them (A's handlers run on past a lease it cannot renew; longest overlap {longest_overlap:.1} s)",
        net.mode(),
        plan.steps_runs,
        at_cut.values().collect::<Vec<_>>(),
        plan.probes,
        b_done.as_secs_f64(),
        cut_for.as_secs_f64(),
        a_exit.as_secs_f64(),
        a_text.matches("finish refused").count(),
        a_text.matches("heartbeat: lease lost").count(),
        plan.probes,
    );
}

struct ServePlan {
    rate: u64,
    connections: u64,
    warm: Duration,
    cut: Duration,
    after: Duration,
    lease: &'static str,
    drain_timeout: Duration,
}

fn serve_plan() -> ServePlan {
    if full() {
        ServePlan {
            rate: 200,
            connections: 64,
            warm: Duration::from_secs(10),
            cut: Duration::from_secs(30),
            after: Duration::from_secs(20),
            lease: "5s",
            drain_timeout: Duration::from_secs(300),
        }
    } else {
        ServePlan {
            rate: 100,
            connections: 32,
            warm: Duration::from_secs(3),
            cut: Duration::from_secs(5),
            after: Duration::from_secs(6),
            lease: "3s",
            drain_timeout: Duration::from_secs(120),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_cut_off_under_webhook_load_answers_503_with_retry_after_and_loses_nothing() {
    let plan = serve_plan();
    let net = Net::make("serve").await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut server = webhooks::serve(
        support::fronta_in(&net.wrapper(), net.inside_url()),
        &net.listen(),
        plan.lease,
        dir.path(),
    );
    let path = webhooks::setup(server.address);
    let direct = net.store().await;

    let restore_at = plan.warm + plan.cut;
    let load = Load::start(
        server.address,
        &path,
        plan.rate,
        plan.connections,
        restore_at + plan.after,
    );
    load.until(plan.warm).await;
    net.cut().await;
    let cut_real = load.elapsed();
    load.until(restore_at).await;
    net.heal().await;
    let heal_real = load.elapsed();
    let (seen, skipped, load_end) = load.finish().await;

    let (runs, drain) = webhooks::drain(&direct, plan.drain_timeout, &server.stderr).await;
    let answers = webhooks::check_answers(&seen, &runs, &server.stderr);
    let reclaims = webhooks::check_runs(&runs, &direct).await;
    let (leader, paths) = webhooks::check_server_end(&mut server, direct.pool()).await;

    // Figures.
    let pre_rate = rate_before(&answers.accepted_at, cut_real);
    let back = recovery(&answers.accepted_at, heal_real, load_end, pre_rate);
    let answered = |answer: &webhooks::Seen| answer.sent + answer.elapsed;
    let first_202 = seen
        .iter()
        .filter(|answer| answer.status == 202 && answered(answer) >= heal_real)
        .map(answered)
        .min()
        .map(|at| (at - heal_real).as_secs_f64());
    let during_cut_202 = seen
        .iter()
        .filter(|answer| {
            answer.status == 202 && answer.sent >= cut_real && answered(answer) < heal_real
        })
        .count();
    // The cut took: nothing could commit while the link was down, and requests were
    // turned away meanwhile (else this run proved nothing about a partition).
    assert_eq!(
        during_cut_202, 0,
        "no 202 for a request sent and answered while the database link was down"
    );
    assert!(
        answers.statuses.get(&503).copied().unwrap_or(0) > 0,
        "the cut was felt: some requests were answered 503"
    );
    let latencies = &answers.unavailable_latencies;
    eprintln!(
        "partition (serve, {}): {} requests at {}/s offered ({} 202, {} 503; {skipped} slots skipped while requests were out); \
         cut {:.1} s; pre-cut {pre_rate:.0} 202/s; {during_cut_202} 202s sent and answered during the cut; \
         503 latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; first 202 {} after the heal, ≥ 90 % of the pre-cut rate {} after it; \
         {} runs, all completed, attempts 0, {reclaims} reclaims, {} rows committed without a 202; drained in {:.1} s; \
         leader again: {leader}; server log: {paths}",
        net.mode(),
        seen.len(),
        plan.rate,
        answers.statuses.get(&202).copied().unwrap_or(0),
        answers.statuses.get(&503).copied().unwrap_or(0),
        (heal_real - cut_real).as_secs_f64(),
        quantile_ms(latencies, 0.5),
        quantile_ms(latencies, 0.99),
        quantile_ms(latencies, 1.0),
        first_202.map_or("never (within the load)".to_owned(), |s| format!(
            "{s:.1} s"
        )),
        back.map_or("never (within the load)".to_owned(), |s| format!(
            "{s:.1} s"
        )),
        runs.len(),
        answers.rows_without_202,
        drain.as_secs_f64(),
    );
}

#[test]
fn free_subnets_skip_the_ones_in_use() {
    let used =
        "2: eth0    inet 10.77.5.1/30 scope global eth0\n3: x    inet 10.77.5.6/30 scope global x";
    let first: Vec<std::net::Ipv4Addr> = support::netns::free_subnets(used, 5).take(2).collect();
    assert_eq!(
        first,
        vec![
            std::net::Ipv4Addr::new(10, 77, 5, 8),
            std::net::Ipv4Addr::new(10, 77, 5, 12)
        ],
        "10.77.5.0/30 and 10.77.5.4/30 are taken"
    );
    assert_eq!(
        support::netns::pid_of("fronta-part-123-4"),
        Some(123),
        "the pid in a name"
    );
    assert_eq!(
        support::netns::pid_of("fronta_test_1"),
        None,
        "not one of ours"
    );
}
