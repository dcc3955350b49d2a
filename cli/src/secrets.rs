//! `fronta secrets reseal`: every stored secret of every tenant sealed again with the
//! current key version, on the database directly (like `migrate` and `runs`), so that the
//! old keys can then be dropped from `FRONTA_SECRET_OLD_KEYS`.
//!
//! The walk and the rule are `fronta_automation::secrets::reseal_all` and `reseal`: in
//! batches of `--batch`, each value replaced by a compare-and-set (a value a server writes
//! meanwhile is kept: it was sealed with the server's current key), so it is safe while
//! servers run, and running it again does nothing more. It prints a line per batch and a
//! final count; values it cannot open (their key is not configured, or they are damaged)
//! are named (tenant, secret) and make it exit non-zero. No value or key is ever printed.
//!
//! Only tenant secrets are sealed at rest: mail and MCP servers hold `{{secrets.<name>}}`
//! references, not values; webhook tokens and signing secrets are not sealed (a token is
//! shown again in its URL), so there is nothing of theirs to re-seal.

use anyhow::{anyhow, bail};
use clap::{Args, Subcommand};
use fronta_automation::secrets::{ResealCount, SecretCipher, reseal_all};
use fronta_connectors::Keyring;

use crate::DbArgs;
use crate::connector_settings::{Secret, secret};

#[derive(Subcommand, Debug)]
pub(crate) enum SecretsCommand {
    /// Seal every stored secret again with the current key version (FRONTA_SECRET_KEY,
    /// FRONTA_SECRET_KEY_VERSION), opening each with its own version's key
    /// (FRONTA_SECRET_OLD_KEYS); afterwards the old keys can be dropped. Safe while
    /// servers run; running it again does nothing more.
    Reseal(ResealArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ResealArgs {
    /// Base64 of 32 bytes: the current key. Prefer the variable: a flag shows in `ps`.
    #[arg(long, env = "FRONTA_SECRET_KEY", hide_env_values = true, value_name = "BASE64", value_parser = secret)]
    secret_key: Option<Secret>,
    /// The current key's version: what every secret is sealed with afterwards.
    #[arg(
        long,
        env = "FRONTA_SECRET_KEY_VERSION",
        default_value = "1",
        value_name = "N"
    )]
    secret_key_version: String,
    /// `version:base64,…`: the older keys the stored secrets were sealed with.
    #[arg(long, env = "FRONTA_SECRET_OLD_KEYS", hide_env_values = true, value_name = "LIST", value_parser = secret)]
    secret_old_keys: Option<Secret>,
    /// Secrets read and written per batch.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
}

pub(crate) async fn run(db: &DbArgs, command: SecretsCommand) -> anyhow::Result<()> {
    match command {
        SecretsCommand::Reseal(args) => reseal(db, args).await,
    }
}

async fn reseal(db: &DbArgs, args: ResealArgs) -> anyhow::Result<()> {
    let Some(key) = &args.secret_key else {
        bail!("FRONTA_SECRET_KEY (--secret-key) is not set: there is no current key to seal with");
    };
    let keyring = Keyring::from_config(
        key.expose(),
        Some(&args.secret_key_version),
        args.secret_old_keys.as_ref().map(Secret::expose),
    )
    .map_err(|err| anyhow!("{err}"))?;
    let version = keyring.current_version();
    let store = crate::open_store(db, "fronta-secrets").await?;
    let secrets = store.secrets();
    println!(
        "resealing every stored secret with key version {version} (configured: {:?}), {} at a time",
        keyring.versions(),
        args.batch
    );
    // The operator's change: one audit entry, written with the first secret resealed.
    let scope = crate::access::cli_scope(
        "secrets reseal",
        "secret",
        None,
        "Re-seal every stored secret with the current key",
    );
    scope.detail(format!("to key version {version}"));
    let walk = reseal_all(secrets.as_ref(), &keyring, args.batch, |count| {
        println!(
            "  {} read: {} resealed, {} already on version {version}, {} failed",
            count.seen,
            count.resealed,
            count.current + count.changed,
            count.failed.len()
        );
    });
    let count = fronta_engine::audit::scoped(scope, walk)
        .await
        .map_err(|err| anyhow!("reading or writing the secrets failed: {err}"))?;
    report(&count, version)
}

/// The final count, and every secret that could not be opened.
fn report(count: &ResealCount, version: u32) -> anyhow::Result<()> {
    println!(
        "resealed {} of {} secrets; {} already on version {version}",
        count.resealed,
        count.seen,
        count.current + count.changed
    );
    if count.failed.is_empty() {
        return Ok(());
    }
    for (tenant, name, err) in &count.failed {
        eprintln!("  tenant {tenant}, secret {name:?}: {err}");
    }
    bail!(
        "{} secrets could not be opened and were left as they are: configure their key \
         version in FRONTA_SECRET_OLD_KEYS and run this again",
        count.failed.len()
    )
}
