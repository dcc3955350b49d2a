//! Poll sources: what a `poll` automation's run does before its steps — fetch from the
//! source, keep only the items it has not taken yet, publish them, and move the
//! automation's cursor — and the [`PollCursors`] port that keeps the cursor.
//!
//! # The poll step
//!
//! The scheduler (`crate::scheduler`) enqueues a run per period; the executor then runs an
//! implicit first step named [`POLL_STEP`] (`poll` in the step log, op `poll/http`,
//! `poll/messages` or `poll/mail`) before the tree. It publishes, like any step, through
//! `Context::publish_outputs`: `poll.items` (the new items, oldest first — a tree
//! `forEach`es over `{{poll.items}}`), `poll.count` and `poll.cursor` (the cursor after
//! this poll). A step of a poll automation cannot be named `poll` (refused on save).
//! A poll that finds no new item ends the run at once: the step log says "no new items"
//! and the tree does not run.
//!
//! # Sources
//!
//! - `http`: the trigger's `request` is an `http/request` input (method, url, headers,
//!   query, body, timeoutSec; `{{secrets.x}}` and `{{_poll.*}}` may be used, and
//!   `{{_poll.cursor}}` is the stored cursor, so a source can filter on its side). The
//!   call goes through the same connector as the step (SSRF guard, redirects,
//!   classification, per-(tenant, service) limits under `service`, default
//!   `http/request`). `items` is a dot path into the step's outputs (`body.items`;
//!   `body` alone when the answer is the array) that must hold an array of objects;
//!   `cursor` a dot path into each item (`id`, `meta.updatedAt`) whose value orders
//!   them. New items are those whose cursor is **greater** than the stored one (all of
//!   them on the first poll), taken oldest first, at most `PollLimits::max_items` per
//!   poll (the rest come on the next poll); the new cursor is the greatest taken.
//!   Comparison ([`compare_cursors`]): two numbers as numbers; two strings that are both
//!   RFC 3339 / ISO-8601 instants as instants; two strings of digits only as whole
//!   numbers of any length (`"10"` after `"9"`); other strings by their UTF-8 bytes
//!   (use zero-padded or sortable ids). Mixed kinds, a missing cursor field, or a
//!   path that is not an array are final errors naming the path and the item.
//! - `messages`: a messages inbox (chat, SMS gateway, a ticketing system's message
//!   list) read over HTTP: exactly the `http` shape (`request`, `items`, `cursor`), with
//!   the messages default period of 30 s. There is no vendor-specific messages API in
//!   this build; whatever lists messages over HTTP with an ordering field fits.
//! - `mail`: IMAP (`mailbox`: host, port, tls, user, password as `{{secrets.x}}`,
//!   folder) through the connector op `poll/mail`. The cursor is `{uidValidity, uid,
//!   at}`: new messages are those with a UID above `uid` while the folder's
//!   UIDVALIDITY is unchanged. The first poll takes the messages received since the
//!   automation was last saved; after a UIDVALIDITY change (the folder was rebuilt and
//!   old UIDs mean nothing) the poll starts over from the messages received since the
//!   previous poll (`at`), logged as a warning. Messages are read with `BODY.PEEK`:
//!   never marked seen, moved or deleted.
//!
//! # When the cursor moves (exactly once, across crashes)
//!
//! The fetch answers the items and the cursor they lead to (`to`), computed from the
//! stored one (`from`). Then, in this order:
//! 1. the run's checkpoint is written with the poll's step log line, the published items
//!    and the pending move `from → to` ([`PendingCursor`]);
//! 2. the cursor is moved with [`PollCursors::poll_cursor_advance`], a compare-and-set
//!    from `from` to `to`;
//! 3. the tree runs.
//!
//! A crash before 1 leaves nothing: the retry fetches again from the same cursor. A crash
//! between 1 and 2 resumes from the checkpoint, which still holds the items, and applies
//! the move then (the store answers `AlreadyThere` if it had been applied). So the items
//! are fetched once and delivered once per move of the cursor. A compare-and-set that
//! meets another value (`Conflict`: another run of the same automation — a manual start —
//! moved it) drops this poll's items and polls again from the new cursor, logged.
//! A poll that finds nothing new but moves the cursor (a mail folder's first look) moves
//! it without a checkpoint: no item can be lost.

use std::cmp::Ordering;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use fronta_desk::TenantId;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::contract::to_pointer;
use crate::dates::parse_instant;
use crate::model::PollSource;
use crate::store::{AutomationId, StoreResult};

/// The implicit first step of a poll automation's run.
pub const POLL_STEP: &str = "poll";
/// What the poll step publishes.
pub const POLL_OUTPUTS: [&str; 3] = ["items", "count", "cursor"];
/// Default of [`PollLimits::max_items`] (`FRONTA_POLL_MAX_ITEMS`).
pub const DEFAULT_MAX_ITEMS: usize = 100;

/// The poll's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollLimits {
    /// Items (messages) one poll takes at most; the rest wait for the next poll.
    pub max_items: usize,
}

impl Default for PollLimits {
    fn default() -> Self {
        Self {
            max_items: DEFAULT_MAX_ITEMS,
        }
    }
}

/// The op name shown in the step log for a source.
pub fn step_op(source: PollSource) -> &'static str {
    match source {
        PollSource::Http => "poll/http",
        PollSource::Messages => "poll/messages",
        PollSource::Mail => "poll/mail",
    }
}

/// The move of the cursor a checkpointed poll still owes (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCursor {
    /// The cursor the poll started from (`None`: the first poll).
    pub from: Option<Value>,
    pub to: Value,
    /// Set once the store answered `Advanced` or `AlreadyThere`.
    #[serde(default)]
    pub applied: bool,
}

/// What a poll took, ready to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// New items, oldest first.
    pub items: Vec<Value>,
    /// The cursor after this batch (unchanged when nothing is new).
    pub cursor: Option<Value>,
    /// Items left for the next poll (over the limit).
    pub left: usize,
}

impl Batch {
    /// The outputs of the poll step.
    pub fn outputs(&self) -> Map<String, Value> {
        let mut outputs = Map::new();
        outputs.insert("items".into(), Value::Array(self.items.clone()));
        outputs.insert("count".into(), json!(self.items.len()));
        outputs.insert("cursor".into(), self.cursor.clone().unwrap_or(Value::Null));
        outputs
    }
}

/// Why a poll's answer cannot be used (final: the same answer would fail again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollError(pub String);

impl std::fmt::Display for PollError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `path` in `value` (a dot path; numeric segments index arrays).
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    value.pointer(&to_pointer(path))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn digits(text: &str) -> Option<&str> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.trim_start_matches('0'))
}

/// Orders two cursor values (see the module docs), or says why they cannot be compared.
pub fn compare_cursors(a: &Value, b: &Value) -> Result<Ordering, String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Ok(x.cmp(&y)),
            _ => {
                let (x, y) = (
                    x.as_f64().unwrap_or(f64::NAN),
                    y.as_f64().unwrap_or(f64::NAN),
                );
                x.partial_cmp(&y)
                    .ok_or_else(|| format!("{x} and {y} cannot be ordered"))
            }
        },
        (Value::String(x), Value::String(y)) => {
            if let (Some(x), Some(y)) = (parse_instant(x), parse_instant(y)) {
                return Ok(x.cmp(&y));
            }
            if let (Some(x), Some(y)) = (digits(x), digits(y)) {
                return Ok(x.len().cmp(&y.len()).then_with(|| x.cmp(y)));
            }
            Ok(x.as_bytes().cmp(y.as_bytes()))
        }
        _ => Err(format!(
            "{} and {} cannot be compared (a cursor is a number or a string throughout)",
            kind(a),
            kind(b)
        )),
    }
}

/// The new items of an `http`/`messages` answer: `outputs` is what `http/request`
/// published (`status`, `headers`, `body`), `items` and `cursor` the trigger's paths,
/// `after` the stored cursor.
pub fn select_new(
    outputs: &Value,
    items_path: &str,
    cursor_path: &str,
    after: Option<&Value>,
    limits: PollLimits,
) -> Result<Batch, PollError> {
    let found = at_path(outputs, items_path).ok_or_else(|| {
        PollError(format!(
            "trigger.items: the answer has nothing at \"{items_path}\" (the answer has {})",
            outputs
                .as_object()
                .map(|map| map.keys().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ))
    })?;
    let Value::Array(list) = found else {
        return Err(PollError(format!(
            "trigger.items: \"{items_path}\" is {}, not an array of items",
            kind(found)
        )));
    };
    let mut keyed: Vec<(Value, &Value)> = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let Some(value) = at_path(item, cursor_path).filter(|value| !value.is_null()) else {
            return Err(PollError(format!(
                "trigger.cursor: item {index} of \"{items_path}\" has no \"{cursor_path}\""
            )));
        };
        if !matches!(value, Value::Number(_) | Value::String(_)) {
            return Err(PollError(format!(
                "trigger.cursor: \"{cursor_path}\" of item {index} is {}; a cursor is a number or a string",
                kind(value)
            )));
        }
        if let Some(after) = after {
            let order = compare_cursors(value, after).map_err(|reason| {
                PollError(format!(
                    "trigger.cursor: \"{cursor_path}\" of item {index} ({value}) against the stored cursor {after}: {reason}"
                ))
            })?;
            if order != Ordering::Greater {
                continue;
            }
        }
        keyed.push((value.clone(), item));
    }
    let mut problem = None;
    keyed.sort_by(|(a, _), (b, _)| {
        compare_cursors(a, b).unwrap_or_else(|reason| {
            problem.get_or_insert(reason);
            Ordering::Equal
        })
    });
    if let Some(reason) = problem {
        return Err(PollError(format!(
            "trigger.cursor: the items' \"{cursor_path}\" values cannot be ordered: {reason}"
        )));
    }
    // Take at most `max_items`, but never split items of equal cursor: the next poll
    // would skip the rest of them.
    let mut take = keyed.len().min(limits.max_items.max(1));
    while take > 0
        && take < keyed.len()
        && compare_cursors(&keyed[take - 1].0, &keyed[take].0) == Ok(Ordering::Equal)
    {
        take += 1;
    }
    let left = keyed.len() - take;
    let cursor = keyed
        .get(take.wrapping_sub(1))
        .map(|(value, _)| value.clone())
        .or_else(|| after.cloned());
    Ok(Batch {
        items: keyed
            .into_iter()
            .take(take)
            .map(|(_, item)| item.clone())
            .collect(),
        cursor,
        left,
    })
}

/// The stored cursor of a poll automation.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCursor {
    pub value: Value,
    /// The run that moved it last.
    pub run: String,
    pub updated_at: DateTime<Utc>,
}

/// What [`PollCursors::poll_cursor_advance`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Advance {
    /// The cursor was `from` and is now `to`.
    Advanced,
    /// The cursor already was `to` (a resumed run applying its move again).
    AlreadyThere,
    /// The cursor is neither `from` nor `to`: nothing was written.
    Conflict { current: Option<Value> },
}

/// The cursor of each poll automation.
///
/// # Contract
///
/// - Scoped by tenant: an automation of another tenant, or none, answers `NotFound`
///   for both methods, exactly like an unknown id.
/// - `poll_cursor_get` answers the stored cursor, or `None` before the first move.
/// - `poll_cursor_advance` is a compare-and-set, atomic against every other caller in
///   every process: if the stored cursor equals `from` (`None`: no cursor stored) it
///   stores `to` with `run` and the store's now and answers `Advanced`; if it already
///   equals `to` it writes nothing and answers `AlreadyThere`; otherwise it writes
///   nothing and answers `Conflict` with the stored value. Values compare as JSON values
///   (object key order does not matter).
/// - Deleting the automation forgets its cursor; editing it keeps the cursor.
/// - Storage errors are `DeskError::Unavailable`; nothing is half written.
#[async_trait]
pub trait PollCursors: Send + Sync + 'static {
    async fn poll_cursor_get(
        &self,
        tenant: TenantId,
        automation: AutomationId,
    ) -> StoreResult<Option<StoredCursor>>;

    async fn poll_cursor_advance(
        &self,
        tenant: TenantId,
        automation: AutomationId,
        from: Option<&Value>,
        to: &Value,
        run: &str,
    ) -> StoreResult<Advance>;
}

/// The compare-and-set decision every store makes inside its transaction.
pub fn decide(current: Option<&Value>, from: Option<&Value>, to: &Value) -> Advance {
    if current == Some(to) {
        Advance::AlreadyThere
    } else if current == from {
        Advance::Advanced
    } else {
        Advance::Conflict {
            current: current.cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_items: usize) -> PollLimits {
        PollLimits { max_items }
    }

    fn answer(items: Value) -> Value {
        json!({"status": 200, "headers": {}, "body": {"items": items}})
    }

    #[test]
    fn the_first_poll_takes_every_item_oldest_first_and_the_cursor_is_the_greatest() {
        let outputs = answer(json!([{"id": 3}, {"id": 1}, {"id": 2}]));
        let batch = select_new(&outputs, "body.items", "id", None, limits(10)).expect("fits");
        assert_eq!(
            batch.items,
            vec![json!({"id": 1}), json!({"id": 2}), json!({"id": 3})]
        );
        assert_eq!(batch.cursor, Some(json!(3)));
        assert_eq!(batch.left, 0);
    }

    #[test]
    fn a_later_poll_takes_only_items_past_the_cursor() {
        let outputs = answer(json!([{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}]));
        let batch =
            select_new(&outputs, "body.items", "id", Some(&json!(2)), limits(10)).expect("fits");
        assert_eq!(batch.items, vec![json!({"id": 3}), json!({"id": 4})]);
        assert_eq!(batch.cursor, Some(json!(4)));
    }

    #[test]
    fn nothing_new_keeps_the_cursor() {
        let outputs = answer(json!([{"id": 1}, {"id": 2}]));
        let batch =
            select_new(&outputs, "body.items", "id", Some(&json!(2)), limits(10)).expect("fits");
        assert!(batch.items.is_empty());
        assert_eq!(batch.cursor, Some(json!(2)), "unchanged");
        assert_eq!(batch.outputs()["count"], json!(0));
    }

    #[test]
    fn the_limit_leaves_the_newest_for_the_next_poll_but_never_splits_equal_cursors() {
        let outputs = answer(json!([
            {"id": "a", "at": "2026-01-01T10:00:00Z"},
            {"id": "b", "at": "2026-01-01T10:00:01Z"},
            {"id": "c", "at": "2026-01-01T10:00:01Z"},
            {"id": "d", "at": "2026-01-01T10:00:02Z"}
        ]));
        let batch = select_new(&outputs, "body.items", "at", None, limits(2)).expect("fits");
        let ids: Vec<&Value> = batch.items.iter().map(|item| &item["id"]).collect();
        assert_eq!(
            ids,
            vec!["a", "b", "c"],
            "b and c share a cursor: both come"
        );
        assert_eq!(batch.left, 1);
        assert_eq!(batch.cursor, Some(json!("2026-01-01T10:00:01Z")));
    }

    #[test]
    fn cursors_compare_as_numbers_instants_digit_strings_and_text() {
        let order = |a: Value, b: Value| compare_cursors(&a, &b).expect("comparable");
        assert_eq!(order(json!(10), json!(9)), Ordering::Greater, "numbers");
        assert_eq!(order(json!(1.5), json!(2)), Ordering::Less, "fractions");
        assert_eq!(
            order(
                json!("2026-01-01T10:00:00+01:00"),
                json!("2026-01-01T09:30:00Z")
            ),
            Ordering::Less,
            "instants by time, not by text"
        );
        assert_eq!(
            order(json!("10"), json!("9")),
            Ordering::Greater,
            "digit strings"
        );
        assert_eq!(order(json!("b-1"), json!("a-9")), Ordering::Greater, "text");
        let mixed = compare_cursors(&json!(1), &json!("1")).expect_err("mixed kinds");
        assert!(mixed.contains("a number and a string"), "{mixed}");
    }

    #[test]
    fn bad_paths_and_items_are_named() {
        let outputs = answer(json!([{"id": 1}, {"name": "no id"}]));
        let missing =
            select_new(&outputs, "body.items", "id", None, limits(10)).expect_err("no id");
        assert_eq!(
            missing.0,
            "trigger.cursor: item 1 of \"body.items\" has no \"id\""
        );
        let nothing = select_new(&outputs, "body.rows", "id", None, limits(10)).expect_err("path");
        assert!(
            nothing
                .0
                .starts_with("trigger.items: the answer has nothing at \"body.rows\""),
            "{nothing}"
        );
        let object = select_new(&outputs, "body", "id", None, limits(10)).expect_err("object");
        assert_eq!(
            object.0,
            "trigger.items: \"body\" is an object, not an array of items"
        );
        let against = select_new(&outputs, "body.items", "id", Some(&json!("x")), limits(10))
            .expect_err("a number against a string");
        assert!(against.0.contains("against the stored cursor"), "{against}");
    }

    #[test]
    fn the_compare_and_set_decision() {
        let (one, two) = (json!({"uid": 1, "v": 7}), json!({"v": 7, "uid": 2}));
        assert_eq!(decide(None, None, &one), Advance::Advanced, "first move");
        assert_eq!(decide(Some(&one), Some(&one), &two), Advance::Advanced);
        assert_eq!(decide(Some(&two), Some(&one), &two), Advance::AlreadyThere);
        assert_eq!(
            decide(Some(&json!(9)), Some(&one), &two),
            Advance::Conflict {
                current: Some(json!(9))
            }
        );
        assert_eq!(
            decide(None, Some(&one), &two),
            Advance::Conflict { current: None },
            "a cursor that vanished is not the one the poll started from"
        );
    }
}
