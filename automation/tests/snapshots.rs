//! Snapshot tests: the condition log lines a person reads on a run, and the problem
//! lists a user gets back for broken automations. A change in wording shows up here as
//! a reviewed diff (`INSTA_UPDATE=always` or `cargo insta review`).

use fronta_automation::condition::{evaluate, evaluate_rule};
use fronta_automation::validate::validate;
use fronta_automation::{Automation, ConditionStep, Context, Match, Rule, ValidationContext};
use serde_json::{Map, Value, json};

fn map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("expected an object, got {other}"),
    }
}

fn rules(value: Value) -> Vec<Rule> {
    let automation = Automation::from_value(&json!({
        "name": "rules", "trigger": {"type": "manual"},
        "steps": [{"name": "c", "type": "condition", "rules": value}]
    }))
    .expect("the rules parse");
    match &automation.steps[0] {
        fronta_automation::Step::Condition(condition) => condition.rules.clone(),
        other => panic!("a condition, got {other:?}"),
    }
}

fn problems(value: Value) -> String {
    let types = ValidationContext::with_ticket_types([
        ("order", vec!["waiting-to-pack", "shipped"]),
        ("error", vec!["new", "solved"]),
    ]);
    match Automation::from_value(&value) {
        Ok(automation) => validate(&automation, &types)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n"),
        Err(problems) => problems
            .iter()
            .map(|p| format!("parse: {p}"))
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[test]
fn condition_log_lines() {
    let mut context = Context::from_params(map(json!({
        "_body": {"lines": []},
        "status": "new",
        "amount": "",
        "total": "1500",
        "result": "Redirect",
        "due": "2026-09-07T10:00:00Z",
        "tags": ["waiting-to-pack", "vip"],
        "note": null,
        "customer": {"name": "Eva", "vip": true}
    })));
    context.publish_outputs("tool", map(json!({"status": "done", "isError": false})));
    let rules = rules(json!([
        {"field": "result", "operator": "isNotEmpty"},
        {"field": "missing", "operator": "isNotEmpty"},
        {"field": "result", "operator": "eq", "value": "Missing information"},
        {"field": "missing", "operator": "neq", "value": "Missing information"},
        {"field": "amount", "operator": "lte", "value": 1000},
        {"field": "missing", "operator": "lte", "value": 1000},
        {"field": "total", "operator": "gt", "value": 1000},
        {"field": "total", "operator": "eq", "value": 1500},
        {"field": "due", "operator": "gt", "value": "2026-09-06T23:00:00Z"},
        {"field": "result", "operator": "lt", "value": "Stay"},
        {"field": "tags", "operator": "contains", "value": "vip"},
        {"field": "tags", "operator": "notContains", "value": "shipped"},
        {"field": "tags", "operator": "gt", "value": 1},
        {"field": "note", "operator": "isEmpty"},
        {"field": "note", "operator": "neq", "value": "x"},
        {"field": "customer.name", "operator": "eq", "value": "Eva"},
        {"field": "status", "operator": "eq", "value": "done"},
        {"field": "status", "step": "tool", "operator": "eq", "value": "done"},
        {"field": "isError", "step": "other", "operator": "eq", "value": false},
        {"fieldId": "tool.status", "operator": "eq", "value": "{{status}}"},
        {"field": "status", "operator": "eq", "value": "{{nothing}}"},
        {"field": "status", "operator": "eq"},
        {"field": "status", "operator": "matches", "value": "n.*"}
    ]));
    let lines: Vec<String> = rules
        .iter()
        .map(|rule| evaluate_rule(rule, &context).line)
        .collect();
    insta::assert_snapshot!("condition_log_lines", lines.join("\n"));
}

#[test]
fn condition_summary_lines() {
    let context = Context::from_params(map(json!({"type": "order", "tags": ["waiting-to-pack"]})));
    let condition = |match_kind| ConditionStep {
        name: "isOrder".into(),
        match_kind,
        rules: rules(json!([
            {"field": "type", "operator": "eq", "value": "order"},
            {"field": "tags", "operator": "contains", "value": "shipped"}
        ])),
        then_steps: vec![],
        else_steps: vec![],
    };
    let all = evaluate(&condition(Match::All), &context);
    let any = evaluate(&condition(Match::Any), &context);
    assert!(!all.met && any.met, "one of two rules holds");
    insta::assert_snapshot!(
        "condition_summary_lines",
        [all.lines.join("\n"), any.lines.join("\n")].join("\n---\n")
    );
}

#[test]
fn problems_of_a_broken_order_automation() {
    insta::assert_snapshot!(
        "problems_broken_order",
        problems(json!({
            "name": " ",
            "trigger": {"type": "webhook", "params": [
                {"name": "orderId", "path": "data..id", "type": "string", "required": true},
                {"name": "orderId", "path": "", "type": "string"},
                {"name": "_body", "path": "body"}
            ]},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert", "service": "shop",
                 "input": {"title": "Order {{orderId}", "type": "order", "status": "packed",
                           "tags": "waiting-to-pack", "phase": "packing"}},
                {"name": "ticket", "op": "ticket/next-phase", "input": {"ticket": "{{ticket.id}}"}},
                {"name": "assign", "op": "ticket/assign-least-busy", "input": {"ticket": "{{tiket.id}}"}},
                {"name": "type", "op": "ticket/set-type", "input": {"ticket": "{{ticket.id}}", "type": "invoice"}}
            ]
        }))
    );
}

#[test]
fn problems_of_a_broken_poll_automation() {
    insta::assert_snapshot!(
        "problems_broken_poll",
        problems(json!({
            "name": "mail",
            "trigger": {"type": "poll", "source": "mail", "intervalSec": 5},
            "steps": [
                {"name": "wait", "op": "flow/pause", "input": {"seconds": -1}},
                {"name": "wait2", "op": "flow/pause", "input": {"seconds": "ten"}},
                {"name": "each", "type": "forEach", "items": "lines: {{_body.lines}}", "as": "line.x", "steps": [
                    {"name": "say", "op": "flow/log", "input": {"message": "{{line.x}} {{ticket.id}}"}}
                ]},
                {"name": "call", "op": "http/request", "service": "erp",
                 "input": {"method": "FETCH", "url": "ftp://erp.test", "timeoutSec": 0, "headers": "x"}},
                {"name": "check", "type": "condition", "rules": [], "then": [
                    {"name": "log.it", "op": "flow/log", "input": {"message": "{{call.status}} {{ }}"}}
                ]}
            ]
        }))
    );
}

#[test]
fn problems_of_a_broken_schedule_and_event_automation() {
    let schedule = problems(json!({
        "name": "morning",
        "trigger": {"type": "schedule", "cron": "0 7 * *", "timezone": ""},
        "steps": [
            {"name": "log", "op": "flow/log", "input": {"message": "{{secrets}} {{_body.x}} {{report}}"}},
            {"name": "incident", "op": "incident/create", "input": {"title": "t"}}
        ]
    }));
    let event = problems(json!({
        "name": "route",
        "trigger": {"type": "event", "event": "ticket.changed"},
        "steps": [
            {"name": "status", "op": "ticket/set-status", "input": {"ticket": "{{ticket.id}}", "status": "lost"}},
            {"name": "c", "type": "condition", "rules": [
                {"field": "ticket.type", "operator": "eq", "value": "order"},
                {"field": "status", "step": "status", "operator": "eq", "value": "shipped"},
                {"field": "assignee", "operator": "isEmpty"}
            ]}
        ]
    }));
    let shape = problems(json!({
        "name": "shape", "trigger": {"type": "cron"},
        "steps": [{"name": "x", "type": "condition", "fieldId": "a", "operator": "eq", "value": 1,
                   "rules": [{"field": "a", "operator": "eq", "value": 1}]}]
    }));
    insta::assert_snapshot!(
        "problems_schedule_event_shape",
        [schedule, event, shape].join("\n---\n")
    );
}
