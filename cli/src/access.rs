//! The operator's admin tokens on the database (`fronta admin-token new|list|revoke`),
//! and the audit scope of the commands that change something by hand.
//!
//! Admin tokens made here open the admin routes of every `fronta serve` on the same
//! database at once (each request looks its hash up), beside the configured one; a
//! revoked one is refused at the next request. The secret is printed once; only its hash
//! is stored. Every command that writes runs in an audit scope (`fronta_engine::audit`)
//! whose actor is the CLI (`fronta admin-token new`), so its entry commits with the change.

use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;
use fronta_engine::audit::{self, Actor, Scope};

use crate::{DbArgs, open_store};

/// `fronta admin-token …`.
#[derive(Subcommand, Debug)]
pub(crate) enum AdminTokenCommand {
    /// Make a named admin token and print it (once: only its hash is kept).
    New {
        /// A name to tell it by in lists and the audit log (unique).
        name: String,
    },
    /// The admin tokens: id, name, when made, when last used (never the secrets).
    List {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an admin token by its name or id: refused from the next request on.
    Revoke {
        /// The token's name or id.
        token: String,
    },
}

/// An audit scope for the CLI command `command` (`admin-token new`) about an object of
/// `kind` (its id when known), described by `summary`.
pub(crate) fn cli_scope(
    command: &str,
    kind: &str,
    id: Option<String>,
    summary: &str,
) -> Arc<Scope> {
    let scope = Scope::new("CLI", &format!("fronta {command}"), kind, id, summary, None);
    scope.set_actor(
        Actor::Cli {
            command: command.to_owned(),
        },
        None,
    );
    scope
}

pub(crate) async fn admin_token(db: &DbArgs, command: AdminTokenCommand) -> anyhow::Result<()> {
    let store = open_store(db, "fronta-admin-token").await?;
    let access = store.access();
    match command {
        AdminTokenCommand::New { name } => {
            let scope = cli_scope(
                "admin-token new",
                "admin-token",
                None,
                "Make an admin token",
            );
            scope.detail(format!("{name:?}"));
            let (row, secret) = audit::scoped(scope, access.admin_token_create(&name))
                .await
                .with_context(|| format!("admin token {name:?}"))?;
            println!("{secret}");
            eprintln!(
                "admin token {:?} made (id {}): shown once, keep it now; every server on this \
                 database takes it from the next request",
                row.name, row.id
            );
        }
        AdminTokenCommand::List { json } => {
            let tokens = access.admin_token_list().await?;
            if json {
                let rows: Vec<serde_json::Value> = tokens
                    .iter()
                    .map(|token| {
                        serde_json::json!({
                            "id": token.id.to_string(),
                            "name": token.name,
                            "createdAt": token.created_at,
                            "lastUsedAt": token.last_used_at,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if tokens.is_empty() {
                println!("no admin tokens in the database (the configured one is not listed)");
            } else {
                println!("{:<36}  {:<24}  {:<24}  last used", "id", "name", "made");
                for token in tokens {
                    println!(
                        "{:<36}  {:<24}  {:<24}  {}",
                        token.id,
                        token.name,
                        crate::when(Some(token.created_at)),
                        crate::when(token.last_used_at),
                    );
                }
            }
        }
        AdminTokenCommand::Revoke { token } => {
            let scope = cli_scope(
                "admin-token revoke",
                "admin-token",
                None,
                "Revoke an admin token",
            );
            let scope_for_id = scope.clone();
            let revoked = audit::scoped(scope, async {
                // The entry names the token by id, whether it was given by name or id.
                let found = access
                    .admin_token_list()
                    .await?
                    .into_iter()
                    .find(|row| row.name == token || row.id.to_string() == token);
                if let Some(found) = &found {
                    scope_for_id.set_created(&found.id);
                    scope_for_id.detail(format!("{:?}", found.name));
                }
                access.admin_token_revoke(&token).await
            })
            .await
            .map_err(|err| match err {
                fronta_desk::DeskError::NotFound(_) => {
                    anyhow::anyhow!("no admin token called {token:?} (or with that id)")
                }
                other => other.into(),
            })?;
            println!("revoked admin token {:?} ({})", revoked.name, revoked.id);
        }
    }
    Ok(())
}
