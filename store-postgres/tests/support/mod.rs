//! Test databases on a real Postgres server: each call makes a fresh database named
//! `fronta_test_<unix seconds>_<random>`, so tests running in parallel share nothing.
//!
//! The server comes from `FRONTA_TEST_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`); the role must be allowed to
//! `CREATE DATABASE`. An unreachable server fails the test with a message saying so —
//! never a silent skip. Databases are dropped (`WITH (FORCE)`) when their [`TestDb`] is
//! dropped; ones left behind by killed runs are dropped by the first test of a later run
//! once they are an hour old (the creation time is in the name).

#![allow(dead_code)] // each test binary uses a different part

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fronta_engine::Clock;
use fronta_store_postgres::{PgConfig, PgStore};
use sqlx::postgres::PgConnectOptions;
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgConnection};

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const PREFIX: &str = "fronta_test_";
/// Leftover test databases older than this are dropped.
const STALE_AFTER: Duration = Duration::from_secs(3600);

static SWEPT: AtomicBool = AtomicBool::new(false);

/// The server's admin URL: `FRONTA_TEST_DATABASE_URL` or [`DEFAULT_URL`].
pub fn base_url() -> String {
    std::env::var("FRONTA_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned())
}

/// `url` with its database name replaced by `database`.
pub fn url_with_database(url: &str, database: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |at| at + 3);
    let (head, query) = match url.find('?') {
        Some(at) => (&url[..at], &url[at..]),
        None => (url, ""),
    };
    let authority_end = head[scheme_end..]
        .find('/')
        .map_or(head.len(), |at| scheme_end + at);
    format!("{}/{database}{query}", &head[..authority_end])
}

async fn admin_connection(url: &str) -> PgConnection {
    let options = PgConnectOptions::from_str(url).unwrap_or_else(|err| {
        panic!("FRONTA_TEST_DATABASE_URL {url:?} is not a Postgres URL: {err}")
    });
    match options.connect().await {
        Ok(conn) => conn,
        Err(err) => panic!(
            "cannot reach the Postgres test server at {}: {err}\n\
             These tests need a running PostgreSQL (13 or later) and a role that may CREATE \
             DATABASE. Start one on 127.0.0.1:5432 (user `postgres`, trust auth), or point \
             the tests at yours: FRONTA_TEST_DATABASE_URL=postgres://user:password@host:port/postgres",
            fronta_store_postgres::redact(url)
        ),
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| since.as_secs())
        .unwrap_or(0)
}

/// Drop test databases left behind by earlier runs (once per test binary).
async fn sweep_stale(admin: &mut PgConnection) {
    if SWEPT.swap(true, Ordering::SeqCst) {
        return;
    }
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'fronta\\_test\\_%'",
    )
    .fetch_all(&mut *admin)
    .await
    .expect("list test databases");
    let now = unix_now();
    for name in names {
        let created = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('_').next())
            .and_then(|secs| secs.parse::<u64>().ok());
        if created.is_some_and(|created| now.saturating_sub(created) > STALE_AFTER.as_secs()) {
            let _ = sqlx::query(AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
            )))
            .execute(&mut *admin)
            .await;
        }
    }
}

/// A fresh database, dropped with this value.
pub struct TestDb {
    pub name: String,
    pub url: String,
    admin_url: String,
}

impl TestDb {
    pub async fn create() -> Self {
        let admin_url = base_url();
        let mut admin = admin_connection(&admin_url).await;
        sweep_stale(&mut admin).await;
        let name = format!("{PREFIX}{}_{}", unix_now(), uuid::Uuid::new_v4().simple());
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|err| panic!("cannot create test database {name}: {err}"));
        let _ = admin.close().await;
        Self {
            url: url_with_database(&admin_url, &name),
            name,
            admin_url,
        }
    }

    pub fn config(&self, clock: Option<Arc<dyn Clock>>) -> PgConfig {
        let mut config = PgConfig::new(self.url.clone());
        config.max_connections = 8;
        config.clock = clock;
        config
    }

    pub async fn store(&self, clock: Option<Arc<dyn Clock>>) -> PgStore {
        PgStore::connect(self.config(clock))
            .await
            .unwrap_or_else(|err| panic!("a PgStore connects to {}: {err}", self.name))
    }

    /// A plain connection to this database.
    pub async fn connection(&self) -> PgConnection {
        admin_connection(&self.url).await
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // Drop runs inside the test's runtime: do the async work on a thread of its own.
        let name = self.name.clone();
        let admin_url = self.admin_url.clone();
        let dropper = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(options) = PgConnectOptions::from_str(&admin_url) else {
                    return;
                };
                if let Ok(mut admin) = options.connect().await {
                    let _ = sqlx::query(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                    )))
                    .execute(&mut admin)
                    .await;
                    let _ = admin.close().await;
                }
            });
        });
        let _ = dropper.join();
    }
}

#[test]
fn url_with_database_replaces_only_the_database() {
    assert_eq!(
        url_with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "x"),
        "postgres://u:p@h:5432/x?sslmode=disable",
        "path replaced, query kept"
    );
    assert_eq!(
        url_with_database("postgres://u@h", "x"),
        "postgres://u@h/x",
        "a URL without a database gets one"
    );
}
