//! Request extraction that answers in API.md's error shape: JSON bodies ([`JsonBody`],
//! [`read_json_body`]) and query strings ([`QueryParams`]).
//!
//! Bodies: a `Content-Type` that is not JSON → 415; over the configured limit → 413,
//! whether the client sent `Content-Length` (refused before reading) or streamed a
//! chunked body (the read stops at the limit: axum's `DefaultBodyLimit`, installed by
//! the router, bounds every `Bytes` extraction); not JSON, or (for [`JsonBody`]) not a
//! JSON object → 400 `invalid_json`.
//!
//! Left out: what the JSON means (each route's wire type).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::app::App;
use crate::error::ApiError;

/// Whether `Content-Type` says JSON: `application/json` or `application/*+json`, with
/// any parameters (`; charset=utf-8`).
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The body's bytes, at most `limit` of them (413 beyond, also for chunked bodies).
pub async fn read_body(request: Request, limit: usize) -> Result<Bytes, ApiError> {
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    Bytes::from_request(request, &())
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge { limit }
            } else {
                ApiError::bad_request(format!("the body could not be read: {rejection}"))
            }
        })
}

/// Parse JSON bytes, answering 400 `invalid_json` with serde's message.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|err| ApiError::BadRequest {
        code: "invalid_json",
        message: format!("the body is not valid JSON for this route: {err}"),
    })
}

/// Refuse a body that is not a JSON object, 400 `invalid_json`: every route's body is an
/// object, and serde would otherwise read a struct from an array (`[]` as all defaults).
pub fn require_object(bytes: &[u8]) -> Result<(), ApiError> {
    match bytes.iter().find(|byte| !byte.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(ApiError::BadRequest {
            code: "invalid_json",
            message: "the body of this route is a JSON object ({…})".into(),
        }),
    }
}

/// Content type, limit, an object, its arrays where the schema has none, and parse, in
/// that order.
pub async fn read_json_body<T: DeserializeOwned + JsonSchema>(
    request: Request,
    limit: usize,
) -> Result<T, ApiError> {
    if !is_json(request.headers()) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let bytes = read_body(request, limit).await?;
    object_body(&bytes, |err| ApiError::BadRequest {
        code: "invalid_json",
        message: format!("the body is not valid JSON for this route: {err}"),
    })
}

/// A body that must be a JSON object, read as `T`: not an object, not JSON, or an array
/// where `T`'s schema has only objects → 400 `invalid_json`; what then does not decode
/// as `T` is `decode_error`'s. A body without a `[` has no array to look for.
pub fn object_body<T: DeserializeOwned + JsonSchema>(
    bytes: &[u8],
    decode_error: impl FnOnce(serde_json::Error) -> ApiError,
) -> Result<T, ApiError> {
    require_object(bytes)?;
    let value: Value = parse_json(bytes)?;
    if bytes.contains(&b'[') {
        no_array_for_object::<T>(&value)?;
    }
    serde_json::from_value(value).map_err(decode_error)
}

/// `T`'s schema as the OpenAPI document has it, made once per type (by its schema id)
/// and kept for the process's life: bodies are checked against it on every request.
fn schema_of<T: JsonSchema>() -> std::sync::Arc<Value> {
    type Schemas = std::sync::Mutex<
        std::collections::HashMap<std::borrow::Cow<'static, str>, std::sync::Arc<Value>>,
    >;
    static SCHEMAS: std::sync::OnceLock<Schemas> = std::sync::OnceLock::new();
    let schemas = SCHEMAS.get_or_init(Default::default);
    let id = T::schema_id();
    if let Some(schema) = schemas
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&id)
    {
        return schema.clone();
    }
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let schema = std::sync::Arc::new(generator.root_schema_for::<T>().to_value());
    schemas
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(id, schema.clone());
    schema
}

/// Refuse, 400 `invalid_json`, an array where `T`'s schema (the OpenAPI document's) has
/// an object: serde reads a struct from an array (`"filter": [null]` as an empty
/// filter), which the document does not allow.
pub fn no_array_for_object<T: JsonSchema>(value: &Value) -> Result<(), ApiError> {
    let schema = schema_of::<T>();
    match array_for_object(&schema, &schema, value, "") {
        None => Ok(()),
        Some(at) => Err(ApiError::BadRequest {
            code: "invalid_json",
            message: format!(
                "{}: an object is expected here, not an array",
                if at.is_empty() { "the body" } else { &at }
            ),
        }),
    }
}

/// Whether `schema` (resolved in `root`) admits only objects (and null).
fn only_objects(root: &Value, schema: &Value) -> bool {
    let schema = resolved(root, schema);
    match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(Value::Array(kinds)) => {
            kinds.iter().any(|kind| kind == "object")
                && kinds.iter().all(|kind| kind == "object" || kind == "null")
        }
        _ => ["anyOf", "oneOf"].iter().any(|key| {
            schema
                .get(*key)
                .and_then(Value::as_array)
                .is_some_and(|alternatives| {
                    let objects: Vec<&Value> = alternatives
                        .iter()
                        .filter(|alternative| {
                            resolved(root, alternative).get("type") != Some(&json!("null"))
                        })
                        .collect();
                    !objects.is_empty()
                        && objects
                            .iter()
                            .all(|alternative| only_objects(root, alternative))
                })
        }),
    }
}

/// A `$ref` to `#/$defs/<name>` resolved in `root`; any other schema as it is.
fn resolved<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|target| target.strip_prefix("#/$defs/"))
    {
        Some(name) => root
            .get("$defs")
            .and_then(|defs| defs.get(name))
            .map_or(schema, |target| resolved(root, target)),
        None => schema,
    }
}

/// The path of the first array in `value` where `schema` admits only objects.
fn array_for_object(root: &Value, schema: &Value, value: &Value, at: &str) -> Option<String> {
    if value.is_array() && only_objects(root, schema) {
        return Some(at.to_owned());
    }
    let schema = resolved(root, schema);
    for key in ["anyOf", "oneOf", "allOf"] {
        for alternative in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(found) = array_for_object(root, alternative, value, at) {
                return Some(found);
            }
        }
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties");
            fields.iter().find_map(|(name, inner)| {
                let property = properties.and_then(|properties| properties.get(name))?;
                let at = if at.is_empty() {
                    name.clone()
                } else {
                    format!("{at}.{name}")
                };
                array_for_object(root, property, inner, &at)
            })
        }
        Value::Array(items) => {
            let item = schema.get("items")?;
            items.iter().enumerate().find_map(|(index, inner)| {
                array_for_object(root, item, inner, &format!("{at}[{index}]"))
            })
        }
        _ => None,
    }
}

/// A JSON body of type `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned + JsonSchema> FromRequest<App> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, app: &App) -> Result<Self, Self::Rejection> {
        read_json_body(request, app.config().body_limit)
            .await
            .map(JsonBody)
    }
}

/// A query string of type `T`; a bad one is 400 `invalid_request`.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

/// The query parameters a route's query type takes: any other is a 400 naming it (a
/// mistyped `?stauts=failed` must not silently list everything).
pub trait QueryKeys {
    const KEYS: &'static [&'static str];
}

impl<T: DeserializeOwned + QueryKeys + Send, S: Send + Sync> FromRequestParts<S>
    for QueryParams<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(pairs) = Query::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))?;
        let mut unknown: Vec<&str> = pairs
            .iter()
            .map(|(key, _)| key.as_str())
            .filter(|key| !T::KEYS.contains(key))
            .collect();
        unknown.dedup();
        if !unknown.is_empty() {
            let takes = if T::KEYS.is_empty() {
                "none".to_owned()
            } else {
                T::KEYS.join(", ")
            };
            return Err(ApiError::bad_request(format!(
                "unknown query parameter{} {}: this route takes {takes}",
                if unknown.len() == 1 { "" } else { "s" },
                unknown
                    .iter()
                    .map(|key| format!("{key:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| ApiError::bad_request(rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn json_content_types_are_recognised() {
        let mut headers = HeaderMap::new();
        assert!(!is_json(&headers), "no content type");
        for (value, expected) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/cloudevents+json", true),
            ("text/plain", false),
            ("application/x-www-form-urlencoded", false),
        ] {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(value));
            assert_eq!(is_json(&headers), expected, "{value}");
        }
    }
}
