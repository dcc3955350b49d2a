//! The webhook contract (DESIGN §4.2, seed 000 "The webhook contract"): read each
//! trigger parameter from the body by its dot path, check its type, and keep the whole
//! body as `_body`.
//!
//! Paths are dot paths whose numeric segments index arrays (`errors.0.message`); they are
//! turned into JSON pointers (`/errors/0/message`, with `~` and `/` escaped) and read with
//! [`Value::pointer`]. Extra fields in the body are accepted — senders send more than we
//! need. Errors are data ([`ContractError`]); the HTTP layer turns them into 400 JSON.
//!
//! Decisions:
//! - A `null` at the path counts as not sent: a required parameter is missing, an
//!   optional one is `null` in the context — a template of it alone stays `null`, inside
//!   text it renders as nothing, and a condition shows it as not arrived.
//! - Types are strict: `"5001"` is not a number and `5001` is not a string. Coercing
//!   would hide a sender's change of shape; the 400 names what was expected and found.
//! - The first failing parameter (in declaration order) is reported, as one 400 names
//!   one parameter.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::context::BODY_KEY;
use crate::dates::parse_instant;
use crate::model::{ParamType, WebhookParam, json_kind};
use crate::template::parse_index;

/// Why a body does not satisfy the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "code", rename_all = "snake_case")]
pub enum ContractError {
    /// A required parameter is absent (or `null`) at its path.
    #[error("missing parameter \"{parameter}\": nothing at \"{path}\"")]
    MissingParameter { parameter: String, path: String },
    /// The value at the path has the wrong type.
    #[error("parameter \"{parameter}\" at \"{path}\" must be a {expected}, found {found}")]
    InvalidParameter {
        parameter: String,
        path: String,
        expected: ParamType,
        found: String,
    },
}

impl ContractError {
    /// The API error code: `missing_parameter` or `invalid_parameter`.
    pub fn code(&self) -> &'static str {
        match self {
            ContractError::MissingParameter { .. } => "missing_parameter",
            ContractError::InvalidParameter { .. } => "invalid_parameter",
        }
    }
}

impl std::fmt::Display for ParamType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Reads every parameter from `body`; the result also holds `_body`, the whole body.
pub fn extract(params: &[WebhookParam], body: &Value) -> Result<Map<String, Value>, ContractError> {
    let mut values = Map::new();
    for param in params {
        let found = body
            .pointer(&to_pointer(&param.path))
            .filter(|value| !value.is_null());
        match found {
            None if param.required => {
                return Err(ContractError::MissingParameter {
                    parameter: param.name.clone(),
                    path: param.path.clone(),
                });
            }
            None => {
                values.insert(param.name.clone(), Value::Null);
            }
            Some(value) => {
                if let Some(found) = type_mismatch(param.param_type, value) {
                    return Err(ContractError::InvalidParameter {
                        parameter: param.name.clone(),
                        path: param.path.clone(),
                        expected: param.param_type,
                        found,
                    });
                }
                values.insert(param.name.clone(), value.clone());
            }
        }
    }
    values.insert(BODY_KEY.to_owned(), body.clone());
    Ok(values)
}

/// `None` when the value has the type, else what was found instead.
fn type_mismatch(expected: ParamType, value: &Value) -> Option<String> {
    let fits = match expected {
        ParamType::String => value.is_string(),
        ParamType::Number => value.is_number(),
        ParamType::Boolean => value.is_boolean(),
        ParamType::Object => value.is_object(),
        ParamType::Array => value.is_array(),
        ParamType::Date => {
            return match value {
                Value::String(text) if parse_instant(text).is_some() => None,
                Value::String(_) => Some("a string that is not an ISO-8601 date".to_owned()),
                other => Some(json_kind(other).to_owned()),
            };
        }
    };
    (!fits).then(|| json_kind(value).to_owned())
}

/// `errors.0.message` → `/errors/0/message`; `~` and `/` in a segment are escaped.
/// The empty path is the whole body.
pub fn to_pointer(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    path.split('.')
        .map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Why a parameter path is malformed, if it is.
pub fn path_problem(path: &str) -> Option<&'static str> {
    if path.trim().is_empty() {
        return Some("the path is empty");
    }
    let segments: Vec<&str> = path.split('.').collect();
    if segments.iter().any(|segment| segment.is_empty()) {
        return Some("the path has an empty segment (a leading, trailing or double dot)");
    }
    if segments.iter().any(|segment| segment.trim() != *segment) {
        return Some("a path segment starts or ends with a space");
    }
    None
}

/// Indices above this are left out of the example body (it is help, not data).
const EXAMPLE_MAX_INDEX: usize = 20;

/// A body that satisfies the parameters: nested objects for the paths, arrays for
/// numeric segments (earlier elements `null`), a sample per type. Where two paths
/// collide, the first parameter's shape wins.
pub fn example_body(params: &[WebhookParam]) -> Value {
    let mut body = Value::Null;
    for param in params {
        if path_problem(&param.path).is_some() {
            continue;
        }
        let segments: Vec<&str> = param.path.split('.').collect();
        place(&mut body, &segments, sample(param));
    }
    if body.is_null() {
        Value::Object(Map::new())
    } else {
        body
    }
}

fn sample(param: &WebhookParam) -> Value {
    match param.param_type {
        ParamType::String => Value::String(param.name.clone()),
        ParamType::Number => json!(42),
        ParamType::Boolean => json!(true),
        ParamType::Date => json!("2026-01-31T09:30:00Z"),
        ParamType::Object => json!({}),
        ParamType::Array => json!([]),
    }
}

fn place(node: &mut Value, segments: &[&str], sample: Value) {
    let Some((first, rest)) = segments.split_first() else {
        if node.is_null() {
            *node = sample;
        }
        return;
    };
    if node.is_null() {
        *node = match parse_index(first) {
            Some(_) => Value::Array(Vec::new()),
            None => Value::Object(Map::new()),
        };
    }
    match node {
        Value::Object(map) => {
            let child = map.entry((*first).to_owned()).or_insert(Value::Null);
            place(child, rest, sample);
        }
        Value::Array(items) => {
            let Some(index) = parse_index(first).filter(|i| *i <= EXAMPLE_MAX_INDEX) else {
                return;
            };
            if items.len() <= index {
                items.resize(index + 1, Value::Null);
            }
            if let Some(child) = items.get_mut(index) {
                place(child, rest, sample);
            }
        }
        // Another parameter's leaf already sits here; its shape wins.
        _ => {}
    }
}

/// The `GET /webhook/{token}` help of API.md: method, URL, parameters, example body.
pub fn help(url: &str, params: &[WebhookParam]) -> Value {
    json!({
        "method": "POST",
        "url": url,
        "parameters": params,
        "exampleBody": example_body(params),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, path: &str, param_type: ParamType, required: bool) -> WebhookParam {
        WebhookParam {
            name: name.into(),
            path: path.into(),
            param_type,
            required,
        }
    }

    #[test]
    fn nested_paths_and_array_indices_are_read() {
        let body = json!({
            "document": {"id": "D-99"},
            "errors": [{"code": "OCR_FAIL", "message": "Could not read the amount"}],
            "extra": "ignored"
        });
        let params = [
            param("docId", "document.id", ParamType::String, true),
            param("errorMessage", "errors.0.message", ParamType::String, true),
        ];
        let values = extract(&params, &body).expect("the body satisfies the contract");
        assert_eq!(values.get("docId"), Some(&json!("D-99")), "a nested key");
        assert_eq!(
            values.get("errorMessage"),
            Some(&json!("Could not read the amount")),
            "an array index"
        );
        assert_eq!(
            values.get("_body"),
            Some(&body),
            "the whole body, extra fields included"
        );
    }

    #[test]
    fn missing_required_parameter_names_it_and_its_path() {
        let params = [param("docId", "document.id", ParamType::String, true)];
        for body in [
            json!({}),
            json!({"document": {"id": null}}),
            json!({"document": []}),
        ] {
            assert_eq!(
                extract(&params, &body),
                Err(ContractError::MissingParameter {
                    parameter: "docId".into(),
                    path: "document.id".into()
                }),
                "absent or null is missing: {body}"
            );
        }
    }

    #[test]
    fn optional_parameter_absent_or_null_is_null_in_the_context() {
        let params = [param("note", "note", ParamType::String, false)];
        for body in [json!({"note": null}), json!({})] {
            let values = extract(&params, &body).expect("optional may be absent");
            assert_eq!(
                values.get("note"),
                Some(&Value::Null),
                "not sent is null, so {{{{note}}}} has a value: {body}"
            );
        }
    }

    #[test]
    fn wrong_type_is_invalid_with_expected_and_found() {
        let cases = [
            (ParamType::String, json!(5001), "number"),
            (ParamType::Number, json!("5001"), "string"),
            (ParamType::Boolean, json!("true"), "string"),
            (ParamType::Object, json!([1]), "array"),
            (ParamType::Array, json!({}), "object"),
            (
                ParamType::Date,
                json!("tomorrow"),
                "a string that is not an ISO-8601 date",
            ),
            (ParamType::Date, json!(1_757_000_000), "number"),
        ];
        for (expected, value, found) in cases {
            let params = [param("p", "p", expected, true)];
            assert_eq!(
                extract(&params, &json!({"p": value})),
                Err(ContractError::InvalidParameter {
                    parameter: "p".into(),
                    path: "p".into(),
                    expected,
                    found: found.into()
                }),
                "{expected} given {value}"
            );
        }
    }

    #[test]
    fn every_type_accepts_its_own_values() {
        let params = [
            param("s", "s", ParamType::String, true),
            param("n", "n", ParamType::Number, true),
            param("b", "b", ParamType::Boolean, true),
            param("d", "d", ParamType::Date, true),
            param("o", "o", ParamType::Object, true),
            param("a", "a", ParamType::Array, true),
        ];
        let body = json!({"s": "x", "n": 1.5, "b": false, "d": "2026-09-07T10:00:00+02:00", "o": {}, "a": []});
        let values = extract(&params, &body).expect("every value has its type");
        assert_eq!(
            values.get("d"),
            Some(&json!("2026-09-07T10:00:00+02:00")),
            "a date is kept as sent"
        );
        assert_eq!(values.len(), 7, "six parameters and _body");
    }

    #[test]
    fn errors_serialize_as_the_api_error_body() {
        let error = ContractError::MissingParameter {
            parameter: "docId".into(),
            path: "document.id".into(),
        };
        assert_eq!(
            serde_json::to_value(&error).expect("serializes"),
            json!({"code": "missing_parameter", "parameter": "docId", "path": "document.id"}),
            "the fields API.md's 400 carries"
        );
        assert_eq!(error.code(), "missing_parameter", "the code");
        assert_eq!(
            error.to_string(),
            "missing parameter \"docId\": nothing at \"document.id\"",
            "the message names parameter and path"
        );
    }

    #[test]
    fn pointer_escapes_tilde_and_slash() {
        assert_eq!(
            to_pointer("errors.0.message"),
            "/errors/0/message",
            "dots become slashes"
        );
        assert_eq!(to_pointer("a/b.c~d"), "/a~1b/c~0d", "RFC 6901 escapes");
        let body = json!({"a/b": {"c~d": 1}});
        let params = [param("x", "a/b.c~d", ParamType::Number, true)];
        assert_eq!(
            extract(&params, &body)
                .expect("escaped keys are found")
                .get("x"),
            Some(&json!(1)),
            "keys with / and ~ are reachable"
        );
    }

    #[test]
    fn malformed_paths_are_named() {
        for (path, expected) in [
            ("", Some("the path is empty")),
            (
                "a..b",
                Some("the path has an empty segment (a leading, trailing or double dot)"),
            ),
            (
                ".a",
                Some("the path has an empty segment (a leading, trailing or double dot)"),
            ),
            ("a. b", Some("a path segment starts or ends with a space")),
            ("errors.0.message", None),
        ] {
            assert_eq!(path_problem(path), expected, "path {path:?}");
        }
    }

    #[test]
    fn example_body_builds_nested_objects_and_arrays() {
        let params = [
            param("kind", "kind", ParamType::String, true),
            param("orderId", "data.order.id", ParamType::String, true),
            param("total", "data.order.total", ParamType::Number, false),
            param("errorMessage", "errors.1.message", ParamType::String, false),
            param("due", "due", ParamType::Date, false),
            param("paid", "paid", ParamType::Boolean, false),
        ];
        let body = example_body(&params);
        assert_eq!(
            body,
            json!({
                "kind": "kind",
                "data": {"order": {"id": "orderId", "total": 42}},
                "errors": [null, {"message": "errorMessage"}],
                "due": "2026-01-31T09:30:00Z",
                "paid": true
            }),
            "one sample per type at each path"
        );
        assert!(
            extract(&params, &body).is_ok(),
            "the example body satisfies its own contract"
        );
    }

    #[test]
    fn help_lists_method_url_parameters_and_example() {
        let params = [param("kind", "kind", ParamType::String, true)];
        assert_eq!(
            help("http://host/webhook/abc", &params),
            json!({
                "method": "POST",
                "url": "http://host/webhook/abc",
                "parameters": [{"name": "kind", "path": "kind", "type": "string", "required": true}],
                "exampleBody": {"kind": "kind"}
            }),
            "API.md's GET help"
        );
    }
}
