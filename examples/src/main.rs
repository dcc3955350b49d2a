//! `fronta-examples sqlite PATH | postgres URL`: runs the example application
//! ([`fronta_examples::run_app`]) and prints what happened.

use fronta_examples::{Database, run_app};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let database = match args.as_slice() {
        [store, path] if store == "sqlite" => Database::Sqlite(path.into()),
        [store, url] if store == "postgres" => Database::Postgres(url.clone()),
        _ => {
            eprintln!("usage: fronta-examples sqlite PATH | postgres URL");
            return std::process::ExitCode::from(2);
        }
    };
    match report(&database).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn report(database: &Database) -> anyhow::Result<()> {
    let report = run_app(database).await?;
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
