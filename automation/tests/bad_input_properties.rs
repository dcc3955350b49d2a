//! Bad input, as property tests: whatever a webhook sends, whatever an automation
//! document says, whatever a template holds and whatever bytes a checkpoint has, the
//! runtime never panics and answers an error that says what is wrong.
//!
//! - webhook bodies through a contract: `extract` is `Ok` exactly when every required
//!   parameter is present with its type, and its error names the parameter and its path;
//! - contract paths: `path_problem` judges any text, and every path it accepts reads the
//!   value an example body holds there;
//! - automation JSON: any text, and a valid document with any node replaced by any JSON,
//!   parses or answers problems, each with a path and a message; what parses validates
//!   without panicking;
//! - templates: any text parses or answers an error naming the text; a parsed template
//!   whose names are all present renders; text without `{{` renders as itself;
//! - checkpoints: any bytes, and valid-looking JSON with any field replaced, decode or
//!   answer "the checkpoint cannot be read: …".

use fronta_automation::contract::{example_body, extract, path_problem, to_pointer};
use fronta_automation::executor::ExecState;
use fronta_automation::model::{ParamType, WebhookParam};
use fronta_automation::template::{self, parse, render_str};
use fronta_automation::validate::validate;
use fronta_automation::{Automation, ContractError, ValidationContext};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1.0e12..1.0e12f64).prop_map(|n| json!(n)),
        ".{0,12}".prop_map(Value::String),
        "20[0-9]{2}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]Z".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-c]{1,2}|[0-2]", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn param_type() -> impl Strategy<Value = ParamType> {
    prop::sample::select(vec![
        ParamType::String,
        ParamType::Number,
        ParamType::Boolean,
        ParamType::Object,
        ParamType::Array,
        ParamType::Date,
    ])
}

/// Paths over the same small alphabet as [`any_json`]'s keys, so they often hit.
fn path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-c]{1,2}|[0-2]", 1..4).prop_map(|segments| segments.join("."))
}

fn params() -> impl Strategy<Value = Vec<WebhookParam>> {
    prop::collection::vec((path(), param_type(), any::<bool>()), 0..4).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (path, param_type, required))| WebhookParam {
                name: format!("p{index}"),
                path,
                param_type,
                required,
            })
            .collect()
    })
}

fn fits(param_type: ParamType, value: &Value) -> bool {
    match param_type {
        ParamType::String => value.is_string(),
        ParamType::Number => value.is_number(),
        ParamType::Boolean => value.is_boolean(),
        ParamType::Object => value.is_object(),
        ParamType::Array => value.is_array(),
        ParamType::Date => value
            .as_str()
            .is_some_and(|text| fronta_automation::dates::parse_instant(text).is_some()),
    }
}

/// A valid automation document (the orders automation of API.md).
fn orders() -> Value {
    json!({
        "name": "Orders from the web shop",
        "trigger": {"type": "webhook", "params": [
            {"name": "kind", "path": "kind", "type": "string", "required": true},
            {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}
        ]},
        "steps": [
            {"name": "ticket", "op": "ticket/upsert",
             "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                       "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}},
            {"name": "check", "if": {"match": "all", "rules": [
                {"field": "kind", "operator": "equals", "value": "order.created"}]},
             "then": [{"name": "note", "op": "flow/log", "input": {"message": "new {{orderId}}"}}]}
        ]
    })
}

/// Every JSON pointer inside `value`.
fn pointers(value: &Value, at: String, found: &mut Vec<String>) {
    found.push(at.clone());
    match value {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{index}"), found);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                pointers(
                    item,
                    format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")),
                    found,
                );
            }
        }
        _ => {}
    }
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
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    #[test]
    fn webhook_bodies_are_accepted_exactly_when_they_keep_the_contract(
        params in params(),
        body in any_json(),
    ) {
        let result = extract(&params, &body);
        let first_broken = params.iter().find_map(|param| {
            match body.pointer(&to_pointer(&param.path)).filter(|value| !value.is_null()) {
                None if param.required => Some((param, "missing")),
                Some(value) if !fits(param.param_type, value) => Some((param, "invalid")),
                _ => None,
            }
        });
        match (&result, first_broken) {
            (Ok(values), None) => {
                prop_assert_eq!(values.get("_body"), Some(&body), "the whole body is kept");
                for param in &params {
                    // Not sent (absent or null) reads as null: an optional parameter has a
                    // value, `null`, so its templates render.
                    let found = body
                        .pointer(&to_pointer(&param.path))
                        .filter(|v| !v.is_null())
                        .unwrap_or(&serde_json::Value::Null);
                    prop_assert_eq!(values.get(&param.name), Some(found), "{} read from {}", param.name, param.path);
                }
            }
            (Err(err), Some((param, kind))) => {
                let text = err.to_string();
                prop_assert!(text.contains(&param.name) && text.contains(&param.path),
                    "the error names the parameter and its path: {}", text);
                let code_fits = match err {
                    ContractError::MissingParameter { .. } => kind == "missing",
                    ContractError::InvalidParameter { .. } => kind == "invalid",
                };
                prop_assert!(code_fits, "{} for a {} parameter", err.code(), kind);
            }
            (result, broken) => prop_assert!(false, "extract answered {:?} but the first broken parameter is {:?}", result, broken.map(|(p, k)| (p.name.clone(), k))),
        }
    }

    #[test]
    fn any_path_text_is_judged_and_accepted_paths_read_their_example(text in ".{0,24}") {
        match path_problem(&text) {
            Some(problem) => prop_assert!(!problem.is_empty(), "a problem says what is wrong"),
            None => {
                let params = vec![WebhookParam {
                    name: "x".into(),
                    path: text.clone(),
                    param_type: ParamType::String,
                    required: true,
                }];
                let example = example_body(&params);
                // Long numeric segments are left out of the example (it is help, not
                // data); every other accepted path reads back its sample.
                let indexed = text.split('.').any(|s| s.parse::<usize>().is_ok_and(|n| n > 20));
                if !indexed {
                    prop_assert!(extract(&params, &example).is_ok(),
                        "the example body of {:?} satisfies it: {}", text, example);
                }
            }
        }
    }

    #[test]
    fn any_text_as_an_automation_parses_or_says_what_is_wrong(text in ".{0,64}") {
        if let Err(problems) = Automation::from_json(&text) {
            prop_assert!(!problems.is_empty(), "a refusal lists at least one problem");
            for problem in &problems {
                prop_assert!(!problem.message.is_empty(), "every problem has a message");
            }
        }
    }

    #[test]
    fn a_valid_automation_with_any_node_replaced_parses_or_says_where(
        pick in any::<prop::sample::Index>(),
        replacement in any_json(),
    ) {
        let mut document = orders();
        let mut found = Vec::new();
        pointers(&document, String::new(), &mut found);
        let at = pick.get(&found).clone();
        if let Some(node) = document.pointer_mut(&at) {
            *node = replacement;
        }
        match Automation::from_value(&document) {
            Ok(automation) => {
                let context = ValidationContext::with_ticket_types([(
                    "order",
                    vec!["waiting-to-pack", "shipped"],
                )]);
                for problem in validate(&automation, &context) {
                    prop_assert!(!problem.message.is_empty(), "a validation problem says what: {:?}", problem);
                }
            }
            Err(problems) => {
                prop_assert!(!problems.is_empty(), "a refusal lists at least one problem");
                for problem in &problems {
                    prop_assert!(!problem.message.is_empty(), "every problem has a message");
                }
            }
        }
    }

    #[test]
    fn templates_parse_or_name_the_text_and_render_when_their_names_are_there(
        text in "([a-z {}]|\\{\\{|\\}\\}){0,24}",
        value in any_json(),
    ) {
        match parse(&text) {
            Ok(_) => {
                let mut scope = Map::new();
                for name in template::names_in(&Value::String(text.clone())) {
                    scope.insert(name, value.clone());
                }
                let rendered = render_str(&text, &scope);
                prop_assert!(rendered.is_ok(), "{:?} with every name present renders: {:?}", text, rendered);
                if !text.contains("{{") {
                    prop_assert_eq!(rendered.ok(), Some(Value::String(text.clone())), "literal text is itself");
                }
                let empty = render_str(&text, &Map::new());
                if let Err(err) = empty {
                    prop_assert!(!err.to_string().is_empty(), "a missing name is named");
                }
            }
            Err(err) => {
                let message = err.to_string();
                prop_assert!(message.contains("template"), "the error says it is about a template: {}", message);
                prop_assert!(render_str(&text, &Map::new()).is_err(), "a template that does not parse does not render");
            }
        }
    }

    #[test]
    fn any_bytes_as_a_checkpoint_decode_or_say_so(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Err(message) = ExecState::decode(&bytes) {
            prop_assert!(message.starts_with("the checkpoint cannot be read"), "{}", message);
        }
    }

    #[test]
    fn a_checkpoint_with_any_field_replaced_decodes_or_says_so(
        field in prop::sample::select(vec!["stack", "context", "executed", "steps", "ticket", "pauseUntil"]),
        replacement in any_json(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut state = json!({
            "stack": [{"block": [], "index": 0, "each": null}],
            "context": {},
            "executed": 0,
            "steps": [],
            "ticket": null,
            "pauseUntil": null
        });
        state[field] = replacement;
        let bytes = serde_json::to_vec(&state).expect("JSON encodes");
        for bytes in [&bytes[..], &bytes[..cut.index(bytes.len() + 1)]] {
            if let Err(message) = ExecState::decode(bytes) {
                prop_assert!(message.starts_with("the checkpoint cannot be read"), "{}", message);
            }
        }
    }
}
