//! Webhook signatures and bodies under bad input.
//!
//! - `verify`, exhaustively: every single-bit flip of the signature, of the body, of the
//!   `webhook-id` and every other digit in the timestamp is refused; timestamps are
//!   accepted up to the tolerance either way and refused one second past it.
//! - Through the router, as properties: a signed request with one random bit flipped in
//!   the body, the id, the timestamp or the signature answers 401 and writes nothing; a
//!   replay of an accepted request (same id) answers the first run and writes nothing;
//!   any JSON body to a webhook with a contract answers 202 with exactly one new run, or
//!   400 naming the parameter, with nothing written.

mod support;

use std::time::Duration;

use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{TimeZone, Utc};
use fronta_server::signature::{SignatureError, SignedHeaders, generate_secret, sign, verify};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{Harness, order_type, orders_automation, webhook_path};

const TOLERANCE: Duration = Duration::from_secs(300);
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn check(
    id: &str,
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    verify(
        SECRET,
        SignedHeaders {
            id: Some(id),
            timestamp: Some(timestamp),
            signature: Some(signature),
        },
        body,
        Utc.timestamp_opt(now, 0).single().expect("a valid instant"),
        TOLERANCE,
    )
}

fn flip_bit(text: &str, bit: usize) -> Option<String> {
    let mut bytes = text.as_bytes().to_vec();
    bytes[bit / 8] ^= 1 << (bit % 8);
    String::from_utf8(bytes).ok()
}

#[test]
fn every_single_bit_flip_is_refused() {
    let body = br#"{"kind":"order.created","data":{"order":{"id":"77"}}}"#;
    let (id, now) = ("msg_2Q8fX3", 1_700_000_000_i64);
    let signature = sign(SECRET, id, now, body).expect("signs");
    let timestamp = now.to_string();
    assert_eq!(
        check(id, &timestamp, &signature, body, now),
        Ok(()),
        "the untouched request verifies"
    );
    let raw = STANDARD
        .decode(signature.trim_start_matches("v1,"))
        .expect("base64");
    let mut refused = 0;
    for bit in 0..raw.len() * 8 {
        let mut flipped = raw.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let signature = format!("v1,{}", STANDARD.encode(&flipped));
        assert_eq!(
            check(id, &timestamp, &signature, body, now),
            Err(SignatureError::Mismatch),
            "signature bit {bit} flipped"
        );
        refused += 1;
    }
    for bit in 0..body.len() * 8 {
        let mut flipped = body.to_vec();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(
            check(id, &timestamp, &signature, &flipped, now),
            Err(SignatureError::Mismatch),
            "body bit {bit} flipped"
        );
        refused += 1;
    }
    for bit in 0..id.len() * 8 {
        if let Some(flipped) = flip_bit(id, bit) {
            assert_eq!(
                check(&flipped, &timestamp, &signature, body, now),
                Err(SignatureError::Mismatch),
                "id bit {bit} flipped"
            );
            refused += 1;
        }
    }
    for position in 0..timestamp.len() {
        for digit in '0'..='9' {
            let mut other: Vec<char> = timestamp.chars().collect();
            if other[position] == digit {
                continue;
            }
            other[position] = digit;
            let other: String = other.into_iter().collect();
            let result = check(id, &other, &signature, body, now);
            assert!(
                matches!(
                    result,
                    Err(SignatureError::Mismatch | SignatureError::Stale(_))
                ),
                "timestamp {other} instead of {timestamp}: {result:?}"
            );
            refused += 1;
        }
    }
    println!("signatures: {refused} single-bit and single-digit changes refused");
}

#[test]
fn timestamps_are_accepted_up_to_the_tolerance_either_way_and_no_further() {
    let body = b"{}";
    let now = 1_700_000_000_i64;
    let limit = TOLERANCE.as_secs() as i64;
    for (offset, accepted) in [
        (0, true),
        (limit, true),
        (-limit, true),
        (limit + 1, false),
        (-limit - 1, false),
        (100 * limit, false),
    ] {
        let at = now + offset;
        let signature = sign(SECRET, "msg_t", at, body).expect("signs");
        let result = check("msg_t", &at.to_string(), &signature, body, now);
        if accepted {
            assert_eq!(
                result,
                Ok(()),
                "{offset} s from now is within the tolerance"
            );
        } else {
            assert_eq!(
                result,
                Err(SignatureError::Stale(TOLERANCE.as_secs())),
                "{offset} s from now is refused as stale, even correctly signed"
            );
        }
    }
    assert_eq!(
        check("msg_t", "soon", "v1,AAAA", body, now),
        Err(SignatureError::BadTimestamp),
        "a timestamp that is not a number is refused as such"
    );
}

/// A tenant with the orders automation requiring signatures: its secret and path.
async fn signed(harness: &Harness) -> (String, String) {
    let (_, token) = harness.tenant("Signed").await;
    harness
        .post("/api/ticket-types", &token, order_type())
        .await;
    let secret = generate_secret();
    let mut definition = orders_automation();
    definition["signingSecret"] = json!(secret);
    let automation = harness.automation(&token, definition).await;
    (secret, webhook_path(&automation))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a test runtime")
}

/// Which part of a signed request a flip lands in.
#[derive(Debug, Clone, Copy)]
enum Part {
    Body,
    Id,
    Timestamp,
    Signature,
}

/// Cases per property: `PROPTEST_CASES` when set (the full tier), else `default`.
fn cases(default: u32) -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|err| panic!("PROPTEST_CASES={text:?} is not a whole number: {err}")),
        Err(_) => default,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    #[test]
    fn a_flipped_bit_anywhere_answers_401_and_writes_nothing_and_replays_write_nothing(
        part in prop::sample::select(vec![Part::Body, Part::Id, Part::Timestamp, Part::Signature]),
        bit in any::<prop::sample::Index>(),
        order in "[0-9]{1,6}",
    ) {
        let runtime = runtime();
        runtime.block_on(async {
            let harness = Harness::new();
            let (secret, path) = signed(&harness).await;
            let body = json!({"kind": "order.created", "data": {"order": {"id": order}}}).to_string();
            let now = Utc::now().timestamp();
            let id = format!("msg_{order}");
            let headers = |id: &str, timestamp: String, signature: String| {
                vec![
                    ("webhook-id", id.to_owned()),
                    ("webhook-timestamp", timestamp),
                    ("webhook-signature", signature),
                ]
            };
            let signature = sign(&secret, &id, now, body.as_bytes()).expect("signs");
            let (mut b, mut i, mut t, mut s) = (body.clone(), id.clone(), now.to_string(), signature.clone());
            let target = match part {
                Part::Body => &mut b,
                Part::Id => &mut i,
                Part::Timestamp => &mut t,
                Part::Signature => &mut s,
            };
            // Flip one bit; a flip that leaves UTF-8 or a header value is a different
            // byte in the same place.
            let bits = target.len() * 8;
            let mut flipped = None;
            for offset in 0..bits {
                let at = (bit.index(bits) + offset) % bits;
                if let Some(text) = flip_bit(target, at)
                    && text.bytes().all(|c| (0x20..0x7f).contains(&c))
                    && text != *target
                {
                    flipped = Some(text);
                    break;
                }
            }
            let Some(flipped) = flipped else {
                return Ok(());
            };
            *target = flipped;
            let before = harness.runs().run_stats().await.expect("stats");
            let reply = harness.webhook(&path, &b, &headers(&i, t.clone(), s.clone())).await;
            // A flipped signature prefix (`v1,` → `v3,`) or base64 is no signature at all;
            // a flipped timestamp digit may make it stale: all are 401.
            prop_assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{:?} flipped: {}", part, reply.json);
            prop_assert_eq!(reply.code(), "invalid_signature");
            let after = harness.runs().run_stats().await.expect("stats");
            prop_assert_eq!(before.total(), after.total(), "a refused request writes nothing");

            // The untouched request is accepted once; its replay answers the same run.
            let first = harness.webhook(&path, &body, &headers(&id, now.to_string(), signature.clone())).await;
            prop_assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.json);
            let replay = harness.webhook(&path, &body, &headers(&id, now.to_string(), signature)).await;
            prop_assert_eq!(replay.status, StatusCode::ACCEPTED, "{}", replay.json);
            prop_assert_eq!(first.text("runId"), replay.text("runId"), "a replay answers the first run");
            let last = harness.runs().run_stats().await.expect("stats");
            prop_assert_eq!(last.total(), before.total() + 1, "the replay wrote nothing");
            Ok(())
        })?;
    }

    #[test]
    fn any_json_body_is_one_run_or_a_clear_400_with_nothing_written(
        body in json_body(),
    ) {
        let runtime = runtime();
        runtime.block_on(async {
            let harness = Harness::new();
            let (_, token) = harness.tenant("Open").await;
            harness.post("/api/ticket-types", &token, order_type()).await;
            let automation = harness.automation(&token, orders_automation()).await;
            let text = body.to_string();
            let reply = harness.webhook(&webhook_path(&automation), &text, &[]).await;
            let stats = harness.runs().run_stats().await.expect("stats");
            let kind_ok = body.pointer("/kind").is_some_and(Value::is_string);
            let id_ok = body.pointer("/data/order/id").is_some_and(Value::is_string);
            if kind_ok && id_ok {
                prop_assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.json);
                prop_assert_eq!(stats.total(), 1, "exactly one run");
            } else {
                prop_assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{} -> {}", text, reply.json);
                prop_assert!(matches!(reply.code(), "missing_parameter" | "invalid_parameter" | "invalid_json"),
                    "a clear code: {}", reply.json);
                let message = reply.json["error"]["message"].as_str().unwrap_or_default().to_owned();
                prop_assert!(message.contains("kind") || message.contains("orderId") || message.contains("JSON"),
                    "the message names what is wrong: {}", message);
                prop_assert_eq!(stats.total(), 0, "nothing written");
            }
            Ok(())
        })?;
    }
}

/// Bodies near the orders contract: right, missing, or wrongly typed fields.
fn json_body() -> impl Strategy<Value = Value> {
    let field = prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        "[a-z.]{0,10}".prop_map(|s| Some(Value::String(s))),
        any::<i64>().prop_map(|n| Some(json!(n))),
        any::<bool>().prop_map(|b| Some(json!(b))),
        Just(Some(json!([1, 2]))),
        Just(Some(json!({"nested": true}))),
    ];
    (field.clone(), field, any::<bool>()).prop_map(|(kind, id, wrap)| {
        let mut body = serde_json::Map::new();
        if let Some(kind) = kind {
            body.insert("kind".into(), kind);
        }
        if let Some(id) = id {
            let order = if wrap {
                json!({"order": {"id": id}})
            } else {
                json!({"order": id})
            };
            body.insert("data".into(), order);
        }
        Value::Object(body)
    })
}
