//! A small application embedding fronta, as seed 002 describes it: its own `users`
//! table, two kinds of work, an enqueue inside the same transaction as the business
//! write, and a worker — once on SQLite, once on Postgres, with the same handlers and the
//! same command handler ([`enqueue_welcome`] takes any store's `AppTransaction`).
//!
//! - `welcome:send` ([`WelcomeMail`], fire-and-forget): enqueued by [`sign_up_sqlite`] /
//!   [`sign_up_postgres`] in the transaction that inserts the user, so a rolled-back
//!   sign-up sends nothing.
//! - `import:bulk` ([`BulkImport`], durable): imports its rows in batches and checkpoints
//!   after each; interrupted (here on purpose, once, after [`Effects::interrupt_after`]
//!   batches), it resumes from its last checkpoint and never does a batch twice.
//!
//! `cargo run -p fronta-examples -- sqlite app.db` or `-- postgres postgres://…/db` runs
//! [`run_app`] and prints what happened; `examples/tests/app.rs` runs it on both stores
//! and checks it.
//!
//! Left out: HTTP. The application's command handlers would be its own routes; the
//! engine does not care where they come from.

/// The README's library section, compiled as a doc-test.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeLibrarySection;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fronta_engine::{
    AppTransaction, Dispatcher, EngineError, Enqueued, Job, KindConfig, Outcome, Registry, Run,
    RunContext, RunFilter, RunStore, Worker, WorkerConfig,
};
use fronta_store_postgres::{PgConfig, PgStore};
use fronta_store_sqlite::{SqliteConfig, SqliteStore};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The welcome mail of a new user (fire-and-forget: short, idempotent, no checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WelcomeMail {
    pub user_id: i64,
    pub email: String,
}

impl Job for WelcomeMail {
    const KIND: &'static str = "welcome:send";
}

/// A bulk import of `batches` batches (durable: a lease of its own, checkpoints,
/// resumes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkImport {
    pub batches: u32,
}

impl Job for BulkImport {
    const KIND: &'static str = "import:bulk";
    const MAX_RETRIES: u32 = 5;
}

/// What the handlers did, for the caller to see (a real application would send mail and
/// write rows).
#[derive(Debug, Clone, Default)]
pub struct Effects {
    /// The addresses welcomed, in order.
    pub mails: Arc<Mutex<Vec<String>>>,
    /// The batches imported, in order.
    pub batches: Arc<Mutex<Vec<u32>>>,
    /// Interrupt the import once after this many batches of an attempt (0: never): the
    /// handler answers `Retry` as a deploy or a crash would end it, and the next attempt
    /// resumes from the checkpoint.
    pub interrupt_after: Arc<AtomicU32>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The application's kinds and their handlers.
pub fn registry(effects: &Effects) -> Result<Registry, EngineError> {
    let mut registry = Registry::new();
    let mails = effects.mails.clone();
    registry.register_job(
        KindConfig::fire_and_forget(Duration::from_secs(30)),
        move |mail: WelcomeMail, _ctx: RunContext| {
            let mails = mails.clone();
            async move {
                lock(&mails).push(mail.email);
                Outcome::done()
            }
        },
    )?;
    let effects = effects.clone();
    registry.register_job(
        KindConfig::durable(Duration::from_secs(30), Duration::from_secs(3600)),
        move |import: BulkImport, ctx: RunContext| import_batches(import, ctx, effects.clone()),
    )?;
    Ok(registry)
}

/// The durable handler: resumes after the last checkpointed batch, checkpoints after
/// each one, stops when its signal fires.
async fn import_batches(import: BulkImport, ctx: RunContext, effects: Effects) -> Outcome {
    let first = match ctx.run.state.as_deref() {
        Some(bytes) => match <[u8; 4]>::try_from(bytes) {
            Ok(next) => u32::from_le_bytes(next),
            Err(_) => return Outcome::Fail(format!("a checkpoint of {} bytes", bytes.len())),
        },
        None => 0,
    };
    let mut done_now = 0;
    for batch in first..import.batches {
        if ctx.signal.is_stopped() {
            return Outcome::Retry {
                after: None,
                reason: "stopped between two batches".into(),
            };
        }
        lock(&effects.batches).push(batch);
        if ctx
            .checkpointer
            .save((batch + 1).to_le_bytes().to_vec())
            .await
            .is_err()
        {
            // Another owner has the run: stop and write nothing more.
            return Outcome::Retry {
                after: None,
                reason: "lease lost".into(),
            };
        }
        done_now += 1;
        let interrupt_after = effects.interrupt_after.load(Ordering::SeqCst);
        if done_now == interrupt_after
            && effects
                .interrupt_after
                .compare_exchange(interrupt_after, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Outcome::Retry {
                after: Some(Duration::ZERO),
                reason: format!("interrupted after batch {batch}"),
            };
        }
    }
    Outcome::Done(Some(serde_json::json!({ "batches": import.batches })))
}

/// The command handler's enqueue, written once for every store: the welcome mail of
/// `user_id`, inside the caller's transaction.
pub async fn enqueue_welcome(
    dispatcher: &Dispatcher,
    tx: &mut dyn AppTransaction,
    user_id: i64,
    email: &str,
) -> Result<Enqueued, EngineError> {
    let mail = WelcomeMail {
        user_id,
        email: email.to_owned(),
    };
    dispatcher.enqueue_job_tx(tx, &mail).await
}

/// Sign a user up on SQLite: the user's row and the welcome mail's run in one
/// transaction of the application's own connection; `commit: false` rolls it back.
pub async fn sign_up_sqlite(
    store: &SqliteStore,
    conn: &mut fronta_store_sqlite::rusqlite::Connection,
    dispatcher: &Dispatcher,
    email: &str,
    commit: bool,
) -> anyhow::Result<i64> {
    let tx = conn.transaction()?;
    tx.execute("INSERT INTO users (email) VALUES (?1)", [email])?;
    let user_id = tx.last_insert_rowid();
    enqueue_welcome(
        dispatcher,
        &mut fronta_store_sqlite::AppTx::new(store, &tx),
        user_id,
        email,
    )
    .await?;
    if commit {
        tx.commit()?;
        store.wake_workers();
    } else {
        tx.rollback()?;
    }
    Ok(user_id)
}

/// Sign a user up on Postgres: the same, on a transaction of the application's pool.
pub async fn sign_up_postgres(
    store: &PgStore,
    pool: &fronta_store_postgres::sqlx::PgPool,
    dispatcher: &Dispatcher,
    email: &str,
    commit: bool,
) -> anyhow::Result<i64> {
    use fronta_store_postgres::sqlx;
    let mut tx = pool.begin().await?;
    let user_id: i64 = sqlx::query_scalar("INSERT INTO users (email) VALUES ($1) RETURNING id")
        .bind(email)
        .fetch_one(&mut *tx)
        .await?;
    enqueue_welcome(
        dispatcher,
        &mut fronta_store_postgres::AppTx::new(store, &mut tx),
        user_id,
        email,
    )
    .await?;
    if commit {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(user_id)
}

/// What [`run_app`] saw.
#[derive(Debug)]
pub struct Report {
    /// Users in the application's table.
    pub users: Vec<String>,
    pub mails: Vec<String>,
    pub batches: Vec<u32>,
    /// Every run in the store, newest first.
    pub runs: Vec<Run>,
}

/// Where [`run_app`] keeps its data.
#[derive(Debug, Clone)]
pub enum Database {
    Sqlite(std::path::PathBuf),
    Postgres(String),
}

/// The whole recipe: open the store, make the `users` table, sign up `ada` (committed)
/// and `bob` (rolled back), enqueue an import of 10 batches that is interrupted once
/// after 4, run a worker until nothing is left, and report.
pub async fn run_app(database: &Database) -> anyhow::Result<Report> {
    let effects = Effects::default();
    effects.interrupt_after.store(4, Ordering::SeqCst);
    let registry = Arc::new(registry(&effects)?);
    let (store, users): (Arc<dyn RunStore>, Vec<String>) = match database {
        Database::Sqlite(path) => {
            let store = SqliteStore::open(SqliteConfig::new(path))?;
            let mut conn = store.open_app_connection()?;
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE)",
            )?;
            let dispatcher = Dispatcher::from_registry(Arc::new(store.clone()), &registry);
            sign_up_sqlite(&store, &mut conn, &dispatcher, "ada@example.com", true).await?;
            sign_up_sqlite(&store, &mut conn, &dispatcher, "bob@example.com", false).await?;
            let users = conn
                .prepare("SELECT email FROM users ORDER BY id")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            (Arc::new(store), users)
        }
        Database::Postgres(url) => {
            use fronta_store_postgres::sqlx;
            let store = PgStore::connect(PgConfig::new(url.clone())).await?;
            let pool = sqlx::PgPool::connect(url).await?;
            sqlx::query(
                "CREATE TABLE IF NOT EXISTS users (id BIGSERIAL PRIMARY KEY, email TEXT NOT NULL UNIQUE)",
            )
            .execute(&pool)
            .await?;
            let dispatcher = Dispatcher::from_registry(Arc::new(store.clone()), &registry);
            sign_up_postgres(&store, &pool, &dispatcher, "ada@example.com", true).await?;
            sign_up_postgres(&store, &pool, &dispatcher, "bob@example.com", false).await?;
            let users = sqlx::query_scalar("SELECT email FROM users ORDER BY id")
                .fetch_all(&pool)
                .await?;
            pool.close().await;
            (Arc::new(store), users)
        }
    };
    let dispatcher = Dispatcher::from_registry(store.clone(), &registry);
    dispatcher.enqueue_job(&BulkImport { batches: 10 }).await?;
    let config = WorkerConfig {
        until_idle: true,
        poll_interval: Duration::from_millis(50),
        ..WorkerConfig::default()
    };
    Worker::new(store.clone(), registry, config)?
        .run(CancellationToken::new())
        .await?;
    let runs = store.run_list(RunFilter::default()).await?;
    Ok(Report {
        users,
        mails: lock(&effects.mails).clone(),
        batches: lock(&effects.batches).clone(),
        runs,
    })
}
