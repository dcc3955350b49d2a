//! Database outage under webhook load (issue 9 item 3; `RELIABILITY.md` §9).
//!
//! The real `fronta serve` (HTTP and its worker, one process) runs on a fresh Postgres
//! database reached through a [`FaultProxy`]. Kept-alive connections post webhooks at a
//! steady rate and record every answer (status, run id, `Retry-After`, when). After a warm
//! spell the proxy cuts the database off — `reset` (connections reset, new ones refused:
//! the database restarting) or `stall` (a blackhole: nothing forwarded, nothing closed) —
//! for a while, then gives it back; the load goes on, then stops.
//!
//! The checker reads Postgres directly (not through the proxy):
//!
//! - every 202's run id is a committed row (no 202 without its commit), and no run id was
//!   answered twice;
//! - every other answer is a 503 with `Retry-After` (whole seconds, ≥ 1) and the body
//!   `{"error": {"code": "unavailable", "retryAfter": n, …}}` — no other status, and no
//!   request left without an answer or with a broken connection;
//! - every run reaches `completed` (the automation only logs), with `attempts` 0 on every
//!   row and in `run_stats`: the outage spends no retry budget; `reclaims` are counted
//!   (leases that expired during the cut) and reported;
//! - the server process is still alive afterwards, its election has a leader again, and
//!   it stops cleanly on SIGTERM (no panic, no stuck task);
//! - reported, not asserted (the machine is shared): the pre-cut rate of 202s, how long
//!   503s took, and the time from the restore to the first second with ≥ 90 % of the
//!   pre-cut rate of 202s.
//!
//! Quick tier by default (100 webhooks/s, a 5 s cut, each mode); `FRONTA_CHAOS_FULL=1`
//! runs the numbers (200 webhooks/s, a 30 s cut). Rows committed although their
//! request answered 503 (the commit landed after the deadline) are allowed — a 503 says
//! "repeat", and a `webhook-id` makes the repeat find the first run — and counted.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use fronta_sim::faults::{Cut, FaultProxy};
use support::pg;
use support::webhooks::{self, Load, quantile_ms, rate_before, recovery};

/// `FRONTA_CHAOS_FULL=1` selects the full tier (as for the other process harnesses).
const FULL_ENV: &str = "FRONTA_CHAOS_FULL";

struct Plan {
    /// Webhooks per second offered, all connections together.
    rate: u64,
    connections: u64,
    warm: Duration,
    cut: Duration,
    after: Duration,
    /// The runs' lease: shorter than the cut, so leases expire during it.
    lease: &'static str,
    drain_timeout: Duration,
}

fn full() -> bool {
    std::env::var(FULL_ENV).is_ok_and(|value| value == "1")
}

fn plan() -> Plan {
    if full() {
        Plan {
            rate: 200,
            connections: 64,
            warm: Duration::from_secs(10),
            cut: Duration::from_secs(30),
            after: Duration::from_secs(20),
            lease: "5s",
            drain_timeout: Duration::from_secs(300),
        }
    } else {
        Plan {
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

async fn outage(how: Cut) {
    let plan = plan();
    let db = pg::TestDb::create().await;
    let proxy = FaultProxy::start(support::pg_upstream().await)
        .await
        .expect("start the fault proxy");
    let proxied = support::url_through(&db.url, proxy.local_addr());
    let dir = tempfile::tempdir().expect("a temporary folder");
    let mut server = webhooks::serve(
        support::fronta(&proxied),
        "127.0.0.1:0",
        plan.lease,
        dir.path(),
    );
    let path = webhooks::setup(server.address);
    // The checker's own store: straight to Postgres, no listener.
    let mut direct_config = db.config(None);
    direct_config.listen = false;
    let direct = fronta_store_postgres::PgStore::connect(direct_config)
        .await
        .expect("a direct store");

    let cut_at = plan.warm;
    let restore_at = plan.warm + plan.cut;
    let stop = restore_at + plan.after;
    let load = Load::start(server.address, &path, plan.rate, plan.connections, stop);
    load.until(cut_at).await;
    let cut_real = load.elapsed();
    proxy.cut(how).await;
    eprintln!("outage ({how:?}): cut at {:.1} s", cut_real.as_secs_f64());
    load.until(restore_at).await;
    proxy.restore().await.expect("restore the proxy");
    let restore_real = load.elapsed();
    eprintln!(
        "outage ({how:?}): restored at {:.1} s",
        restore_real.as_secs_f64()
    );
    let (seen, skipped, load_end) = load.finish().await;

    // Every run reaches a terminal status; then the checks.
    let (runs, drain) = webhooks::drain(&direct, plan.drain_timeout, &server.stderr).await;
    let answers = webhooks::check_answers(&seen, &runs, &server.stderr);
    let reclaims = webhooks::check_runs(&runs, &direct).await;
    let (leader, paths) = webhooks::check_server_end(&mut server, direct.pool()).await;

    // Figures.
    let pre_rate = rate_before(&answers.accepted_at, cut_real);
    let back = recovery(&answers.accepted_at, restore_real, load_end, pre_rate);
    let latencies = &answers.unavailable_latencies;
    let mut accepted_latencies: Vec<Duration> = seen
        .iter()
        .filter(|answer| answer.status == 202 && answer.sent < cut_real)
        .map(|answer| answer.elapsed)
        .collect();
    accepted_latencies.sort();
    let during = seen
        .iter()
        .filter(|answer| answer.sent >= cut_real && answer.sent < restore_real)
        .count();
    let after_restore_503 = answers
        .unavailable_at
        .iter()
        .filter(|sent| **sent >= restore_real)
        .count();
    let proxy_stats = proxy.stats();
    eprintln!(
        "outage ({how:?}): {} requests ({} 202, {} 503; {} sent during the {:.0} s cut, {} 503s sent after the restore; {} slots skipped while requests were out); \
         pre-cut {:.0} 202/s (of {} offered; 202 latency p50 {:.0} ms, p99 {:.0} ms); 503 latency p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; \
         throughput back to ≥ 90 % {} after the restore; \
         {} runs, all completed, attempts 0, {} reclaims, {} rows committed without a 202; drained in {:.1} s; \
         proxy: {} connections, {} reset, {} held; leader again: {}; server log: {}",
        seen.len(),
        answers.statuses.get(&202).copied().unwrap_or(0),
        answers.statuses.get(&503).copied().unwrap_or(0),
        during,
        (restore_real - cut_real).as_secs_f64(),
        after_restore_503,
        skipped,
        pre_rate,
        plan.rate,
        quantile_ms(&accepted_latencies, 0.5),
        quantile_ms(&accepted_latencies, 0.99),
        quantile_ms(latencies, 0.5),
        quantile_ms(latencies, 0.99),
        quantile_ms(latencies, 1.0),
        back.map_or("never (within the load)".to_owned(), |s| format!(
            "{s:.1} s"
        )),
        runs.len(),
        reclaims,
        answers.rows_without_202,
        drain.as_secs_f64(),
        proxy_stats.accepted,
        proxy_stats.reset,
        proxy_stats.held,
        leader,
        paths,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_reset_under_webhook_load_answers_503_with_retry_after_and_loses_nothing() {
    outage(Cut::Reset).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stall_under_webhook_load_answers_503_with_retry_after_and_loses_nothing() {
    outage(Cut::Stall).await;
}

#[test]
fn through_replaces_only_host_and_port() {
    let address: SocketAddr = "127.0.0.1:6000".parse().expect("address");
    assert_eq!(
        support::url_through("postgres://u:p@db.example:5432/x?sslmode=disable", address),
        "postgres://u:p@127.0.0.1:6000/x?sslmode=disable"
    );
    assert_eq!(
        support::url_through("postgres://127.0.0.1/x", address),
        "postgres://127.0.0.1:6000/x"
    );
}

#[test]
fn recovery_finds_the_first_full_second() {
    let restore = Duration::from_secs(10);
    // 10/s before, nothing for 2 s after the restore, then 10/s again.
    let accepted: Vec<Duration> = (0..100)
        .map(|i| Duration::from_millis(i * 100))
        .chain((0..50).map(|i| Duration::from_millis(12_000 + i * 100)))
        .collect();
    let back = recovery(&accepted, restore, Duration::from_secs(17), 10.0).expect("back");
    assert!((back - 2.0).abs() < 0.11, "about 2 s: {back}");
    assert_eq!(
        recovery(&accepted, restore, Duration::from_secs(17), 100.0),
        None,
        "never at a rate it never had"
    );
}
