//! `fronta-examples sqlite PATH | postgres URL`: runs the example application
//! ([`fronta_examples::run_app`]) and prints what happened.

use fronta_examples::{Database, run_app};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let database = match args.as_slice() {
        [store, path] if store == "sqlite" => Database::Sqlite(path.into()),
        [store, url] if store == "postgres" => Database::Postgres(url.clone()),
        _ => anyhow::bail!("usage: fronta-examples sqlite PATH | postgres URL"),
    };
    let report = run_app(&database).await?;
    println!("users: {}", report.users.join(", "));
    println!("welcome mails sent: {}", report.mails.join(", "));
    println!("import batches done: {:?}", report.batches);
    for run in &report.runs {
        println!(
            "run {} {}: {:?}, {} attempts{}",
            run.id,
            run.kind,
            run.status,
            run.attempts,
            run.last_error
                .as_deref()
                .map(|error| format!(", last error: {error}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
