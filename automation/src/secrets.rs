//! Per-tenant secrets: the [`SecretStore`] port (sealed values at rest), the
//! [`SecretCipher`] port (sealing with a configured key; implemented outside this crate,
//! by `fronta-connectors`), [`SecretVault`] which reveals the secrets one step names at
//! call time, and [`Revealed`], which scrubs revealed values from anything that is
//! written down afterwards.
//!
//! Where a secret may go, and where never: a template `{{secrets.<name>}}` is allowed only
//! in a connector step's input (the validator refuses it elsewhere). The executor renders
//! that input with the revealed values layered over the run context ([`WithSecrets`]) and
//! hands it to the connector; the run context, the checkpoint, the step log, incidents
//! and API answers only ever hold the template as written or `[secret <name>]` (what the
//! connector answers is scrubbed before it is kept). Logs never carry a value.
//!
//! Left out: the cipher itself (no cryptography here) and storage (no SQL here).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::{DeskError, TenantId};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::context::Context;
use crate::retry::Cause;
use crate::steps::StepError;
use crate::store::StoreResult;
use crate::template::{self, Lookup};

/// The context name secrets are read under: `{{secrets.<name>}}`.
pub const SECRETS_KEY: &str = "secrets";
/// The longest secret name.
pub const MAX_SECRET_NAME: usize = 100;
/// The largest secret value, in bytes (a key, a token, a certificate fits).
pub const MAX_SECRET_VALUE: usize = 16 * 1024;

/// Checks a secret's name: 1 to [`MAX_SECRET_NAME`] characters of `A-Z a-z 0-9 _ -`,
/// so it reads as one word in `{{secrets.<name>}}`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SECRET_NAME {
        return Err(format!(
            "a secret's name has 1 to {MAX_SECRET_NAME} characters"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "secret name {name:?} may hold only letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

/// Checks a secret's value (never echoed in the message).
pub fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("a secret's value cannot be empty".to_owned());
    }
    if value.len() > MAX_SECRET_VALUE {
        return Err(format!(
            "a secret's value is at most {MAX_SECRET_VALUE} bytes"
        ));
    }
    Ok(())
}

/// A secret as stored: the ciphertext, its nonce and the version of the key that sealed
/// it (so a key can be rotated while older values stay readable).
#[derive(Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub key_version: u32,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for SealedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedSecret")
            .field("key_version", &self.key_version)
            .field("bytes", &self.ciphertext.len())
            .finish()
    }
}

/// What may be shown of a secret: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretInfo {
    pub name: String,
    pub key_version: u32,
    pub updated_at: DateTime<Utc>,
}

/// Sealed secrets per tenant.
///
/// # Contract
///
/// - Every method is scoped by tenant; another tenant's secret answers exactly like one
///   that does not exist. A write for an unknown tenant is `NotFound`.
/// - `secret_put` creates the secret or replaces its sealed value and key version, and
///   sets `updated_at` to the store's now; it answers the secret's [`SecretInfo`].
/// - `secret_list` answers the tenant's secrets ordered by name; no value.
/// - `secrets_get` answers the sealed values of those of `names` that exist (in name
///   order); a missing name is simply absent.
/// - `secret_delete` removes the secret; `NotFound` when there is none.
/// - `secrets_page` answers every tenant's secrets after `after` (`(tenant, name)`,
///   exclusive; `None`: from the start) in `(tenant, name)` order, at most `limit`: the
///   walk of a re-seal ([`reseal_all`]), the port's only cross-tenant read.
/// - `secret_reseal` replaces the sealed value of the tenant's `name` by `to` only while
///   it still is `from` (same key version, nonce and ciphertext) and answers whether it
///   did: a value written meanwhile is kept. `updated_at` stays (the value is the same).
/// - Stores keep the bytes exactly as given and never log them.
#[async_trait]
pub trait SecretStore: Send + Sync + 'static {
    async fn secret_put(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: SealedSecret,
    ) -> StoreResult<SecretInfo>;
    async fn secret_list(&self, tenant: TenantId) -> StoreResult<Vec<SecretInfo>>;
    async fn secrets_get(
        &self,
        tenant: TenantId,
        names: &[String],
    ) -> StoreResult<Vec<(String, SealedSecret)>>;
    async fn secret_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()>;
    async fn secrets_page(
        &self,
        after: Option<(TenantId, String)>,
        limit: u32,
    ) -> StoreResult<Vec<StoredSecret>>;
    async fn secret_reseal(
        &self,
        tenant: TenantId,
        name: &str,
        from: &SealedSecret,
        to: SealedSecret,
    ) -> StoreResult<bool>;
}

/// One stored secret as a re-seal walks them: whose, which, and its sealed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSecret {
    pub tenant: TenantId,
    pub name: String,
    pub sealed: SealedSecret,
}

/// What a re-seal does with one stored secret ([`reseal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reseal {
    /// Sealed with the current key already: nothing to write.
    Current,
    /// Opened with its old key and sealed again with the current one: write this.
    Sealed(SealedSecret),
    /// It cannot be opened (its key is not configured, or the value is damaged): it is
    /// left as it is and reported.
    Failed(SecretError),
}

/// The re-seal of one stored secret with `cipher`'s current key: nothing when it is on
/// the current version already; else opened with its own version's key and sealed
/// again (the value is held only for that moment).
pub fn reseal(cipher: &dyn SecretCipher, secret: &StoredSecret) -> Reseal {
    if secret.sealed.key_version == cipher.current_version() {
        return Reseal::Current;
    }
    let sealed = cipher
        .open(secret.tenant, &secret.name, &secret.sealed)
        .and_then(|value| cipher.seal(secret.tenant, &secret.name, &value));
    match sealed {
        Ok(sealed) => Reseal::Sealed(sealed),
        Err(err) => Reseal::Failed(err),
    }
}

/// Where a re-seal of every stored secret stands ([`reseal_all`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResealCount {
    /// Secrets read so far.
    pub seen: u64,
    /// Sealed again with the current key.
    pub resealed: u64,
    /// On the current key already.
    pub current: u64,
    /// Written meanwhile by someone else (then sealed with the current key by the
    /// writer): left as written.
    pub changed: u64,
    /// Those that could not be opened: tenant, name and why (never a value).
    pub failed: Vec<(TenantId, String, SecretError)>,
}

/// Re-seals every stored secret of every tenant with `cipher`'s current key, `batch`
/// secrets at a time (each a compare-and-set, so it is safe while servers write
/// secrets, and running it again does nothing more); `progress` hears the count after
/// every batch.
pub async fn reseal_all(
    store: &dyn SecretStore,
    cipher: &dyn SecretCipher,
    batch: u32,
    mut progress: impl FnMut(&ResealCount),
) -> StoreResult<ResealCount> {
    let mut count = ResealCount::default();
    let mut after = None;
    loop {
        let page = store.secrets_page(after.clone(), batch.max(1)).await?;
        let Some(last) = page.last() else {
            return Ok(count);
        };
        after = Some((last.tenant, last.name.clone()));
        for secret in &page {
            count.seen += 1;
            match reseal(cipher, secret) {
                Reseal::Current => count.current += 1,
                Reseal::Sealed(sealed) => {
                    if store
                        .secret_reseal(secret.tenant, &secret.name, &secret.sealed, sealed)
                        .await?
                    {
                        count.resealed += 1;
                    } else {
                        count.changed += 1;
                    }
                }
                Reseal::Failed(err) => {
                    count.failed.push((secret.tenant, secret.name.clone(), err));
                }
            }
        }
        progress(&count);
    }
}

/// Why a secret could not be sealed or opened. Messages never hold a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("no secret key is configured (FRONTA_SECRET_KEY): secrets cannot be stored or used")]
    NoKey,
    #[error(
        "the secret was sealed with key version {0}, which is not configured (FRONTA_SECRET_KEY_VERSION, FRONTA_SECRET_OLD_KEYS)"
    )]
    UnknownKeyVersion(u32),
    #[error("the secret cannot be opened with key version {0}: wrong key or damaged value")]
    Unreadable(u32),
}

/// Seals and opens secret values.
///
/// # Contract
///
/// - `seal` encrypts with the current key and answers its version; `open` decrypts with
///   the key of the value's version (older versions stay readable while configured).
/// - A value is bound to its tenant and name: opening it as another tenant's or under
///   another name fails (`Unreadable`), so a copied row reveals nothing.
/// - Two seals of one value differ (fresh nonce each time).
pub trait SecretCipher: Send + Sync + 'static {
    fn seal(&self, tenant: TenantId, name: &str, value: &str) -> Result<SealedSecret, SecretError>;
    fn open(
        &self,
        tenant: TenantId,
        name: &str,
        sealed: &SealedSecret,
    ) -> Result<String, SecretError>;
    /// The version new values are sealed with.
    fn current_version(&self) -> u32;
}

/// The secret names a step's input uses (`token` for `{{secrets.token}}`), each once.
pub fn names_in(input: &Map<String, Value>) -> Vec<String> {
    let mut names = Vec::new();
    for value in input.values() {
        for name in template::names_in(value) {
            if let Some(secret) = name.strip_prefix("secrets.") {
                let secret = secret.split('.').next().unwrap_or(secret).to_owned();
                if !names.contains(&secret) {
                    names.push(secret);
                }
            }
        }
    }
    names
}

/// Secrets revealed for one step: their values, and the scrubbing of those values from
/// whatever is written down afterwards.
#[derive(Default, Clone)]
pub struct Revealed {
    values: BTreeMap<String, String>,
    /// `{"<name>": "<value>", …}`: what `{{secrets.<name>}}` reads.
    scope: Value,
}

impl std::fmt::Debug for Revealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revealed")
            .field("names", &self.values.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Revealed {
    pub fn new(values: BTreeMap<String, String>) -> Self {
        let scope = Value::Object(
            values
                .iter()
                .map(|(name, value)| (name.clone(), Value::String(value.clone())))
                .collect(),
        );
        Self { values, scope }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Whether `text` holds any revealed value.
    pub fn contains_secret(&self, text: &str) -> bool {
        self.values
            .values()
            .any(|value| text.contains(value.as_str()))
    }

    /// `text` with every revealed value replaced by `[secret <name>]` (longest values
    /// first, so a value inside another is not half replaced).
    pub fn scrub(&self, text: &str) -> String {
        if !self.contains_secret(text) {
            return text.to_owned();
        }
        let mut by_length: Vec<(&String, &String)> = self.values.iter().collect();
        by_length.sort_by_key(|(_, value)| std::cmp::Reverse(value.len()));
        let mut out = text.to_owned();
        for (name, value) in by_length {
            out = out.replace(value.as_str(), &format!("[secret {name}]"));
        }
        out
    }

    /// A JSON value with every string (and object key) scrubbed.
    pub fn scrub_value(&self, value: Value) -> Value {
        if self.is_empty() {
            return value;
        }
        match value {
            Value::String(text) => Value::String(self.scrub(&text)),
            Value::Array(items) => {
                Value::Array(items.into_iter().map(|v| self.scrub_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(key, v)| (self.scrub(&key), self.scrub_value(v)))
                    .collect(),
            ),
            other => other,
        }
    }
}

/// The run context with revealed secrets layered over it for one render: `secrets` and
/// `secrets.*` come only from the secrets (a step output named `secrets.x` never stands
/// in for a secret); everything else from the context.
pub struct WithSecrets<'a> {
    pub context: &'a Context,
    pub revealed: &'a Revealed,
}

impl Lookup for WithSecrets<'_> {
    fn lookup(&self, key: &str) -> Option<&Value> {
        if key == SECRETS_KEY {
            return Some(&self.revealed.scope);
        }
        if key.starts_with("secrets.") {
            return None;
        }
        self.context.lookup(key)
    }
}

/// The failure of a step that uses `{{secrets.<name>}}` where no key is configured.
pub fn no_key(name: &str) -> StepError {
    Cause::NotConfigured.step_error(
        format!(
            "the step uses {{{{secrets.{name}}}}} but {}",
            SecretError::NoKey
        ),
        None,
    )
}

/// Reveals a step's secrets: reads them from the store and opens them with the cipher.
#[derive(Clone)]
pub struct SecretVault {
    pub store: Arc<dyn SecretStore>,
    /// `None` when no key is configured: using a secret is then a clear error.
    pub cipher: Option<Arc<dyn SecretCipher>>,
}

impl std::fmt::Debug for SecretVault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretVault")
            .field("key", &self.cipher.is_some())
            .finish()
    }
}

impl SecretVault {
    /// The values of `names` for `tenant`. A missing secret is bad input (fatal); no key
    /// or an unknown key version is missing configuration (fatal); storage that does not
    /// answer is retried.
    pub async fn reveal(&self, tenant: TenantId, names: &[String]) -> Result<Revealed, StepError> {
        if names.is_empty() {
            return Ok(Revealed::default());
        }
        let Some(cipher) = &self.cipher else {
            return Err(no_key(&names[0]));
        };
        let sealed = self
            .store
            .secrets_get(tenant, names)
            .await
            .map_err(|err| match err {
                DeskError::Unavailable(message) => Cause::StorageUnavailable
                    .step_error(format!("secrets could not be read: {message}"), None),
                other => Cause::Bug.step_error(format!("secrets could not be read: {other}"), None),
            })?;
        let mut values = BTreeMap::new();
        for (name, sealed) in &sealed {
            let value = cipher.open(tenant, name, sealed).map_err(|err| {
                Cause::NotConfigured.step_error(format!("secret {name:?}: {err}"), None)
            })?;
            values.insert(name.clone(), value);
        }
        if let Some(missing) = names.iter().find(|name| !values.contains_key(*name)) {
            return Err(Cause::BadInput.step_error(
                format!(
                    "secret {missing:?} is not set for this tenant (PUT /api/secrets/{missing})"
                ),
                None,
            ));
        }
        tracing::debug!(tenant = %tenant, names = ?names, "secrets revealed for a connector call");
        Ok(Revealed::new(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn revealed(pairs: &[(&str, &str)]) -> Revealed {
        Revealed::new(
            pairs
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
        )
    }

    #[test]
    fn names_in_finds_each_secret_once() {
        let input = json!({"url": "https://x.test/?k={{secrets.key}}",
            "headers": {"Authorization": "Bearer {{secrets.token}}", "X": "{{secrets.key}} {{orderId}}"}});
        let Value::Object(input) = input else {
            unreachable!()
        };
        // The walk follows the map's own key order, which serde_json's `preserve_order`
        // feature (switched on by other crates in a workspace build) changes: compare
        // as a set, and check that each name comes once.
        let mut found = names_in(&input);
        let listed = found.len();
        found.sort();
        found.dedup();
        assert_eq!(listed, found.len(), "each secret once");
        assert_eq!(
            found,
            vec!["key".to_string(), "token".to_string()],
            "every secret named, other names ignored"
        );
    }

    #[test]
    fn scrub_replaces_every_value_longest_first() {
        let secrets = revealed(&[("short", "abc"), ("long", "xxabcxx")]);
        assert_eq!(
            secrets.scrub("got xxabcxx and abc"),
            "got [secret long] and [secret short]",
            "the longer value is replaced whole"
        );
        assert_eq!(
            secrets.scrub_value(json!({"echo": ["Bearer abc"], "abc": 1})),
            json!({"echo": ["Bearer [secret short]"], "[secret short]": 1}),
            "strings and keys inside JSON are scrubbed"
        );
    }

    #[test]
    fn secrets_layer_wins_over_outputs_named_like_them() {
        let mut context = Context::new();
        context.insert("secrets.token", json!("an output"));
        context.insert("orderId", json!("5001"));
        let secrets = revealed(&[("token", "s3cr3t")]);
        let scope = WithSecrets {
            context: &context,
            revealed: &secrets,
        };
        assert_eq!(
            template::render_str("{{secrets.token}}/{{orderId}}", &scope),
            Ok(json!("s3cr3t/5001")),
            "the secret, not the output, and the context for the rest"
        );
    }

    #[test]
    fn names_and_values_are_checked() {
        assert!(check_name("shop-token_2").is_ok(), "a plain name");
        assert!(check_name("a.b").is_err(), "no dots");
        assert!(check_name("").is_err(), "not empty");
        assert!(check_value("").is_err(), "no empty value");
        assert!(
            check_value(&"x".repeat(MAX_SECRET_VALUE + 1)).is_err(),
            "not over the limit"
        );
    }

    #[test]
    fn debug_never_shows_a_value() {
        let secrets = revealed(&[("token", "s3cr3t")]);
        assert!(
            !format!("{secrets:?}").contains("s3cr3t"),
            "Debug shows names only"
        );
    }
}
