//! `{{name}}` templates: parsing, name resolution and rendering of whole JSON inputs.
//!
//! Rules (API.md, "Templates"):
//! - A string that is exactly one `{{…}}` keeps the JSON type of its value — an array
//!   for `forEach`, a number, an object.
//! - Text with several parts becomes a string; non-string values are written as compact
//!   JSON, and `null` (an optional parameter that was not sent) as nothing.
//! - A name that resolves to nothing is an error ([`TemplateError::Missing`]), never an
//!   empty string: "has not arrived" must not pass for "empty".
//! - `{{a.b.0.c}}` walks objects by key and arrays by index, like contract paths.
//! - Keys of the context may themselves hold dots (outputs are published as
//!   `step.key`), so a name resolves through the **longest** key prefix present in the
//!   context, then walks the rest inside that value; if that walk finds nothing, the
//!   next shorter prefix is tried.
//!
//! Not supported: escaping a literal `{{`, filters, defaults. Whitespace inside the
//! braces is ignored (`{{ orderId }}`). Only string *values* are rendered, never object
//! keys.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

/// Where names are looked up: exact keys to values.
///
/// Implemented for [`crate::Context`] and plain maps, so the executor can layer
/// values it must not checkpoint (secrets) over the run context.
pub trait Lookup {
    /// The value under exactly this key (no dot walking).
    fn lookup(&self, key: &str) -> Option<&Value>;
}

impl Lookup for Map<String, Value> {
    fn lookup(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

impl Lookup for BTreeMap<String, Value> {
    fn lookup(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

impl<S: std::hash::BuildHasher> Lookup for HashMap<String, Value, S> {
    fn lookup(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The name resolves to nothing in the context.
    #[error("{{{{{name}}}}} has no value: nothing in the run's context provides \"{name}\"")]
    Missing { name: String },
    /// `{{` without a closing `}}`.
    #[error("unclosed template: \"{{{{\" without \"}}}}\" in {text:?}")]
    Unclosed { text: String },
    /// `{{}}` or `{{  }}`.
    #[error("empty template \"{{{{}}}}\" in {text:?}")]
    EmptyName { text: String },
}

/// A piece of a template string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Literal text.
    Text(&'a str),
    /// The (trimmed) name between `{{` and `}}`.
    Name(&'a str),
}

/// Splits a string into text and `{{name}}` segments.
pub fn parse(text: &str) -> Result<Vec<Segment<'_>>, TemplateError> {
    let mut segments = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            segments.push(Segment::Text(&rest[..open]));
        }
        let after_open = &rest[open + 2..];
        let Some(close) = after_open.find("}}") else {
            return Err(TemplateError::Unclosed {
                text: text.to_owned(),
            });
        };
        let name = after_open[..close].trim();
        if name.is_empty() {
            return Err(TemplateError::EmptyName {
                text: text.to_owned(),
            });
        }
        segments.push(Segment::Name(name));
        rest = &after_open[close + 2..];
    }
    if !rest.is_empty() {
        segments.push(Segment::Text(rest));
    }
    Ok(segments)
}

/// The name when the whole string is exactly one `{{name}}` (so it keeps its type).
pub fn single_name(text: &str) -> Option<&str> {
    match parse(text).ok()?.as_slice() {
        [Segment::Name(name)] => Some(name),
        _ => None,
    }
}

/// Whether the string holds any `{{` at all (a literal otherwise).
pub fn is_literal(text: &str) -> bool {
    !text.contains("{{")
}

/// Resolves a dotted name: the longest key prefix present in `scope`, then a walk of the
/// rest through objects (by key) and arrays (by index).
pub fn resolve<'a, L: Lookup + ?Sized>(scope: &'a L, name: &str) -> Option<&'a Value> {
    // Prefix ends, longest first: the whole name, then before each dot from the right.
    let ends = std::iter::once(name.len()).chain(name.rmatch_indices('.').map(|(at, _)| at));
    for end in ends {
        if let Some(value) = scope.lookup(&name[..end]) {
            let rest = name.get(end + 1..).unwrap_or("");
            let found = if end == name.len() {
                Some(value)
            } else {
                walk(value, rest)
            };
            if found.is_some() {
                return found;
            }
        }
    }
    None
}

/// Walks a dot path (`lines.0.sku`) inside a value; numeric segments index arrays and
/// are keys in objects.
pub fn walk<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(value);
    }
    path.split('.')
        .try_fold(value, |current, segment| match current {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => parse_index(segment).and_then(|index| items.get(index)),
            _ => None,
        })
}

/// An array index as JSON pointers read it: digits, no leading zero (but `0`).
pub(crate) fn parse_index(segment: &str) -> Option<usize> {
    let digits = !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit());
    if !digits || (segment.len() > 1 && segment.starts_with('0')) {
        return None;
    }
    segment.parse().ok()
}

/// A value as text inside a longer string: strings as they are, `null` as nothing, the
/// rest compact JSON.
pub fn to_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Renders one string: exactly one `{{name}}` keeps the value's type; anything else is
/// a string (a string without templates comes back unchanged).
pub fn render_str<L: Lookup + ?Sized>(text: &str, scope: &L) -> Result<Value, TemplateError> {
    let segments = parse(text)?;
    match segments.as_slice() {
        [Segment::Name(name)] => lookup_name(scope, name).cloned(),
        _ if segments.iter().all(|s| matches!(s, Segment::Text(_))) => {
            Ok(Value::String(text.to_owned()))
        }
        _ => {
            let mut out = String::with_capacity(text.len());
            for segment in &segments {
                match segment {
                    Segment::Text(literal) => out.push_str(literal),
                    Segment::Name(name) => out.push_str(&to_text(lookup_name(scope, name)?)),
                }
            }
            Ok(Value::String(out))
        }
    }
}

fn lookup_name<'a, L: Lookup + ?Sized>(
    scope: &'a L,
    name: &str,
) -> Result<&'a Value, TemplateError> {
    resolve(scope, name).ok_or_else(|| TemplateError::Missing {
        name: name.to_owned(),
    })
}

/// Renders every string inside a JSON value (objects' values, arrays' elements); the
/// first failure stops it.
pub fn render<L: Lookup + ?Sized>(value: &Value, scope: &L) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(text) => render_str(text, scope)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render(item, scope))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| Ok((key.clone(), render(item, scope)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// Renders an action's input object.
pub fn render_map<L: Lookup + ?Sized>(
    input: &Map<String, Value>,
    scope: &L,
) -> Result<Map<String, Value>, TemplateError> {
    input
        .iter()
        .map(|(key, item)| Ok((key.clone(), render(item, scope)?)))
        .collect()
}

/// Every name used by templates inside a value, in order of first use, each once.
/// Strings with a syntax error are skipped (the validator reports them).
pub fn names_in(value: &Value) -> Vec<String> {
    let mut names = Vec::new();
    collect_names(value, &mut names);
    names
}

fn collect_names(value: &Value, names: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            for segment in parse(text).unwrap_or_default() {
                if let Segment::Name(name) = segment
                    && !names.iter().any(|known| known == name)
                {
                    names.push(name.to_owned());
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_names(item, names)),
        Value::Object(map) => map.values().for_each(|item| collect_names(item, names)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("a test scope is an object, got {other}"),
        }
    }

    #[test]
    fn single_template_keeps_the_json_type() {
        let context = scope(json!({"lines": [1, 2], "amount": 12.5, "customer": {"id": 7}}));
        assert_eq!(
            render_str("{{lines}}", &context),
            Ok(json!([1, 2])),
            "an array stays an array (forEach)"
        );
        assert_eq!(
            render_str("{{amount}}", &context),
            Ok(json!(12.5)),
            "a number stays a number"
        );
        assert_eq!(
            render_str("{{ customer }}", &context),
            Ok(json!({"id": 7})),
            "an object stays an object; inner spaces are ignored"
        );
    }

    #[test]
    fn text_with_several_parts_becomes_a_string() {
        let context = scope(
            json!({"orderId": "5001", "count": 3, "flag": true, "none": null, "tags": ["a", "b"]}),
        );
        assert_eq!(
            render_str("order-{{orderId}}", &context),
            Ok(json!("order-5001")),
            "text and a string"
        );
        assert_eq!(
            render_str("{{count}} items, {{flag}}, {{none}}, {{tags}}", &context),
            Ok(json!("3 items, true, , [\"a\",\"b\"]")),
            "non-strings are written as compact JSON, null as nothing"
        );
        assert_eq!(
            render_str(" {{count}}", &context),
            Ok(json!(" 3")),
            "a space around one template makes it text"
        );
    }

    #[test]
    fn missing_value_is_an_error_not_an_empty_string() {
        let context = scope(json!({"a": 1}));
        assert_eq!(
            render_str("got {{orderId}}", &context),
            Err(TemplateError::Missing {
                name: "orderId".into()
            }),
            "a missing name inside text fails"
        );
        assert_eq!(
            render_str("{{a.b}}", &context),
            Err(TemplateError::Missing { name: "a.b".into() }),
            "walking into a number finds nothing"
        );
    }

    #[test]
    fn dotted_names_walk_objects_and_arrays() {
        let context = scope(json!({"_body": {"errors": [{"message": "Could not read"}]}}));
        assert_eq!(
            render_str("{{_body.errors.0.message}}", &context),
            Ok(json!("Could not read")),
            "numeric segments index arrays"
        );
        assert_eq!(
            render_str("{{_body.errors.01.message}}", &context),
            Err(TemplateError::Missing {
                name: "_body.errors.01.message".into()
            }),
            "a leading zero is not an index, as in JSON pointers"
        );
    }

    #[test]
    fn longest_key_prefix_wins_over_walking_a_shorter_key() {
        let context = scope(json!({
            "ticket": {"id": "from-event"},
            "ticket.id": "from-step-output",
            "call.body": {"items": [{"sku": "A-1"}]},
        }));
        assert_eq!(
            resolve(&context, "ticket.id"),
            Some(&json!("from-step-output")),
            "the published key `ticket.id` is longer than `ticket`"
        );
        assert_eq!(
            resolve(&context, "call.body.items.0.sku"),
            Some(&json!("A-1")),
            "the longest prefix `call.body` is walked for the rest"
        );
    }

    #[test]
    fn shorter_prefix_is_tried_when_the_longest_walks_to_nothing() {
        let context = scope(json!({"a.b": 1, "a": {"b": {"c": 2}}}));
        assert_eq!(
            resolve(&context, "a.b.c"),
            Some(&json!(2)),
            "`a.b` holds a number with no `c`; `a` has `b.c`"
        );
    }

    #[test]
    fn render_walks_whole_inputs() {
        let context = scope(json!({"orderId": "5001", "tags": ["x"]}));
        let input = json!({
            "externalId": "order-{{orderId}}",
            "tags": "{{tags}}",
            "fields": {"note": ["id {{orderId}}", 3, null]},
            "closed": false
        });
        assert_eq!(
            render(&input, &context),
            Ok(json!({
                "externalId": "order-5001",
                "tags": ["x"],
                "fields": {"note": ["id 5001", 3, null]},
                "closed": false
            })),
            "every string leaf is rendered, other values kept"
        );
    }

    #[test]
    fn syntax_errors_are_reported() {
        assert_eq!(
            parse("order-{{orderId}"),
            Err(TemplateError::Unclosed {
                text: "order-{{orderId}".into()
            }),
            "an unclosed template"
        );
        assert_eq!(
            parse("a {{ }} b"),
            Err(TemplateError::EmptyName {
                text: "a {{ }} b".into()
            }),
            "an empty name"
        );
        assert_eq!(
            parse("no templates }} here"),
            Ok(vec![Segment::Text("no templates }} here")]),
            "a lone `}}` is text"
        );
    }

    #[test]
    fn names_in_lists_each_name_once_in_order() {
        let value = json!({"a": "{{x}} and {{y.z}}", "b": ["{{x}}", {"c": "{{w}}"}], "d": 1});
        assert_eq!(
            names_in(&value),
            vec!["x", "y.z", "w"],
            "names from every string leaf, deduplicated"
        );
    }

    #[test]
    fn error_messages_show_the_template() {
        assert_eq!(
            TemplateError::Missing {
                name: "orderId".into()
            }
            .to_string(),
            "{{orderId}} has no value: nothing in the run's context provides \"orderId\"",
            "the message names the template as written"
        );
    }
}
