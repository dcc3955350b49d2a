//! Saving automations with `ticket/get`, `ticket/comment` and `ticket/upsert`'s
//! `onExisting` (issue 23): what a save refuses, each problem at its path, and what it
//! lets through. What the steps do is pinned in the server's end-to-end tests
//! (`server/tests/ticket_steps.rs`) and the stores' scenarios.

use fronta_automation::validate::validate;
use fronta_automation::{Automation, Problem, ValidationContext};
use serde_json::{Value, json};

fn problems_of(value: Value) -> Vec<String> {
    let automation = Automation::from_value(&value).expect("the test automation parses");
    let context = ValidationContext::with_ticket_types([
        ("order", vec!["waiting-to-pack", "shipped"]),
        ("error", vec!["new", "solved"]),
    ]);
    validate(&automation, &context)
        .iter()
        .map(Problem::to_string)
        .collect()
}

fn upsert_with(on_existing: Value) -> Value {
    json!({"name": "o", "trigger": {"type": "manual"},
           "steps": [{"name": "order", "op": "ticket/upsert",
                      "input": {"externalId": "o-1", "type": "order", "status": "shipped",
                                "tags": ["shipped"], "onExisting": on_existing}}]})
}

fn manual(steps: Value) -> Value {
    json!({"name": "g", "trigger": {"type": "manual"}, "steps": steps})
}

#[test]
fn on_existing_names_inputs_the_step_gives_and_nothing_else() {
    for fine in [
        json!(["status", "tags"]),
        json!("all"),
        json!([]),
        json!(null),
    ] {
        assert_eq!(
            problems_of(upsert_with(fine.clone())),
            Vec::<String>::new(),
            "{fine} is fine"
        );
    }
    let found = problems_of(upsert_with(json!(["status", "stauts", "title", "closed"])));
    assert_eq!(found.len(), 3, "{found:#?}");
    assert_eq!(
        found[0],
        "steps[0].input.onExisting[1]: unknown input \"stauts\" in onExisting (the inputs \
         that can apply to an existing ticket: title, type, status, tags, fields, group; or \
         \"all\")",
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("steps[0].input.onExisting[3]: unknown input \"closed\""),
        "an upsert never reopens nor closes: {found:#?}"
    );
    assert_eq!(
        found[2],
        "steps[0].input.onExisting[2]: onExisting names \"title\", which this step does not \
         set; give input \"title\" or leave it out of onExisting",
        "{found:#?}"
    );
    let templated = problems_of(upsert_with(json!("{{which}}")));
    assert!(
        templated.iter().any(|problem| problem
            .starts_with("steps[0].input.onExisting: onExisting cannot be a template")),
        "{templated:#?}"
    );
    let bare = problems_of(upsert_with(json!("status")));
    assert_eq!(bare.len(), 1, "{bare:#?}");
    assert!(
        bare[0].starts_with("steps[0].input.onExisting: onExisting must be a list of input names"),
        "{bare:#?}"
    );
    let external = problems_of(upsert_with(json!(["externalId"])));
    assert!(
        external[0].contains("\"externalId\" finds the existing ticket; it never changes"),
        "{external:#?}"
    );
}

#[test]
fn ticket_get_and_comment_need_a_ticket_the_run_has_or_one_they_name() {
    let found = problems_of(manual(json!([
        {"name": "say", "op": "ticket/comment", "input": {"text": "  "}}
    ])));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].starts_with(
            "steps[0].input.ticket: ticket/comment needs a ticket: this run has none of its own \
             here (no ticket event starts it and no earlier step writes or reads one)"
        ),
        "{found:#?}"
    );
    assert_eq!(
        found[1],
        "steps[0].input.text: the note is empty: write its text"
    );
    let found = problems_of(manual(json!([
        {"name": "now", "op": "ticket/get"},
        {"name": "other", "op": "ticket/get", "input": {"ticket": "order 5"}},
        {"name": "blank", "op": "ticket/comment"}
    ])));
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with("steps[0].input.ticket: ticket/get needs a ticket"),
        "{found:#?}"
    );
    assert!(
        found[1].starts_with("steps[1].input.ticket: \"order 5\" names no ticket"),
        "{found:#?}"
    );
    assert!(
        found[2].starts_with("steps[2].input.text: missing input \"text\""),
        "a step after one that read a ticket has one; its text is still needed: {found:#?}"
    );
    // An event's ticket is the run's.
    assert_eq!(
        problems_of(
            json!({"name": "e", "trigger": {"type": "event", "event": "ticket.created"},
            "steps": [{"name": "now", "op": "ticket/get"},
                      {"name": "say", "op": "ticket/comment", "input": {"text": "{{now.status}}"}}]})
        ),
        Vec::<String>::new()
    );
    // So is one an earlier step wrote; a step may also name one.
    assert_eq!(
        problems_of(manual(json!([
            {"name": "order", "op": "ticket/upsert", "input": {"externalId": "o-1"}},
            {"name": "now", "op": "ticket/get"},
            {"name": "by", "op": "ticket/get", "input": {"ticket": "TK-12"}},
            {"name": "id", "op": "ticket/get", "input": {"ticket": 12}},
            {"name": "say", "op": "ticket/comment",
             "input": {"ticket": "{{order.id}}", "text": "closed: {{now.closed}}"}}
        ]))),
        Vec::<String>::new()
    );
}

#[test]
fn ticket_get_publishes_the_tickets_fields_and_no_others() {
    let found = problems_of(
        json!({"name": "e", "trigger": {"type": "event", "event": "ticket.created"},
        "steps": [{"name": "now", "op": "ticket/get"},
                  {"name": "check", "type": "condition", "match": "all",
                   "rules": [{"field": "now.closed", "operator": "eq", "value": false},
                             {"field": "now.assignee", "operator": "isEmpty"}],
                   "then": [{"name": "say", "op": "flow/log",
                             "input": {"message": "{{now.number}} {{now.stauts}}"}}]}]}),
    );
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("steps[1].then[0].input.message: {{now.stauts}} names nothing")
            && found[0].contains("step \"now\" (ticket/get) has no output \"stauts\""),
        "{found:#?}"
    );
}

#[test]
fn the_catalogue_offers_the_new_steps_and_input() {
    let catalogue = fronta_automation::catalogue::as_json();
    let op = |name: &str| {
        catalogue["ops"]
            .as_array()
            .and_then(|ops| ops.iter().find(|op| op["op"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} in the catalogue"))
    };
    let get = op("ticket/get");
    assert_eq!(get["required"], json!([]));
    assert_eq!(get["optional"], json!(["ticket"]));
    assert_eq!(get["outputs"][0], "id");
    let comment = op("ticket/comment");
    assert_eq!(comment["required"], json!(["text"]));
    assert_eq!(comment["optional"], json!(["ticket"]));
    assert!(
        op("ticket/upsert")["optional"]
            .as_array()
            .is_some_and(|optional| optional.contains(&json!("onExisting")))
    );
}

/// The recipe printed in `docs/recipes.md` is the file the tests run.
#[test]
fn the_documented_sla_recipe_is_the_tested_one() {
    let page = include_str!("../../docs/recipes.md");
    let start = page.find("```json\n").expect("a JSON block") + "```json\n".len();
    let end = start + page[start..].find("```").expect("its end");
    let printed: Value = serde_json::from_str(&page[start..end]).expect("the block is JSON");
    let file: Value = serde_json::from_str(include_str!("../../docs/recipes/sla-breach.json"))
        .expect("the file is JSON");
    assert_eq!(
        printed, file,
        "docs/recipes.md shows recipes/sla-breach.json"
    );
    assert_eq!(
        problems_of(file),
        Vec::<String>::new(),
        "the recipe saves as it is"
    );
}
