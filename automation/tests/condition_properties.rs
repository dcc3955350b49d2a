//! Property tests of conditions: empty or missing sides are never ordered, `all`/`any`
//! agree with their rules, dates compare as chrono instants, numbers (and numeric
//! strings) as numbers, and the negating operators negate only over present values.

use chrono::{DateTime, FixedOffset, TimeZone, Utc};
use fronta_automation::condition::{evaluate_rule, evaluate_rules};
use fronta_automation::{Match, Operator, Rule};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const ORDERED: [Operator; 4] = [Operator::Gt, Operator::Gte, Operator::Lt, Operator::Lte];

fn empty_or_missing() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(Value::Null)),
        Just(Some(json!(""))),
        Just(Some(json!([]))),
        Just(Some(json!({}))),
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| json!(n)),
        (-1.0e9..1.0e9f64).prop_map(|n| json!(n)),
        "[a-z0-9 .:-]{1,12}".prop_map(Value::String),
        any::<bool>().prop_map(Value::Bool),
        (0i64..4_000_000_000).prop_map(|s| json!(instant(s, 0).to_rfc3339())),
    ]
}

fn any_value() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        3 => scalar().prop_map(Some),
        1 => empty_or_missing(),
        1 => prop::collection::vec(scalar(), 1..3).prop_map(|items| Some(Value::Array(items))),
    ]
}

fn operator() -> impl Strategy<Value = Operator> {
    prop::sample::select(Operator::KNOWN.to_vec())
}

fn instant(seconds: i64, offset_minutes: i32) -> DateTime<FixedOffset> {
    let offset = FixedOffset::east_opt(offset_minutes * 60).expect("offset within a day");
    offset
        .timestamp_opt(seconds, 0)
        .single()
        .expect("a representable instant")
}

fn context(field: &str, value: Option<Value>) -> Map<String, Value> {
    let mut map = Map::new();
    if let Some(value) = value {
        map.insert(field.to_owned(), value);
    }
    map
}

fn met(field_value: Option<Value>, operator: Operator, value: Option<Value>) -> bool {
    let rule = Rule::new("x", operator, value);
    evaluate_rule(&rule, &context("x", field_value)).met
}

proptest! {
    #[test]
    fn empty_or_missing_field_is_never_ordered(field in empty_or_missing(), value in any_value()) {
        for operator in ORDERED {
            prop_assert!(
                !met(field.clone(), operator.clone(), value.clone()),
                "{operator} with field {field:?} and value {value:?} must be false"
            );
        }
    }

    #[test]
    fn empty_or_missing_value_is_never_ordered(field in any_value(), value in empty_or_missing()) {
        for operator in ORDERED {
            prop_assert!(
                !met(field.clone(), operator.clone(), value.clone()),
                "{operator} with field {field:?} and value {value:?} must be false"
            );
        }
    }

    #[test]
    fn all_is_every_rule_and_any_is_some_rule(
        values in prop::collection::vec(any_value(), 3),
        rules in prop::collection::vec((0usize..4, operator(), any_value()), 0..6),
    ) {
        let mut scope = Map::new();
        for (name, value) in ["a", "b", "c"].iter().zip(values) {
            if let Some(value) = value {
                scope.insert((*name).to_owned(), value);
            }
        }
        let rules: Vec<Rule> = rules
            .into_iter()
            .map(|(field, operator, value)| Rule::new(["a", "b", "c", "d"][field], operator, value))
            .collect();
        let each: Vec<bool> = rules.iter().map(|rule| evaluate_rule(rule, &scope).met).collect();
        let all = evaluate_rules("c", Match::All, &rules, &scope);
        let any = evaluate_rules("c", Match::Any, &rules, &scope);
        prop_assert_eq!(all.met, each.iter().all(|m| *m), "all == every rule met: {:?}", all.lines);
        prop_assert_eq!(any.met, each.iter().any(|m| *m), "any == some rule met: {:?}", any.lines);
        prop_assert!(
            all.lines.len() == rules.len() + usize::from(rules.len() != 1),
            "a line per rule plus a summary unless there is exactly one rule"
        );
    }

    #[test]
    fn dates_compare_like_chrono_instants(
        a in 0i64..4_000_000_000, b in 0i64..4_000_000_000,
        offset_a in -720i32..=840, offset_b in -720i32..=840,
        same in any::<bool>(),
    ) {
        let b = if same { a } else { b };
        let left = instant(a, offset_a);
        let right = instant(b, offset_b);
        let (left_utc, right_utc): (DateTime<Utc>, DateTime<Utc>) = (left.into(), right.into());
        let field = Some(json!(left.to_rfc3339()));
        let value = Some(json!(right.to_rfc3339()));
        let expected = [
            (Operator::Gt, left_utc > right_utc),
            (Operator::Gte, left_utc >= right_utc),
            (Operator::Lt, left_utc < right_utc),
            (Operator::Lte, left_utc <= right_utc),
            (Operator::Eq, left_utc == right_utc),
            (Operator::Neq, left_utc != right_utc),
        ];
        for (operator, holds) in expected {
            prop_assert_eq!(
                met(field.clone(), operator.clone(), value.clone()),
                holds,
                "{} {} {}", left, operator, right
            );
        }
    }

    #[test]
    fn numbers_and_numeric_strings_compare_as_numbers(
        a in -1.0e6..1.0e6f64, b in -1.0e6..1.0e6f64,
        a_as_text in any::<bool>(), b_as_text in any::<bool>(), same in any::<bool>(),
    ) {
        let b = if same { a } else { b };
        let write = |n: f64, text: bool| if text { json!(n.to_string()) } else { json!(n) };
        let field = Some(write(a, a_as_text));
        let value = Some(write(b, b_as_text));
        let expected = [
            (Operator::Gt, a > b),
            (Operator::Gte, a >= b),
            (Operator::Lt, a < b),
            (Operator::Lte, a <= b),
            (Operator::Eq, a == b),
        ];
        for (operator, holds) in expected {
            prop_assert_eq!(
                met(field.clone(), operator.clone(), value.clone()),
                holds,
                "{:?} {} {:?}", field, operator, value
            );
        }
    }

    #[test]
    fn integers_written_as_text_order_numerically(a in 0u32..100_000, b in 0u32..100_000) {
        let field = Some(json!(a.to_string()));
        let value = Some(json!(b.to_string()));
        prop_assert_eq!(met(field, Operator::Gt, value), a > b, "\"{}\" gt \"{}\"", a, b);
    }

    #[test]
    fn negations_hold_exactly_over_present_values(field in any_value(), value in scalar()) {
        let present = field.is_some();
        let eq = met(field.clone(), Operator::Eq, Some(value.clone()));
        let neq = met(field.clone(), Operator::Neq, Some(value.clone()));
        prop_assert_eq!(neq, present && !eq, "neq negates eq only when the field arrived");
        let needle_empty = value.as_str() == Some("");
        let contains = met(field.clone(), Operator::Contains, Some(value.clone()));
        let not_contains = met(field.clone(), Operator::NotContains, Some(value.clone()));
        prop_assert_eq!(
            not_contains,
            present && !needle_empty && !contains,
            "notContains negates contains only when the field arrived"
        );
        let empty = met(field.clone(), Operator::IsEmpty, None);
        let not_empty = met(field, Operator::IsNotEmpty, None);
        prop_assert_eq!(empty, !not_empty, "isEmpty and isNotEmpty are exact opposites");
    }
}

#[test]
fn all_of_zero_rules_is_met_and_any_of_zero_is_not() {
    let scope = Map::new();
    assert!(
        evaluate_rules("c", Match::All, &[], &scope).met,
        "all of nothing holds (the validator refuses it on save)"
    );
    assert!(
        !evaluate_rules("c", Match::Any, &[], &scope).met,
        "any of nothing fails"
    );
}
