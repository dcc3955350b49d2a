//! Standard Webhooks signatures: `webhook-id`, `webhook-timestamp` and
//! `webhook-signature` headers; the signature is `v1,<base64 HMAC-SHA256>` over
//! `"{id}.{timestamp}.{body}"` with the secret `whsec_<base64 key>`. Several signatures
//! may be sent, separated by spaces (key rotation); one valid `v1` is enough.
//!
//! Comparison is constant-time (`Mac::verify_slice`). A timestamp further than the
//! tolerance from now, either way, is refused (replay protection; repeats within the
//! window are recognised by `webhook-id`, see `routes::webhook`).
//!
//! Also here: making a secret (`generate_secret`) and checking one a tenant sends.
//! Left out: remembering ids (the webhook route does).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";
/// The longest `webhook-id` accepted (it becomes part of a unique key).
pub const MAX_WEBHOOK_ID_LEN: usize = 256;

/// Why a signed request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the automation requires signed webhooks: missing header {0}")]
    Missing(&'static str),
    #[error("webhook-timestamp is not a number of seconds")]
    BadTimestamp,
    #[error("webhook-timestamp is more than {0} s from now")]
    Stale(u64),
    #[error("no signature in webhook-signature matches")]
    Mismatch,
    #[error("the signing secret cannot be used")]
    BadSecret,
}

/// The key bytes of `whsec_<base64>`, if the secret has that shape and 16–128 bytes.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX)?;
    let key = STANDARD.decode(encoded).ok()?;
    (16..=128).contains(&key.len()).then_some(key)
}

/// A new secret: 32 random bytes from the operating system (256 bits) as
/// `whsec_<base64>`.
///
/// # Panics
///
/// As [`fronta_desk::token::random_bytes`], when the system has no randomness to give.
pub fn generate_secret() -> String {
    let key = fronta_desk::token::random_bytes::<32>();
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The `v1,<base64>` signature of a message (for senders and tests).
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let mut mac = HmacSha256::new_from_slice(&secret_key(secret)?).ok()?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The three headers of a signed request, as sent.
#[derive(Debug, Clone, Copy)]
pub struct SignedHeaders<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Checks a request against `secret`.
pub fn verify(
    secret: &str,
    headers: SignedHeaders<'_>,
    body: &[u8],
    now: DateTime<Utc>,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    verify_any(&[secret], headers, body, now, tolerance)
}

/// Checks a request against several secrets (a rotation's overlap,
/// `fronta_automation::rotation::signing_secrets`): it passes when any `v1` signature
/// sent verifies with any of them.
pub fn verify_any(
    secrets: &[&str],
    headers: SignedHeaders<'_>,
    body: &[u8],
    now: DateTime<Utc>,
    tolerance: Duration,
) -> Result<(), SignatureError> {
    let id = headers.id.ok_or(SignatureError::Missing("webhook-id"))?;
    let timestamp = headers
        .timestamp
        .ok_or(SignatureError::Missing("webhook-timestamp"))?;
    let signatures = headers
        .signature
        .ok_or(SignatureError::Missing("webhook-signature"))?;
    let seconds: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    let tolerance_secs = tolerance.as_secs();
    if now.timestamp().abs_diff(seconds) > tolerance_secs {
        return Err(SignatureError::Stale(tolerance_secs));
    }
    let macs: Vec<HmacSha256> = secrets
        .iter()
        .filter_map(|secret| secret_key(secret))
        .filter_map(|key| HmacSha256::new_from_slice(&key).ok())
        .map(|mut mac| {
            mac.update(format!("{id}.{seconds}.").as_bytes());
            mac.update(body);
            mac
        })
        .collect();
    if macs.is_empty() {
        return Err(SignatureError::BadSecret);
    }
    let candidates: Vec<Vec<u8>> = signatures
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|encoded| STANDARD.decode(encoded).ok())
        .collect();
    let matched = macs.iter().any(|mac| {
        candidates
            .iter()
            .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
    });
    if matched {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn headers<'a>(id: &'a str, ts: &'a str, sig: &'a str) -> SignedHeaders<'a> {
        SignedHeaders {
            id: Some(id),
            timestamp: Some(ts),
            signature: Some(sig),
        }
    }

    #[test]
    fn the_standard_webhooks_example_verifies() {
        // The example of the Standard Webhooks reference libraries.
        let body = br#"{"test": 2432232314}"#;
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let ts = 1_614_265_330;
        let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert_eq!(
            sign(SECRET, id, ts, body).as_deref(),
            Some(expected),
            "same signature as the reference"
        );
        let now = DateTime::from_timestamp(ts + 10, 0).expect("a time");
        assert_eq!(
            verify(
                SECRET,
                headers(id, &ts.to_string(), expected),
                body,
                now,
                Duration::from_secs(300)
            ),
            Ok(()),
            "it verifies"
        );
    }

    #[test]
    fn flipped_bits_stale_times_and_missing_headers_are_refused() {
        let body = b"{}";
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("a time");
        let ts = now.timestamp();
        let good = sign(SECRET, "m1", ts, body).expect("signs");
        let tolerance = Duration::from_secs(300);
        assert_eq!(
            verify(
                SECRET,
                headers("m1", &ts.to_string(), &good),
                b"{ }",
                now,
                tolerance
            ),
            Err(SignatureError::Mismatch),
            "another body"
        );
        assert_eq!(
            verify(
                SECRET,
                headers("m1", &(ts - 301).to_string(), &good),
                body,
                now,
                tolerance
            ),
            Err(SignatureError::Stale(300)),
            "too old"
        );
        let several = format!("v1,AAAA {good}");
        assert_eq!(
            verify(
                SECRET,
                headers("m1", &ts.to_string(), &several),
                body,
                now,
                tolerance
            ),
            Ok(()),
            "one good signature among several is enough"
        );
        let missing = SignedHeaders {
            id: Some("m1"),
            timestamp: None,
            signature: Some(&good),
        };
        assert_eq!(
            verify(SECRET, missing, body, now, tolerance),
            Err(SignatureError::Missing("webhook-timestamp")),
            "missing header"
        );
    }

    #[test]
    fn during_an_overlap_either_secret_verifies_and_after_it_only_the_new_one() {
        let (old, new) = (SECRET, generate_secret());
        let body = b"{}";
        let now = DateTime::from_timestamp(1_700_000_000, 0).expect("a time");
        let ts = now.timestamp().to_string();
        let tolerance = Duration::from_secs(300);
        let by_old = sign(old, "m1", now.timestamp(), body).expect("signs");
        let by_new = sign(&new, "m1", now.timestamp(), body).expect("signs");
        let both = format!("{by_new} {by_old}");
        for sent in [&by_old, &by_new, &both] {
            assert_eq!(
                verify_any(&[&new, old], headers("m1", &ts, sent), body, now, tolerance),
                Ok(()),
                "in the overlap: {sent}"
            );
        }
        assert_eq!(
            verify_any(&[&new], headers("m1", &ts, &by_old), body, now, tolerance),
            Err(SignatureError::Mismatch),
            "after it the old secret's signature is refused"
        );
        assert_eq!(
            verify_any(&[&new], headers("m1", &ts, &both), body, now, tolerance),
            Ok(()),
            "a sender still signing with both passes"
        );
    }

    #[test]
    fn generated_secrets_are_usable_and_distinct() {
        let (a, b) = (generate_secret(), generate_secret());
        assert_ne!(a, b, "random");
        assert_eq!(secret_key(&a).map(|k| k.len()), Some(32), "32 key bytes");
        assert_eq!(secret_key("whsec_!!"), None, "not base64");
        assert_eq!(
            secret_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            None,
            "no prefix"
        );
    }
}
