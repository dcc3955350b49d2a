//! The real `fronta serve` binary, on SQLite and on a fresh Postgres database, replays
//! the seed's verified scenario over real HTTP: `fronta demo --server HOST:PORT` runs the
//! demo's checks (setup by `POST /api/apply`, orders by webhook routed to two warehouse
//! people, a converter error to IT with an incident, the refusals, metrics, OpenAPI)
//! against it, and every check passes; then the server stops cleanly on SIGTERM.

mod support;

use std::process::{Child, Command};

const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");
const ADMIN: &str = "fa_end_to_end_admin";

/// `fronta serve` on `database` and the address it listens on.
fn serve(database: &str) -> (Child, String) {
    support::serve(database, ADMIN)
}

/// The demo's checks against `address`; panics with the report when one fails.
fn scenario_passes(address: &str) {
    let output = Command::new(FRONTA)
        .args(["demo", "--server", address])
        .env("FRONTA_ADMIN_TOKEN", ADMIN)
        .env("RUST_LOG", "warn")
        .output()
        .expect("fronta demo runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "every check passes:\n{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let passed = text
        .lines()
        .filter(|line| line.starts_with("  ok "))
        .count();
    assert!(passed >= 19, "at least 19 checks, got {passed}:\n{text}");
    assert!(!text.contains("FAIL"), "no check failed:\n{text}");
}

fn stop(mut child: Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "SIGTERM sent");
    let exit = child.wait().expect("the server exits");
    assert!(exit.success(), "a clean exit after SIGTERM: {exit:?}");
}

#[test]
fn the_seed_scenario_passes_against_fronta_serve_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = dir.path().join("e2e.db");
    let (child, address) = serve(&database.to_string_lossy());
    scenario_passes(&address);
    stop(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scenario_passes_against_fronta_serve_on_postgres() {
    let db = support::pg::TestDb::create().await;
    let url = db.url.clone();
    tokio::task::spawn_blocking(move || {
        let (child, address) = serve(&url);
        scenario_passes(&address);
        stop(child);
    })
    .await
    .expect("the scenario ran");
}
