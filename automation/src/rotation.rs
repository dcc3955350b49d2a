//! Rotation of what leaks: an automation's webhook token and its signing secret can be
//! replaced, the old value staying valid for a grace period (a webhook URL) or an
//! overlap (a signing secret) so senders can move over without a gap.
//!
//! The rules, as pure functions both stores and the server call:
//! - a grace or overlap is 0 to [`MAX_GRACE_SECS`] seconds (7 days) ([`check_grace`]);
//! - a rotation ([`rotate_webhook`], [`rotate_signing_secret`]) answers the new value
//!   and the old one to keep with its expiry ([`Retired`]) — none for a grace of 0, so
//!   the old value stops at once;
//! - a retired value is valid while `now < expires_at` ([`Retired::valid_at`]); a webhook
//!   token opens its automation when it is the current one or a retired one still valid
//!   ([`answers_token`]); a signed request verifies with any signing secret still valid
//!   ([`signing_secrets`]).
//!
//! Stores keep retired values in their own rows (`automation_retired`), read them back
//! with every automation (as JSON, [`parse_retired`]) and drop the expired ones of an
//! automation at its next rotation ([`Rotation::drop_before`]); an expired row left
//! behind opens nothing.

use chrono::{DateTime, TimeDelta, Utc};
use fronta_desk::DeskError;
use serde_json::Value;

use crate::model::Trigger;
use crate::store::{StoreResult, StoredAutomation};

/// The longest grace (or overlap) a rotation may keep the old value valid: 7 days.
pub const MAX_GRACE_SECS: i64 = 7 * 24 * 60 * 60;

/// Checks a grace or overlap in seconds, named `field` in the refusal: absent is 0;
/// negative or over [`MAX_GRACE_SECS`] is refused (`Invalid`, naming the field).
pub fn check_grace(field: &str, seconds: Option<i64>) -> StoreResult<TimeDelta> {
    let seconds = seconds.unwrap_or(0);
    if !(0..=MAX_GRACE_SECS).contains(&seconds) {
        return Err(DeskError::Invalid(format!(
            "{field} must be 0 to {MAX_GRACE_SECS} seconds (7 days), not {seconds}"
        )));
    }
    Ok(TimeDelta::seconds(seconds))
}

/// What a retired value was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetiredKind {
    /// A webhook token (the secret in the URL).
    Webhook,
    /// A Standard Webhooks signing secret.
    SigningSecret,
}

impl RetiredKind {
    /// The stored spelling (`webhook`, `signing_secret`).
    pub fn as_str(self) -> &'static str {
        match self {
            RetiredKind::Webhook => "webhook",
            RetiredKind::SigningSecret => "signing_secret",
        }
    }

    /// The stored spelling read back.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "webhook" => Some(RetiredKind::Webhook),
            "signing_secret" => Some(RetiredKind::SigningSecret),
            _ => None,
        }
    }
}

/// An old webhook token or signing secret, valid until `expires_at`.
#[derive(Clone, PartialEq, Eq)]
pub struct Retired {
    pub kind: RetiredKind,
    /// The token or the secret. Never logged.
    pub value: String,
    pub expires_at: DateTime<Utc>,
}

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retired")
            .field("kind", &self.kind)
            .field("value", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

impl Retired {
    /// Whether it still opens (a token) or verifies (a secret) at `now`.
    pub fn valid_at(&self, now: DateTime<Utc>) -> bool {
        now < self.expires_at
    }
}

/// The retired values a store read back as JSON: an array of
/// `[kind, value, expires_at in Unix milliseconds]` (what both stores' subquery answers);
/// `None`, or anything unreadable, is none.
pub fn parse_retired(text: Option<&str>) -> Vec<Retired> {
    let Some(Ok(Value::Array(rows))) = text.map(serde_json::from_str::<Value>) else {
        return Vec::new();
    };
    let mut retired: Vec<Retired> = rows
        .iter()
        .filter_map(|row| {
            let kind = RetiredKind::parse(row.get(0)?.as_str()?)?;
            let value = row.get(1)?.as_str()?.to_owned();
            let millis = row.get(2)?.as_f64()?;
            #[allow(clippy::cast_possible_truncation)]
            let expires_at = DateTime::from_timestamp_millis(millis as i64)?;
            Some(Retired {
                kind,
                value,
                expires_at,
            })
        })
        .collect();
    retired.sort_by_key(|r| r.expires_at);
    retired
}

/// A rotation planned: the new value, the old one to keep (none: it stops at once), and
/// the instant before which the automation's retired rows are dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotation {
    pub new_value: String,
    pub retire: Option<Retired>,
    /// Retired rows expired at or before this instant are deleted in the same write.
    pub drop_before: DateTime<Utc>,
}

fn retire(
    kind: RetiredKind,
    old: Option<&String>,
    now: DateTime<Utc>,
    grace: TimeDelta,
) -> Option<Retired> {
    let old = old?;
    (grace > TimeDelta::zero()).then(|| Retired {
        kind,
        value: old.clone(),
        expires_at: now + grace,
    })
}

/// A new webhook token for `stored` at `now`: the old one stays valid for `grace`.
/// Only a webhook automation has a URL to rotate (`Conflict` otherwise).
pub fn rotate_webhook(
    stored: &StoredAutomation,
    now: DateTime<Utc>,
    grace: TimeDelta,
    mint: impl FnOnce() -> String,
) -> StoreResult<Rotation> {
    if !matches!(stored.automation.trigger, Trigger::Webhook { .. }) {
        return Err(DeskError::Conflict(format!(
            "automation {:?} has no webhook URL to rotate: its trigger is {}",
            stored.automation.name,
            stored.automation.trigger.kind()
        )));
    }
    Ok(Rotation {
        new_value: mint(),
        retire: retire(
            RetiredKind::Webhook,
            stored.webhook_token.as_ref(),
            now,
            grace,
        ),
        drop_before: now,
    })
}

/// A new signing secret (`secret`) for `stored` at `now`: the old one keeps verifying
/// for `overlap`. An automation without a signing secret has none to replace
/// (`Conflict`: signatures are chosen when it is created); the current secret again is
/// `Invalid` (naming `signingSecret`).
pub fn rotate_signing_secret(
    stored: &StoredAutomation,
    now: DateTime<Utc>,
    overlap: TimeDelta,
    secret: String,
) -> StoreResult<Rotation> {
    if stored.signing_secret.is_none() {
        return Err(DeskError::Conflict(format!(
            "automation {:?} has no signing secret to rotate (its webhooks are not signed)",
            stored.automation.name
        )));
    }
    if stored.signing_secret.as_deref() == Some(secret.as_str()) {
        return Err(DeskError::Invalid(
            "signingSecret must differ from the current signing secret".to_owned(),
        ));
    }
    Ok(Rotation {
        new_value: secret,
        retire: retire(
            RetiredKind::SigningSecret,
            stored.signing_secret.as_ref(),
            now,
            overlap,
        ),
        drop_before: now,
    })
}

/// The retired values of `kind` of `stored` still valid at `now`, soonest to expire first.
pub fn still_valid(
    stored: &StoredAutomation,
    kind: RetiredKind,
    now: DateTime<Utc>,
) -> impl Iterator<Item = &Retired> {
    stored
        .retired
        .iter()
        .filter(move |retired| retired.kind == kind && retired.valid_at(now))
}

/// Whether `token` opens `stored` at `now`: its current token, or a retired one still in
/// its grace period.
pub fn answers_token(stored: &StoredAutomation, token: &str, now: DateTime<Utc>) -> bool {
    stored.webhook_token.as_deref() == Some(token)
        || still_valid(stored, RetiredKind::Webhook, now).any(|retired| retired.value == token)
}

/// The signing secrets a signed request may verify with at `now`: the current one, then
/// those still in their overlap. Empty when the automation is not signed.
pub fn signing_secrets(stored: &StoredAutomation, now: DateTime<Utc>) -> Vec<&str> {
    let Some(current) = stored.signing_secret.as_deref() else {
        return Vec::new();
    };
    std::iter::once(current)
        .chain(still_valid(stored, RetiredKind::SigningSecret, now).map(|r| r.value.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Automation;
    use crate::store::{AutomationColumns, AutomationId, InFlight};
    use fronta_desk::TenantId;
    use serde_json::json;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).expect("an instant")
    }

    fn stored(trigger: Value, token: Option<&str>, secret: Option<&str>) -> StoredAutomation {
        let definition = Automation::from_value(&json!({"name": "Hook", "trigger": trigger,
            "steps": [{"name": "n", "op": "flow/log", "input": {"message": "hi"}}]}))
        .expect("parses");
        StoredAutomation::from(AutomationColumns {
            id: AutomationId::new(),
            tenant: TenantId::new(),
            definition,
            enabled: true,
            webhook_token: token.map(str::to_owned),
            signing_secret: secret.map(str::to_owned),
            retired: Vec::new(),
            current_version: 1,
            in_flight: InFlight::Finish,
            created_at: at(0),
            updated_at: at(0),
        })
    }

    fn hook() -> StoredAutomation {
        stored(
            json!({"type": "webhook", "params": []}),
            Some("wh_old"),
            Some("whsec_old"),
        )
    }

    #[test]
    fn a_grace_is_zero_to_seven_days_and_a_refusal_names_the_field() {
        assert_eq!(
            check_grace("graceSec", None),
            Ok(TimeDelta::zero()),
            "default"
        );
        assert_eq!(
            check_grace("graceSec", Some(604_800)),
            Ok(TimeDelta::days(7)),
            "the maximum"
        );
        for bad in [-1, 604_801] {
            let err = check_grace("overlapSec", Some(bad)).expect_err("refused");
            assert!(
                matches!(&err, DeskError::Invalid(message) if message.starts_with("overlapSec")),
                "names the field: {err:?}"
            );
        }
    }

    #[test]
    fn a_webhook_rotation_keeps_the_old_token_for_the_grace_only() {
        let mut stored = hook();
        let rotation =
            rotate_webhook(&stored, at(10), TimeDelta::seconds(2), || "wh_new".into()).expect("ok");
        assert_eq!(rotation.new_value, "wh_new");
        let retired = rotation.retire.clone().expect("kept for the grace");
        assert_eq!(retired.expires_at, at(12), "now + grace");
        stored.webhook_token = Some(rotation.new_value);
        stored.retired.push(retired);
        assert!(answers_token(&stored, "wh_new", at(11)), "the new one");
        assert!(
            answers_token(&stored, "wh_old", at(11)),
            "the old one in grace"
        );
        assert!(!answers_token(&stored, "wh_old", at(12)), "not at the end");
        assert!(
            answers_token(&stored, "wh_new", at(13)),
            "the new one stays"
        );
        assert!(!answers_token(&stored, "wh_other", at(11)), "no other");
        let at_once =
            rotate_webhook(&stored, at(20), TimeDelta::zero(), || "wh_3".into()).expect("ok");
        assert_eq!(at_once.retire, None, "grace 0: the old token stops at once");
    }

    #[test]
    fn only_a_webhook_has_a_url_and_only_a_signed_one_a_secret_to_rotate() {
        let manual = stored(json!({"type": "manual"}), Some("wh_kept"), None);
        assert!(
            matches!(
                rotate_webhook(&manual, at(0), TimeDelta::zero(), || "x".into()),
                Err(DeskError::Conflict(_))
            ),
            "a manual trigger"
        );
        assert!(
            matches!(
                rotate_signing_secret(&manual, at(0), TimeDelta::zero(), "whsec_x".into()),
                Err(DeskError::Conflict(_))
            ),
            "no secret"
        );
        assert!(
            matches!(
                rotate_signing_secret(&hook(), at(0), TimeDelta::zero(), "whsec_old".into()),
                Err(DeskError::Invalid(message)) if message.starts_with("signingSecret")
            ),
            "the same secret again"
        );
    }

    #[test]
    fn both_secrets_verify_during_the_overlap_and_only_the_new_after() {
        let mut stored = hook();
        let rotation =
            rotate_signing_secret(&stored, at(0), TimeDelta::seconds(60), "whsec_new".into())
                .expect("ok");
        stored.signing_secret = Some(rotation.new_value);
        stored.retired.extend(rotation.retire);
        assert_eq!(signing_secrets(&stored, at(59)), ["whsec_new", "whsec_old"]);
        assert_eq!(signing_secrets(&stored, at(60)), ["whsec_new"]);
    }

    #[test]
    fn retired_rows_read_back_from_json_and_unreadable_ones_are_skipped() {
        let text = json!([
            ["webhook", "wh_a", 1_700_000_002_000_i64],
            ["signing_secret", "whsec_b", 1_700_000_001_000.0],
            ["other", "x", 1],
            "junk"
        ])
        .to_string();
        let retired = parse_retired(Some(&text));
        assert_eq!(retired.len(), 2, "{retired:?}");
        assert_eq!(retired[0].kind, RetiredKind::SigningSecret, "soonest first");
        assert_eq!(retired[1].expires_at, at(2));
        assert!(parse_retired(None).is_empty());
        assert!(parse_retired(Some("null")).is_empty());
        assert!(
            !format!("{:?}", retired[0]).contains("whsec_b"),
            "the value is never in a debug line"
        );
    }
}
