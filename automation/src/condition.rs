//! Evaluating a condition step: its rules, `match: all|any`, and a log line per rule that
//! a person can read (DESIGN §1.6 "explain every decision", seed 000 "A condition over a
//! parameter that has not arrived yet").
//!
//! Value lookup for a rule (the seed's fixed order): an explicit `fieldId` as an exact
//! context key → `<step>.<field>` when the rule names a step → the bare or dotted
//! `field`, resolved like a template name. The log line names the key actually read.
//!
//! Comparison: numbers compare as numbers (a numeric string too: `"10" > "9"`), ISO
//! dates as instants, everything else as text (by code point). Arrays and objects have
//! no order; `eq` compares them as JSON.
//!
//! "Has not arrived" (missing) is not "empty" (`null`, `""`, `[]`, `{}`), and neither is
//! ever compared as 0:
//! - `gt gte lt lte` are false when either side is missing or empty.
//! - Every comparing operator — `eq neq gt gte lt lte contains notContains` — is false
//!   when the field has not arrived (or the rule's value is a template that has not
//!   arrived). So `result neq "Missing information"` does *not* match a conversation
//!   whose result is not there yet — the trap the seed describes; `neq` and
//!   `notContains` are negations of `eq` and `contains` only over present values. Ask
//!   `isEmpty` to act on absence.
//! - An empty but present value is compared: `"" eq ""` holds, `[] notContains "x"`
//!   holds, `null neq "x"` holds.
//! - `isEmpty` is true for missing, `null`, `""`, `[]`, `{}`; `isNotEmpty` is its negation.
//! - `contains`: an array holds an equal element (same equality as `eq`), a string holds
//!   the value's text, an object holds the value as a key; an empty value is never
//!   searched for (false for both `contains` and `notContains`).
//! - An unknown operator is never met (the validator refuses it on save).
//! - A rule's `value` may be a template; it is rendered against the same context.
//!
//! Every rule is evaluated and logged, even after the outcome is decided, so the log
//! shows the whole picture. `all` of no rules is met and `any` of no rules is not (the
//! validator refuses a condition without rules).

use std::cmp::Ordering;

use serde_json::Value;

use crate::dates::parse_instant;
use crate::model::{ConditionStep, Match, Operator, Rule};
use crate::template::{self, Lookup, TemplateError};

/// The result of one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleOutcome {
    pub met: bool,
    /// `Condition: amount lte 1000: not met | amount = has not arrived, not compared with 1000`
    pub line: String,
}

/// The result of a whole condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionOutcome {
    pub met: bool,
    /// One line per rule, then (for other than exactly one rule) a summary line.
    pub lines: Vec<String>,
}

/// How two values were ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareMode {
    Numbers,
    Instants,
    Text,
}

impl CompareMode {
    fn as_words(self) -> &'static str {
        match self {
            CompareMode::Numbers => "as numbers",
            CompareMode::Instants => "as instants",
            CompareMode::Text => "as text",
        }
    }
}

/// Why two values could not be ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOrdered {
    /// A side is `null`, `""`, `[]` or `{}`.
    Empty,
    /// A side is a non-empty array or object.
    Structured,
}

/// Evaluates a condition step against the context.
pub fn evaluate<L: Lookup + ?Sized>(condition: &ConditionStep, scope: &L) -> ConditionOutcome {
    evaluate_rules(
        &condition.name,
        condition.match_kind,
        &condition.rules,
        scope,
    )
}

/// Evaluates rules combined by `match_kind`; `name` is the step's, for the summary line.
pub fn evaluate_rules<L: Lookup + ?Sized>(
    name: &str,
    match_kind: Match,
    rules: &[Rule],
    scope: &L,
) -> ConditionOutcome {
    let outcomes: Vec<RuleOutcome> = rules
        .iter()
        .map(|rule| evaluate_rule(rule, scope))
        .collect();
    let met_count = outcomes.iter().filter(|outcome| outcome.met).count();
    let met = match match_kind {
        Match::All => met_count == outcomes.len(),
        Match::Any => met_count > 0,
    };
    let mut lines: Vec<String> = outcomes.into_iter().map(|outcome| outcome.line).collect();
    if rules.len() != 1 {
        let counted = if rules.is_empty() {
            match match_kind {
                Match::All => "no rules (all of nothing holds)".to_owned(),
                Match::Any => "no rules (any of nothing fails)".to_owned(),
            }
        } else {
            format!("{met_count} of {} rules met", rules.len())
        };
        lines.push(format!(
            "Condition {name} ({}): {}, {counted}",
            match_kind.as_str(),
            met_words(met)
        ));
    }
    ConditionOutcome { met, lines }
}

/// The value a rule reads, and under which name it was found.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<'a> {
    /// The name read (`second.status`, `status`), or the rule's label when nothing was.
    pub name: String,
    /// `None`: has not arrived.
    pub value: Option<&'a Value>,
}

/// Looks a rule's value up: `fieldId` exact → `<step>.<field>` → bare/dotted `field`.
pub fn find<'a, L: Lookup + ?Sized>(rule: &Rule, scope: &'a L) -> Found<'a> {
    if let Some(id) = &rule.field_id
        && let Some(value) = scope.lookup(id)
    {
        return Found {
            name: id.clone(),
            value: Some(value),
        };
    }
    if let Some(field) = rule.field_name() {
        if let Some(step) = &rule.step {
            let qualified = format!("{step}.{field}");
            if let Some(value) = template::resolve(scope, &qualified) {
                return Found {
                    name: qualified,
                    value: Some(value),
                };
            }
        }
        if let Some(value) = template::resolve(scope, field) {
            return Found {
                name: field.to_owned(),
                value: Some(value),
            };
        }
    }
    Found {
        name: rule.label(),
        value: None,
    }
}

/// The right-hand side of a rule after rendering its value.
enum Right {
    /// The rule has no `value`.
    Absent,
    /// A template in the value names something that has not arrived.
    Missing(String),
    Present(Value),
}

/// Evaluates one rule and writes its log line.
pub fn evaluate_rule<L: Lookup + ?Sized>(rule: &Rule, scope: &L) -> RuleOutcome {
    let label = rule.label();
    let found = find(rule, scope);
    let mut head = format!("Condition: {label} {}", rule.operator);
    if let Some(written) = &rule.value {
        head.push(' ');
        head.push_str(&compact(written));
    }
    let left = describe_left(&label, &found);
    let (met, detail) = judge(rule, scope, found.value, left);
    RuleOutcome {
        met,
        line: format!("{head}: {} | {detail}", met_words(met)),
    }
}

fn judge<L: Lookup + ?Sized>(
    rule: &Rule,
    scope: &L,
    left: Option<&Value>,
    left_words: String,
) -> (bool, String) {
    let right = match &rule.value {
        None => Right::Absent,
        Some(written) => match template::render(written, scope) {
            Ok(value) => Right::Present(value),
            Err(TemplateError::Missing { name }) => Right::Missing(name),
            // A syntax error leaves the value literal (the validator reports it).
            Err(_) => Right::Present(written.clone()),
        },
    };
    match &rule.operator {
        Operator::IsEmpty => (is_empty(left), left_words),
        Operator::IsNotEmpty => (!is_empty(left), left_words),
        Operator::Unknown(name) => (false, format!("unknown operator \"{name}\"")),
        operator => {
            let right = match right {
                Right::Absent => {
                    return (
                        false,
                        format!("{left_words}; the rule has no value to compare with"),
                    );
                }
                Right::Missing(name) => {
                    return (
                        false,
                        format!("{left_words}, not compared: {{{{{name}}}}} has not arrived"),
                    );
                }
                Right::Present(value) => value,
            };
            let right_words = show(&right);
            let Some(left) = left else {
                return (
                    false,
                    format!("{left_words}, not compared with {right_words}"),
                );
            };
            compare(operator, left, &right, left_words, right_words)
        }
    }
}

fn compare(
    operator: &Operator,
    left: &Value,
    right: &Value,
    left_words: String,
    right_words: String,
) -> (bool, String) {
    match operator {
        Operator::Eq | Operator::Neq => {
            let (equal, mode) = equality(left, right);
            let how = match mode {
                Some(mode @ (CompareMode::Numbers | CompareMode::Instants)) => {
                    format!(" {}", mode.as_words())
                }
                _ => String::new(),
            };
            let met = if *operator == Operator::Eq {
                equal
            } else {
                !equal
            };
            (
                met,
                format!("{left_words}, compared with {right_words}{how}"),
            )
        }
        Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => match order(left, right) {
            Ok((ordering, mode)) => {
                let met = match operator {
                    Operator::Gt => ordering == Ordering::Greater,
                    Operator::Gte => ordering != Ordering::Less,
                    Operator::Lt => ordering == Ordering::Less,
                    _ => ordering != Ordering::Greater,
                };
                (
                    met,
                    format!(
                        "{left_words}, compared with {right_words} {}",
                        mode.as_words()
                    ),
                )
            }
            Err(NotOrdered::Empty) => (
                false,
                format!(
                    "{left_words}, not compared with {right_words} (an empty side is not comparable)"
                ),
            ),
            Err(NotOrdered::Structured) => (
                false,
                format!(
                    "{left_words}, not compared with {right_words} (arrays and objects have no order)"
                ),
            ),
        },
        Operator::Contains | Operator::NotContains => {
            if is_empty_value(right) {
                return (
                    false,
                    format!(
                        "{left_words}, not compared with {right_words} (an empty value is not searched for)"
                    ),
                );
            }
            let holds = contains(left, right);
            let met = if *operator == Operator::Contains {
                holds
            } else {
                !holds
            };
            (met, format!("{left_words}, compared with {right_words}"))
        }
        // Handled by the caller; never met here.
        Operator::IsEmpty | Operator::IsNotEmpty | Operator::Unknown(_) => (false, left_words),
    }
}

fn met_words(met: bool) -> &'static str {
    if met { "met" } else { "not met" }
}

fn describe_left(label: &str, found: &Found<'_>) -> String {
    match found.value {
        None => format!("{label} = has not arrived"),
        Some(Value::Null) if found.name == label => format!("{label} = null (has not arrived)"),
        Some(value) if found.name == label => format!("{label} = {}", show(value)),
        Some(value) => format!("{} = {} (read instead of {label})", found.name, show(value)),
    }
}

/// Values longer than this are cut in log lines.
const SHOWN_CHARS: usize = 80;

/// Compact JSON, cut to [`SHOWN_CHARS`].
fn compact(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS - 1).collect();
    format!("{cut}…")
}

/// Compact JSON, with empty values marked so they read differently from "has not arrived".
fn show(value: &Value) -> String {
    if is_empty_value(value) {
        format!("{} (empty)", compact(value))
    } else {
        compact(value)
    }
}

/// `isEmpty`: missing, `null`, `""`, `[]`, `{}`.
pub fn is_empty(value: Option<&Value>) -> bool {
    value.is_none_or(is_empty_value)
}

/// A present value that is empty: `null`, `""`, `[]`, `{}`.
pub fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

/// A finite number, from a JSON number or a numeric string (`"10"`, `" 2.5 "`).
fn as_number(value: &Value) -> Option<f64> {
    let number = match value {
        Value::Number(number) => number.as_f64()?,
        Value::String(text) => {
            let text = text.trim();
            if text.is_empty() {
                return None;
            }
            text.parse::<f64>().ok()?
        }
        _ => return None,
    };
    number.is_finite().then_some(number)
}

fn as_instant(value: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    match value {
        Value::String(text) => parse_instant(text),
        _ => None,
    }
}

fn is_scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

/// Orders two present values: numbers, then instants, then text; empty and structured
/// values are not ordered.
pub fn order(left: &Value, right: &Value) -> Result<(Ordering, CompareMode), NotOrdered> {
    if is_empty_value(left) || is_empty_value(right) {
        return Err(NotOrdered::Empty);
    }
    if let (Some(a), Some(b)) = (as_number(left), as_number(right)) {
        return Ok((
            a.partial_cmp(&b).unwrap_or(Ordering::Equal),
            CompareMode::Numbers,
        ));
    }
    if let (Some(a), Some(b)) = (as_instant(left), as_instant(right)) {
        return Ok((a.cmp(&b), CompareMode::Instants));
    }
    if is_scalar(left) && is_scalar(right) {
        return Ok((
            template::to_text(left).cmp(&template::to_text(right)),
            CompareMode::Text,
        ));
    }
    Err(NotOrdered::Structured)
}

/// `eq` over present values: ordered values compare by their order (so `"10" eq 10` and
/// two spellings of one instant are equal), the rest as JSON.
pub fn equality(left: &Value, right: &Value) -> (bool, Option<CompareMode>) {
    match order(left, right) {
        Ok((ordering, mode)) => (ordering == Ordering::Equal, Some(mode)),
        Err(_) => (left == right, None),
    }
}

/// `contains` over present values (see the module docs).
pub fn contains(haystack: &Value, needle: &Value) -> bool {
    match haystack {
        Value::Array(items) => items.iter().any(|item| equality(item, needle).0),
        Value::Object(map) => is_scalar(needle) && map.contains_key(&template::to_text(needle)),
        Value::String(_) | Value::Number(_) | Value::Bool(_) => {
            is_scalar(needle) && template::to_text(haystack).contains(&template::to_text(needle))
        }
        Value::Null => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn scope(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("a test scope is an object, got {other}"),
        }
    }

    fn rule(field: &str, operator: &str, value: Option<Value>) -> Rule {
        Rule::new(field, Operator::parse(operator), value)
    }

    fn check<L: Lookup + ?Sized>(rule: &Rule, context: &L) -> bool {
        evaluate_rule(rule, context).met
    }

    #[test]
    fn empty_is_not_compared_as_zero() {
        let lte = rule("amount", "lte", Some(json!(1000)));
        assert!(
            !check(&lte, &scope(json!({}))),
            "amount lte 1000 with amount missing is false"
        );
        assert!(
            !check(&lte, &scope(json!({"amount": ""}))),
            "amount lte 1000 with amount \"\" is false"
        );
        assert!(
            !check(&lte, &scope(json!({"amount": null}))),
            "amount lte 1000 with amount null is false"
        );
        assert!(
            check(&lte, &scope(json!({"amount": 0}))),
            "a real zero is compared"
        );
    }

    #[test]
    fn rule_naming_a_step_reads_that_steps_output_not_the_bare_name() {
        let mut context = crate::Context::new();
        let outputs = |status: &str| scope(json!({ "status": status }));
        context.publish_outputs("first", outputs("open"));
        context.publish_outputs("second", outputs("done"));
        let mut by_step = rule("status", "eq", Some(json!("done")));
        by_step.step = Some("second".into());
        let outcome = evaluate_rule(&by_step, &context);
        assert!(outcome.met, "second.status is done: {}", outcome.line);
        assert_eq!(
            outcome.line,
            "Condition: second.status eq \"done\": met | second.status = \"done\", compared with \"done\"",
            "the line names the step's output"
        );
        assert!(
            !check(&rule("status", "eq", Some(json!("done"))), &context),
            "the bare name still holds the first publisher's value"
        );
    }

    #[test]
    fn iso_dates_compare_as_instants_not_numbers() {
        let context = scope(json!({"due": "2026-09-07T10:00:00Z"}));
        let gt = rule("due", "gt", Some(json!("2026-09-06T23:00:00Z")));
        let outcome = evaluate_rule(&gt, &context);
        assert!(outcome.met, "a later instant is greater: {}", outcome.line);
        assert!(
            outcome.line.ends_with("as instants"),
            "the line says how: {}",
            outcome.line
        );
        assert!(
            check(
                &rule("due", "eq", Some(json!("2026-09-07T12:00:00+02:00"))),
                &context
            ),
            "two spellings of one instant are equal"
        );
        assert!(
            check(
                &rule("due", "lt", Some(json!("2026-09-07T11:00:00+00:00"))),
                &context
            ),
            "offsets are applied before comparing"
        );
    }

    #[test]
    fn numeric_strings_compare_as_numbers() {
        let context = scope(json!({"count": "10"}));
        assert!(
            check(&rule("count", "gt", Some(json!("9"))), &context),
            "\"10\" > \"9\" numerically"
        );
        assert!(
            check(&rule("count", "eq", Some(json!(10))), &context),
            "\"10\" eq 10"
        );
        assert!(
            check(&rule("count", "lt", Some(json!(10.5))), &context),
            "\"10\" < 10.5"
        );
    }

    #[test]
    fn text_compares_by_code_point() {
        let context = scope(json!({"name": "beta"}));
        assert!(
            check(&rule("name", "gt", Some(json!("alpha"))), &context),
            "beta > alpha"
        );
        assert!(
            check(&rule("name", "neq", Some(json!("Beta"))), &context),
            "comparison is case-sensitive"
        );
    }

    #[test]
    fn missing_field_fails_every_comparing_operator() {
        let context = scope(json!({}));
        for operator in [
            "eq",
            "neq",
            "gt",
            "gte",
            "lt",
            "lte",
            "contains",
            "notContains",
        ] {
            assert!(
                !check(
                    &rule("result", operator, Some(json!("Missing information"))),
                    &context
                ),
                "{operator} over a value that has not arrived is not met"
            );
        }
        assert!(
            check(&rule("result", "isEmpty", None), &context),
            "isEmpty holds for a missing value"
        );
        assert!(
            !check(&rule("result", "isNotEmpty", None), &context),
            "isNotEmpty fails for a missing value"
        );
    }

    #[test]
    fn empty_but_present_values_are_compared_for_equality_and_search() {
        let context = scope(json!({"text": "", "list": [], "none": null}));
        assert!(
            check(&rule("text", "eq", Some(json!(""))), &context),
            "\"\" eq \"\""
        );
        assert!(
            check(&rule("list", "notContains", Some(json!("x"))), &context),
            "[] notContains x"
        );
        assert!(
            check(&rule("none", "neq", Some(json!("x"))), &context),
            "null neq x"
        );
        assert!(
            !check(&rule("none", "eq", Some(json!("null"))), &context),
            "null is not the text \"null\""
        );
    }

    #[test]
    fn is_empty_covers_null_empty_text_array_and_object() {
        let context =
            scope(json!({"a": null, "b": "", "c": [], "d": {}, "e": 0, "f": " ", "g": false}));
        for field in ["missing", "a", "b", "c", "d"] {
            assert!(
                check(&rule(field, "isEmpty", None), &context),
                "{field} is empty"
            );
        }
        for field in ["e", "f", "g"] {
            assert!(
                check(&rule(field, "isNotEmpty", None), &context),
                "{field} is not empty"
            );
        }
    }

    #[test]
    fn contains_works_on_arrays_strings_and_objects() {
        let context = scope(json!({
            "tags": ["waiting-to-pack", "vip"], "ids": [5001, 5002],
            "title": "Order 5001", "fields": {"amount": 3}
        }));
        let cases = [
            ("tags", json!("vip"), true),
            ("tags", json!("vi"), false),
            ("ids", json!("5002"), true),
            ("title", json!("5001"), true),
            ("title", json!(5001), true),
            ("title", json!("order"), false),
            ("fields", json!("amount"), true),
        ];
        for (field, needle, expected) in cases {
            assert_eq!(
                check(&rule(field, "contains", Some(needle.clone())), &context),
                expected,
                "{field} contains {needle}"
            );
            assert_eq!(
                check(&rule(field, "notContains", Some(needle.clone())), &context),
                !expected,
                "{field} notContains {needle} is the negation over a present value"
            );
        }
        assert!(
            !check(&rule("tags", "contains", Some(json!(""))), &context)
                && !check(&rule("tags", "notContains", Some(json!(""))), &context),
            "an empty value is never searched for"
        );
    }

    #[test]
    fn field_id_is_an_exact_key_first_then_a_field() {
        let context = scope(json!({"f_result": "Redirect", "ticket": {"type": "order"}}));
        let by_id = Rule {
            field: None,
            field_id: Some("f_result".into()),
            step: None,
            operator: Operator::Eq,
            value: Some(json!("Redirect")),
        };
        assert!(check(&by_id, &context), "fieldId reads the exact key");
        let dotted_id = Rule {
            field_id: Some("ticket.type".into()),
            value: Some(json!("order")),
            ..by_id
        };
        assert!(
            check(&dotted_id, &context),
            "fieldId is accepted for field when no exact key exists"
        );
    }

    #[test]
    fn step_rule_falls_back_to_the_bare_name_and_says_so() {
        let context = scope(json!({"status": "new"}));
        let mut by_step = rule("status", "eq", Some(json!("new")));
        by_step.step = Some("tool".into());
        let outcome = evaluate_rule(&by_step, &context);
        assert!(outcome.met, "the seed's order ends at the bare name");
        assert_eq!(
            outcome.line,
            "Condition: tool.status eq \"new\": met | status = \"new\" (read instead of tool.status), compared with \"new\"",
            "the line shows that the bare name was read"
        );
    }

    #[test]
    fn rule_value_may_be_a_template() {
        let context = scope(json!({"expected": "order", "ticket": {"type": "order"}}));
        assert!(
            check(
                &rule("ticket.type", "eq", Some(json!("{{expected}}"))),
                &context
            ),
            "the value is rendered"
        );
        let outcome = evaluate_rule(
            &rule("ticket.type", "eq", Some(json!("{{nope}}"))),
            &context,
        );
        assert!(!outcome.met, "a value that has not arrived is not compared");
        assert!(
            outcome
                .line
                .ends_with("not compared: {{nope}} has not arrived"),
            "the line says why: {}",
            outcome.line
        );
    }

    #[test]
    fn all_of_no_rules_is_met_and_any_of_no_rules_is_not() {
        let context = scope(json!({}));
        let all = evaluate_rules("c", Match::All, &[], &context);
        let any = evaluate_rules("c", Match::Any, &[], &context);
        assert!(all.met, "all of nothing holds");
        assert!(!any.met, "any of nothing fails");
        assert_eq!(
            all.lines,
            vec!["Condition c (all): met, no rules (all of nothing holds)"],
            "the summary explains the empty case"
        );
    }

    #[test]
    fn unknown_operator_is_never_met() {
        let outcome = evaluate_rule(
            &rule("x", "matches", Some(json!("y"))),
            &scope(json!({"x": "y"})),
        );
        assert!(!outcome.met, "an unknown operator is not met");
        assert_eq!(
            outcome.line, "Condition: x matches \"y\": not met | unknown operator \"matches\"",
            "the line names it"
        );
    }

    #[test]
    fn long_values_are_cut_in_lines() {
        let long = "x".repeat(200);
        let outcome = evaluate_rule(&rule("a", "isNotEmpty", None), &scope(json!({ "a": long })));
        assert!(
            outcome.line.chars().count() < 140,
            "a 200-character value is cut: {}",
            outcome.line
        );
        assert!(outcome.line.ends_with('…'), "the cut is marked");
    }
}
