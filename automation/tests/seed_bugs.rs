//! The prototype's bugs (seed 000), one test each, so none of them comes back:
//! empty compared as 0, the bare output name winning over `step.key`, ISO dates compared
//! as numbers, a tool's `status` overwriting the trigger's, the step cap counting loop
//! passes, the "has not arrived" trap, and a silently dropped unknown field.

use fronta_automation::condition::{evaluate, evaluate_rule};
use fronta_automation::validate::validate;
use fronta_automation::{
    Automation, ConditionStep, Context, MAX_STEPS, Match, Operator, Rule, ValidationContext,
};
use serde_json::{Map, Value, json};

fn map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("expected an object, got {other}"),
    }
}

fn rule(field: &str, operator: Operator, value: Option<Value>) -> Rule {
    Rule::new(field, operator, value)
}

#[test]
fn empty_amount_is_not_compared_as_zero() {
    let amount_lte = rule("amount", Operator::Lte, Some(json!(1000)));
    for params in [json!({}), json!({"amount": ""})] {
        let context = Context::from_params(map(params.clone()));
        let outcome = evaluate_rule(&amount_lte, &context);
        assert!(
            !outcome.met,
            "amount lte 1000 must be false for {params}: {}",
            outcome.line
        );
    }
    let context = Context::from_params(map(json!({"amount": ""})));
    assert_eq!(
        evaluate_rule(&amount_lte, &context).line,
        "Condition: amount lte 1000: not met | amount = \"\" (empty), not compared with 1000 (an empty side is not comparable)",
        "the line tells why nothing was compared"
    );
}

#[test]
fn rule_with_a_step_reads_that_steps_output_not_the_first_bare_one() {
    let mut context = Context::new();
    context.publish_outputs("first", map(json!({"status": "open"})));
    context.publish_outputs("second", map(json!({"status": "closed"})));
    let mut second_closed = rule("status", Operator::Eq, Some(json!("closed")));
    second_closed.step = Some("second".into());
    assert!(
        evaluate_rule(&second_closed, &context).met,
        "a rule with step: second reads second.status, not the bare status of first"
    );
}

#[test]
fn iso_dates_are_compared_as_instants_not_numbers() {
    let context = Context::from_params(map(json!({"due": "2026-09-07T10:00:00Z"})));
    let later = rule("due", Operator::Gt, Some(json!("2026-09-06T23:00:00Z")));
    let outcome = evaluate_rule(&later, &context);
    assert!(outcome.met, "the later date is greater: {}", outcome.line);
    let earlier = rule("due", Operator::Lt, Some(json!("2026-09-06T23:00:00Z")));
    assert!(
        !evaluate_rule(&earlier, &context).met,
        "and not smaller — NaN compared false both ways in the prototype"
    );
}

#[test]
fn tool_status_output_does_not_overwrite_the_trigger_status() {
    let mut context =
        Context::from_params(map(json!({"status": "new", "_body": {"status": "new"}})));
    context.publish_outputs("tool", map(json!({"status": "error", "content": []})));
    assert_eq!(
        context.get("status"),
        Some(&json!("new")),
        "the trigger's status stays bare"
    );
    assert_eq!(
        context.get("tool.status"),
        Some(&json!("error")),
        "the tool's status is tool.status"
    );
    let after = rule("status", Operator::Eq, Some(json!("new")));
    assert!(
        evaluate_rule(&after, &context).met,
        "a condition after the tool asks about the trigger's status"
    );
}

#[test]
fn the_step_cap_counts_the_tree_not_loop_passes() {
    let automation = Automation::from_value(&json!({
        "name": "lines", "trigger": {"type": "webhook", "params": []},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "x"}},
            {"name": "each", "type": "forEach", "items": "{{_body.lines}}", "as": "line", "steps": [
                {"name": "a", "op": "flow/log", "input": {"message": "{{line}}"}},
                {"name": "b", "op": "flow/log", "input": {"message": "{{line}}"}}
            ]}
        ]
    }))
    .expect("parses");
    assert_eq!(automation.step_count(), 4, "four steps in the tree");
    assert!(
        automation.step_count() * 26 > MAX_STEPS,
        "26 passes would exceed MAX_STEPS if passes were counted"
    );
    assert_eq!(
        validate(&automation, &ValidationContext::default()),
        vec![],
        "a tree of four steps with a loop is valid"
    );
}

#[test]
fn has_not_arrived_is_told_from_empty_and_the_neq_trap_is_closed() {
    let first_message = Context::from_params(map(json!({})));
    let is_not_empty = rule("result", Operator::IsNotEmpty, None);
    assert_eq!(
        evaluate_rule(&is_not_empty, &first_message).line,
        "Condition: result isNotEmpty: not met | result = has not arrived",
        "the seed's first line"
    );
    let later = Context::from_params(map(json!({"result": "Redirect"})));
    let eq = rule("result", Operator::Eq, Some(json!("Missing information")));
    assert_eq!(
        evaluate_rule(&eq, &later).line,
        "Condition: result eq \"Missing information\": not met | result = \"Redirect\", compared with \"Missing information\"",
        "the seed's second line"
    );
    let neq = rule("result", Operator::Neq, Some(json!("Missing information")));
    assert!(
        !evaluate_rule(&neq, &first_message).met,
        "neq over a result that has not arrived does not match (the seed's trap)"
    );
    let both = ConditionStep {
        name: "missingInformation".into(),
        match_kind: Match::All,
        rules: vec![is_not_empty, eq],
        then_steps: vec![],
        else_steps: vec![],
    };
    let missing = Context::from_params(map(json!({"result": "Missing information"})));
    assert!(
        evaluate(&both, &missing).met,
        "the seed's recommended pair in one condition"
    );
}

#[test]
fn an_unknown_field_is_an_error_not_silently_dropped() {
    let problems = Automation::from_value(&json!({
        "name": "phase", "trigger": {"type": "manual"},
        "steps": [{"name": "ticket", "op": "ticket/upsert", "input": {"externalId": "x", "phase": "packing"}}]
    }))
    .map(|automation| validate(&automation, &ValidationContext::default()))
    .expect("an unknown input parses; the validator names it");
    assert_eq!(
        problems.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![
            "steps[0].input.phase: unknown input \"phase\" for ticket/upsert (its inputs: externalId, title, type, status, tags, fields, group, onExisting)"
        ],
        "the prototype dropped phase silently"
    );
}
