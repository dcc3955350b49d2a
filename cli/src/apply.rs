//! `fronta apply -f setup.json`: send a whole setup (groups with members, ticket types,
//! automations — API.md's `POST /api/apply` body) to a running `fronta serve` as a tenant,
//! and print what was created, updated or left unchanged. Idempotent by names, like the
//! route; a refused setup prints the server's problems and exits non-zero, writing nothing.
//! The server is reached over plain HTTP or HTTPS (`crate::api_client`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::Value;

use crate::api_client::ApiClient;

#[derive(Args, Debug, Clone)]
pub struct ApplyArgs {
    /// The setup file (JSON).
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// The server: HOST:PORT (plain HTTP), http://HOST:PORT or https://HOST[:PORT] (a
    /// path after the host is kept as a prefix, for a server behind a proxy).
    #[arg(long, env = "FRONTA_SERVER", default_value = "127.0.0.1:8080")]
    server: String,
    /// The tenant's API token.
    #[arg(long, env = "FRONTA_TOKEN", hide_env_values = true)]
    token: String,
}

pub async fn run(args: ApplyArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let setup: Value = serde_json::from_str(&text)
        .map_err(|err| anyhow::anyhow!("{} is not valid JSON: {err}", args.file.display()))?;
    let client = ApiClient::new(&args.server).context("--server")?;
    let answer = client
        .call("POST", "/api/apply", Some(&args.token), Some(&setup))
        .await?;
    let body = answer.json();
    if !(200..300).contains(&answer.status) {
        let message = body["error"]["message"].as_str().unwrap_or("no message");
        let problems = body["error"]["problems"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|problem| {
                        format!(
                            "{}: {}",
                            problem["path"].as_str().unwrap_or("?"),
                            problem["message"].as_str().unwrap_or("?")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .filter(|joined| !joined.is_empty())
            .map(|joined| format!(" — {joined}"))
            .unwrap_or_default();
        bail!(
            "the server refused the setup ({}): {message}{problems}",
            answer.status
        );
    }
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(())
}
