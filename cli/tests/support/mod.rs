//! Helpers shared by the process-level harnesses (`crash.rs`, `chaos.rs`, `fencing.rs`,
//! `poison.rs`, `postgres_bench.rs`, `serve.rs`, `outage.rs`, `partition.rs`,
//! `browser.rs`): the real `fronta` binary with the test kinds registered, HTTP calls to
//! it through reqwest, reading every run back through the store crates, and the checker
//! of the `steps` kind's log. [`webhooks`] holds the webhook load and its checker;
//! [`netns`] the network namespaces and the private Postgres cluster of `partition.rs`.

#![allow(dead_code)] // each test binary uses a different part

#[path = "../../../store-postgres/tests/support/mod.rs"]
pub mod pg;

pub mod netns;
pub mod webhooks;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use fronta_engine::{Run, RunFilter, RunStore};

pub const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");

/// `fronta serve` on `database` with the admin token `admin`, polling every 20 ms, on a
/// free port: the child and the address it listens on.
pub fn serve(database: &str, admin: &str) -> (Child, String) {
    serve_with(database, admin, &[])
}

/// [`serve`] with more flags of `fronta serve`.
pub fn serve_with(database: &str, admin: &str, flags: &[&str]) -> (Child, String) {
    let mut child = Command::new(FRONTA)
        .args(["--database", database])
        .args(["serve", "--listen", "127.0.0.1:0", "--poll", "20ms"])
        .args(flags)
        .env("RUST_LOG", "warn")
        .env("FRONTA_ADMIN_TOKEN", admin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fronta serve starts");
    let address = listening_address(&mut child);
    (child, address)
}

/// The address a starting `fronta serve` (stderr piped) prints as "listening on
/// http://ADDR"; stderr is drained afterwards so the server never blocks on a full pipe.
pub fn listening_address(child: &mut Child) -> String {
    use std::io::{BufRead, BufReader};
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let address = loop {
        let line = lines
            .next()
            .expect("fronta serve printed its address before it ended")
            .expect("a line");
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    address
}

/// A reqwest client for plain-HTTP calls to a local server: HTTP/1 only, no proxy, no
/// redirects, `pool` idle connections kept per host (1: calls one after the other share
/// one connection). reqwest needs a TLS backend to be built; it gets rustls with the ring
/// provider and no roots (nothing here speaks TLS).
pub fn http_client(pool: usize, timeout: std::time::Duration) -> reqwest::Client {
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .http1_only()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(pool)
        .timeout(timeout)
        .build()
        .expect("a reqwest client")
}

/// `method http://{address}{path}` with an optional bearer token and JSON body, from
/// synchronous test code (or from inside a runtime: the call runs on a thread of its own
/// with its own runtime): the status and the body as text, or why there was none.
pub fn try_call_text(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> Result<(u16, String), String> {
    let exchange = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| format!("a runtime for one call: {err}"))?;
        runtime.block_on(async {
            let client = http_client(0, std::time::Duration::from_secs(30));
            let method = reqwest::Method::from_bytes(method.as_bytes())
                .map_err(|err| format!("{method:?}: {err}"))?;
            let mut request = client.request(method.clone(), format!("http://{address}{path}"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string());
            }
            let response = request
                .send()
                .await
                .map_err(|err| format!("{method} {path}: {err:?}"))?;
            let status = response.status().as_u16();
            let text = response
                .text()
                .await
                .map_err(|err| format!("{method} {path}: the body: {err:?}"))?;
            Ok((status, text))
        })
    };
    std::thread::scope(|scope| {
        scope
            .spawn(exchange)
            .join()
            .unwrap_or_else(|_| Err(format!("{method} {path}: the call panicked")))
    })
}

/// [`try_call_text`], panicking when no answer came.
pub fn call_text(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> (u16, String) {
    try_call_text(address, method, path, token, body).unwrap_or_else(|err| panic!("{err}"))
}

/// [`call_text`] with the body read as JSON (`Null` when it is not JSON).
pub fn call(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let (status, text) = call_text(address, method, path, token, body);
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// `fronta --database <db>` with warnings only and the test kinds (`steps`, `abort`).
pub fn fronta(db: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(FRONTA);
    command
        .arg("--database")
        .arg(db)
        .env("RUST_LOG", "warn")
        .env("FRONTA_TEST_KINDS", "1");
    command
}

/// [`fronta`] started through `wrapper` (e.g. `["ip", "netns", "exec", "ns1"]`; empty:
/// the binary itself). `ip netns exec` replaces itself with the binary, so the child's
/// pid is the `fronta` process's.
pub fn fronta_in(wrapper: &[String], db: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = match wrapper.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(FRONTA);
            command
        }
        None => Command::new(FRONTA),
    };
    command
        .arg("--database")
        .arg(db)
        .env("RUST_LOG", "warn")
        .env("FRONTA_TEST_KINDS", "1");
    command
}

/// `url` with its host and port replaced by `address` (a URL through a proxy).
pub fn url_through(url: &str, address: std::net::SocketAddr) -> String {
    let scheme_end = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let user = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[..=at],
        None => "",
    };
    format!(
        "{}{user}{address}{}",
        &url[..scheme_end],
        &rest[authority_end..]
    )
}

/// The address of the Postgres server of the tests ([`pg::base_url`]).
pub async fn pg_upstream() -> std::net::SocketAddr {
    use std::str::FromStr;
    let options = sqlx::postgres::PgConnectOptions::from_str(&pg::base_url()).expect("a URL");
    let host = options.get_host().to_owned();
    let port = options.get_port();
    tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("resolve the Postgres host")
        .next()
        .expect("an address of the Postgres host")
}

/// `fronta enqueue <args>` on `db`; panics with its stderr when it fails.
pub fn enqueue(db: impl AsRef<std::ffi::OsStr>, args: &[&str]) {
    let output = fronta(db)
        .arg("enqueue")
        .args(args)
        .output()
        .expect("run fronta enqueue");
    assert!(
        output.status.success(),
        "enqueue {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A `fronta worker` writing probe lines to `log` and its stderr to `stderr`.
pub fn worker(db: impl AsRef<std::ffi::OsStr>, log: &Path, stderr: &Path, args: &[&str]) -> Child {
    let err = std::fs::File::create(stderr).expect("create the worker's stderr file");
    fronta(db)
        .arg("worker")
        .args(args)
        .env("FRONTA_PROBE_LOG", log)
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("start a worker process")
}

/// Send `signal` (`KILL`, `STOP`, `CONT`, `TERM`) to `pid` with kill(1).
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The `done` counter of a `sleep`/`steps` checkpoint (0 without one).
pub fn checkpoint_of(state: &Option<Vec<u8>>) -> u64 {
    state
        .as_deref()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(bytes).ok())
        .and_then(|value| value.get("done").and_then(serde_json::Value::as_u64))
        .unwrap_or(0)
}

/// Every run in the store, page by page (newest first).
pub async fn all_runs(store: &dyn RunStore) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut before = None;
    loop {
        let page = store
            .run_list(RunFilter {
                before,
                limit: RunFilter::MAX_PAGE,
                ..RunFilter::default()
            })
            .await
            .expect("list runs");
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        let full = page.len() == RunFilter::MAX_PAGE;
        runs.extend(page);
        if !full {
            break;
        }
    }
    runs
}

/// A SplitMix64 generator: kill gaps and victims, reproducible from the printed seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

/// One line of the `steps` kind's log.
#[derive(Debug, Clone)]
pub struct StepLine {
    pub event: String,
    pub step: u64,
    pub pid: u32,
    pub at: u128,
}

/// The `steps` lines of each run, in the order they were appended (one `write` each
/// with `O_APPEND`, so file order is the order of the writes). `probe` lines are
/// returned apart as (run → pids of its `start` lines).
pub fn read_log(log: &Path) -> (HashMap<String, Vec<StepLine>>, HashMap<String, Vec<u32>>) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut steps: HashMap<String, Vec<StepLine>> = HashMap::new();
    let mut probes: HashMap<String, Vec<u32>> = HashMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts.as_slice() {
            ["start", run, pid, _] => probes
                .entry((*run).to_owned())
                .or_default()
                .push(pid.parse().expect("pid")),
            ["end", _, _, _] => {}
            [event, run, step, pid, at] => {
                steps.entry((*run).to_owned()).or_default().push(StepLine {
                    event: (*event).to_owned(),
                    step: step.parse().expect("step"),
                    pid: pid.parse().expect("pid"),
                    at: at.parse().expect("nanos"),
                })
            }
            _ => panic!("a torn or unknown log line: {line:?}"),
        }
    }
    (steps, probes)
}

/// What [`check_steps`] found for one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct StepsFigures {
    /// Processes that executed the run (each claim that got as far as its first line).
    pub owners: usize,
    /// Steps started again after a crash (before their checkpoint was committed).
    pub repeated_steps: usize,
    /// Checkpoint writes of a stale owner refused by the store.
    pub refused: usize,
}

/// What [`check_taken_over`] found: checkpoints refused to A, and B's first line (ns).
pub struct TakenOver {
    pub refused: usize,
    pub first_b_line: u128,
}

/// The runs of worker A after worker B took them all over (the fencing and partition
/// harnesses): each reclaimed once with no attempt spent; each `steps` run under A then
/// B ([`check_steps`] over `total` steps), completed once and by B, A only stopped or
/// refused after B's first line, and B resumed from `resumed_from(run id)` (`resumed`
/// says which checkpoint that is); each `probe` started by A, then by B.
pub fn check_taken_over(
    runs: &[Run],
    log: &Path,
    total: u64,
    (a_pid, b_pid): (u32, u32),
    resumed_from: impl Fn(&str) -> u64,
    resumed: &str,
) -> TakenOver {
    let (steps_log, probes) = read_log(log);
    let mut found = TakenOver {
        refused: 0,
        first_b_line: u128::MAX,
    };
    for run in runs {
        assert_eq!(run.reclaims, 1, "run {}: one takeover, one reclaim", run.id);
        assert_eq!(run.attempts, 0, "run {}: no attempt spent", run.id);
        let key = run.id.to_string();
        if run.kind == "steps" {
            let lines = &steps_log[&key];
            let figures = check_steps(run, lines, total);
            assert_eq!(figures.owners, 2, "A then B: {lines:?}");
            found.refused += figures.refused;
            let done: Vec<u32> = lines
                .iter()
                .filter(|line| line.event == "done")
                .map(|line| line.pid)
                .collect();
            assert_eq!(done, vec![b_pid], "exactly one completion, by B: {lines:?}");
            let first_b = lines
                .iter()
                .position(|line| line.pid == b_pid)
                .expect("B ran");
            found.first_b_line = found.first_b_line.min(lines[first_b].at);
            assert!(
                lines[first_b..]
                    .iter()
                    .filter(|line| line.pid == a_pid)
                    .all(|line| line.event == "refused" || line.event == "stopped"),
                "after B took over A only stopped or was refused: {lines:?}"
            );
            assert_eq!(
                run.result.as_ref().expect("result")["resumedFrom"].as_u64(),
                Some(resumed_from(&key)),
                "{resumed}"
            );
        } else {
            assert_eq!(probes[&key], vec![a_pid, b_pid], "A started it, then B");
        }
    }
    found
}

/// The `steps` checker for one run whose final row is `run` (`total` steps):
/// - no step starts again once its checkpoint was committed (`saved`);
/// - committed steps come in strictly increasing order, each at most once;
/// - owners follow each other: once a later process has committed a step or started one,
///   an earlier process never commits again (a monotonic record of owners, no overlap);
/// - after a `done` line no step starts; the result's `by` is the last `done` line's pid;
/// - the row is completed with its checkpoint at `total`.
pub fn check_steps(run: &Run, lines: &[StepLine], total: u64) -> StepsFigures {
    let id = run.id;
    let (figures, done_by) = check_step_lines(&id.to_string(), lines);
    assert_eq!(
        run.status,
        fronta_engine::RunStatus::Completed,
        "run {id} completed: {:?}",
        run.last_error
    );
    assert_eq!(
        checkpoint_of(&run.state),
        total,
        "run {id}: checkpoint at the end"
    );
    let result = run.result.as_ref().expect("a steps run has a result");
    assert_eq!(result["steps"], total, "run {id}: {result}");
    assert_eq!(
        result["by"].as_u64(),
        done_by.map(u64::from),
        "run {id}: the completion came from the last process that finished it: {result}"
    );
    figures
}

/// The log half of [`check_steps`]: the figures and the pid of the last `done` line.
pub fn check_step_lines(id: &str, lines: &[StepLine]) -> (StepsFigures, Option<u32>) {
    let mut figures = StepsFigures::default();
    let mut saved: BTreeMap<u64, u32> = BTreeMap::new();
    let mut last_saved: Option<u64> = None;
    let mut owners: Vec<u32> = Vec::new();
    let mut started: BTreeMap<u64, usize> = BTreeMap::new();
    let mut done_by: Option<u32> = None;
    for line in lines {
        let current = owners.last().copied();
        if current != Some(line.pid) && line.event != "refused" && line.event != "stopped" {
            assert!(
                !owners.contains(&line.pid),
                "run {id}: process {} acts again after {current:?} took over: {lines:?}",
                line.pid
            );
            owners.push(line.pid);
        }
        match line.event.as_str() {
            "step" => {
                assert!(
                    !saved.contains_key(&line.step),
                    "run {id}: step {} ran again after its checkpoint: {lines:?}",
                    line.step
                );
                assert!(done_by.is_none(), "run {id}: a step after done: {lines:?}");
                let count = started.entry(line.step).or_default();
                *count += 1;
                if *count > 1 {
                    figures.repeated_steps += 1;
                }
            }
            "saved" => {
                assert!(
                    last_saved.is_none_or(|last| line.step > last),
                    "run {id}: step {} committed out of order or twice: {lines:?}",
                    line.step
                );
                assert_eq!(
                    owners.last(),
                    Some(&line.pid),
                    "run {id}: a commit by a process that is not the latest owner: {lines:?}"
                );
                last_saved = Some(line.step);
                saved.insert(line.step, line.pid);
            }
            // A stale owner's refused checkpoint, or a handler stopped (lease lost,
            // shutdown): they wrote nothing; the fencing harness checks them closely.
            "refused" | "stopped" => figures.refused += usize::from(line.event == "refused"),
            "done" => done_by = Some(line.pid),
            other => panic!("run {id}: unknown steps event {other:?}"),
        }
    }
    figures.owners = owners.len();
    (figures, done_by)
}

/// Log lines from `(event, step, pid)` triples, for the checker's own tests.
pub fn lines(events: &[(&str, u64, u32)]) -> Vec<StepLine> {
    events
        .iter()
        .enumerate()
        .map(|(at, (event, step, pid))| StepLine {
            event: (*event).to_owned(),
            step: *step,
            pid: *pid,
            at: at as u128,
        })
        .collect()
}

/// A `fronta serve` child for the tests that drive the API as a user would: calls with a
/// token, a tenant made with the admin token, waits for a state, and a clean SIGTERM.
pub struct ApiServer {
    pub child: Child,
    pub address: String,
    admin: String,
}

impl ApiServer {
    /// `fronta serve` on `database` with `admin` as its admin token ([`serve`]).
    pub fn start(database: &str, admin: &str) -> ApiServer {
        let (child, address) = serve(database, admin);
        ApiServer::of(child, address, admin)
    }

    /// [`ApiServer::start`] with more flags of `fronta serve`.
    pub fn start_with(database: &str, admin: &str, flags: &[&str]) -> ApiServer {
        let (child, address) = serve_with(database, admin, flags);
        ApiServer::of(child, address, admin)
    }

    /// A server started by the caller, listening on `address`.
    pub fn of(child: Child, address: String, admin: &str) -> ApiServer {
        ApiServer {
            child,
            address,
            admin: admin.to_owned(),
        }
    }

    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        call(&self.address, method, path, Some(token), body.as_ref())
    }

    /// A call that must succeed (2xx): its answer.
    pub fn ok(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let (status, reply) = self.call(method, path, token, body);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {reply}"
        );
        reply
    }

    /// A new tenant's token.
    pub fn tenant(&self, name: &str) -> String {
        let admin = self.admin.clone();
        let reply = self.ok(
            "POST",
            "/api/admin/tenants",
            &admin,
            Some(serde_json::json!({ "name": name })),
        );
        reply["token"].as_str().expect("a tenant token").to_owned()
    }

    /// Reads `path` until `done` holds, or panics after `deadline` with what it saw.
    pub fn until(
        &self,
        token: &str,
        path: &str,
        what: &str,
        deadline: std::time::Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let started = std::time::Instant::now();
        loop {
            let read = self.ok("GET", path, token, None);
            if done(&read) {
                return read;
            }
            assert!(
                started.elapsed() < deadline,
                "{path} never got {what}: {read}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// SIGTERM, and the exit must be clean.
    pub fn stop(mut self) {
        signal(self.child.id(), "TERM");
        let exit = self.child.wait().expect("the server exits");
        assert!(exit.success(), "a clean exit: {exit:?}");
    }
}

impl Drop for ApiServer {
    /// A test that panicked never stopped its server: it ends with the test.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `repros` against a `fronta serve` on a fresh SQLite file, then a clean stop.
pub fn on_sqlite(file: &str, admin: &str, repros: impl FnOnce(&ApiServer)) {
    on_sqlite_with(file, admin, &[], |server, _| repros(server));
}

/// `repros` against a `fronta serve` with `flags` on a fresh SQLite file, handed the
/// server and the database (for the command line), then a clean stop.
pub fn on_sqlite_with(
    file: &str,
    admin: &str,
    flags: &[&str],
    repros: impl FnOnce(&ApiServer, &str),
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = dir.path().join(file).to_string_lossy().into_owned();
    let server = ApiServer::start_with(&database, admin, flags);
    repros(&server, &database);
    server.stop();
}

/// `repros` against a `fronta serve` on a fresh Postgres database, then a clean stop.
pub async fn on_postgres(admin: &'static str, repros: impl FnOnce(&ApiServer) + Send + 'static) {
    on_postgres_with(admin, &[], |server, _| repros(server)).await;
}

/// [`on_sqlite_with`] on a fresh Postgres database.
pub async fn on_postgres_with(
    admin: &'static str,
    flags: &'static [&'static str],
    repros: impl FnOnce(&ApiServer, &str) + Send + 'static,
) {
    let db = pg::TestDb::create().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let server = ApiServer::start_with(&url, admin, flags);
        repros(&server, &url);
        server.stop();
    })
    .await
    .expect("the repros ran");
}

/// A run's (or a dry run's) step log, one `name status: message` line per step.
pub fn step_lines(run: &serde_json::Value) -> Vec<String> {
    run["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("a step log: {run}"))
        .iter()
        .map(|line| {
            format!(
                "{} {}: {}",
                line["name"].as_str().unwrap_or(""),
                line["status"].as_str().unwrap_or(""),
                line["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}
