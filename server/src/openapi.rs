//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from the router's route
//! table (`routes::route_docs`): every path, its methods (each with an `operationId`),
//! who may call it (no token, a tenant token, the admin token), its path parameters,
//! its body and answer schemas, the error answers every route shares, and the links a
//! client follows from what a create answers to the routes that take its id.
//!
//! The schemas are derived (schemars) from the very types the routes read and write:
//! `.body::<T>()` names the type the handler deserializes, `.answers::<T>(status)` the
//! type it serializes; the domain crates derive theirs behind their `schemars` feature.
//! Request schemas follow what deserializing accepts (required fields, enums, bounds,
//! `additionalProperties: false` where the type denies unknown fields); answer schemas
//! follow what serializing writes. A type whose two forms differ gets its request form
//! under `<Name>.in`.
//!
//! The router is built from the same table ([`RouteDoc`] per path, an [`Op`] per
//! method), so a route cannot be served undocumented; server/tests/openapi.rs checks
//! that every documented method is routed, every reference resolves, and that the
//! validation and the schemas agree. `.ci/api-fuzz` holds a live server to the document.
//!
//! A route that reads a query string declares its type with `.query::<T>()`: each field
//! becomes a query parameter, and the type's `QueryKeys` are what the server takes (any
//! other key is a 400); server/tests/openapi.rs checks that every route refusing an
//! unknown key documents its query, and that the document names exactly those keys.

use std::collections::BTreeSet;

use axum::Json;
use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Anyone,
    Tenant,
    Admin,
}

/// The schema of a type, from a generator (`subschema_for`: a `$ref` for named types).
pub type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The whole schema of `T`, its properties inline (a query type's fields).
fn root_schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.root_schema_for::<T>()
}

/// The query parameters of a query type's schema: one per property, none required, each
/// with the property's schema (without `null`: a query parameter is left out, not null)
/// and its description.
pub fn query_parameters(schema: &Value) -> Vec<Value> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut property = property.clone();
            let description = property
                .as_object_mut()
                .and_then(|map| map.remove("description"));
            if let Some(Value::Array(types)) = property.get_mut("type") {
                types.retain(|kind| kind != "null");
                if types.len() == 1 {
                    property["type"] = types[0].clone();
                }
            }
            let mut parameter = json!({"name": name, "in": "query", "required": false,
                                        "schema": property});
            if let Some(description) = description {
                parameter["description"] = description;
            }
            parameter
        })
        .collect()
}

/// Where a created object's id is read, and which routes take it.
#[derive(Debug, Clone, Copy)]
pub struct Creates {
    /// The answer's field holding the id: `id`, `name`, `runId`.
    pub field: &'static str,
    /// The routes under `{prefix}/{param}` take it (default: the route's own path).
    pub prefix: Option<&'static str>,
}

/// One method of a route.
#[derive(Debug, Clone)]
pub struct Op {
    pub method: &'static str,
    pub summary: &'static str,
    /// `None`: decided by the path (`/api/admin/…` admin, other `/api/…` tenant, else anyone).
    pub caller: Option<Caller>,
    /// The least role of a tenant token that may call it (tenant routes). A tenant route
    /// without one is refused to every role but `admin` (and fails the role matrix).
    pub role: Option<fronta_desk::access::Role>,
    /// The schema of the JSON body, if it takes one.
    pub body: Option<SchemaOf>,
    /// Whether the body may be left out (`None`: required when there is a body).
    pub body_optional: bool,
    /// The success status and the schema of its body (`None`: no body, or plain text).
    pub answer: (u16, Option<SchemaOf>),
    /// The answer's media type.
    pub media: &'static str,
    /// What the answer creates, for the document's links.
    pub creates: Option<Creates>,
    /// Other success answers (`POST /api/runs/bulk`'s preview answers 200).
    pub also: Vec<(u16, SchemaOf)>,
    /// The query string's type (its fields the parameters) and the keys the server takes.
    pub query: Option<(SchemaOf, &'static [&'static str])>,
}

/// A route of the table: a path and its methods.
#[derive(Debug, Clone)]
pub struct RouteDoc {
    pub path: &'static str,
    pub ops: Vec<Op>,
}

/// A method with its summary; give its answer with [`Op::answers`].
pub fn op(method: &'static str, summary: &'static str) -> Op {
    Op {
        method,
        summary,
        caller: None,
        role: None,
        body: None,
        body_optional: false,
        answer: (200, None),
        media: "application/json",
        creates: None,
        also: Vec::new(),
        query: None,
    }
}

/// A page of `T` (`{"items": [...], "nextCursor"}`), as the lists answer.
pub type PageOf<T> = crate::pagination::Page<T>;

impl Op {
    /// A method anyone may call, whatever its path.
    pub fn public(method: &'static str, summary: &'static str) -> Op {
        Op {
            caller: Some(Caller::Anyone),
            ..op(method, summary)
        }
    }

    /// Tenant tokens of every role may call it (reads).
    pub fn viewer(mut self) -> Self {
        self.role = Some(fronta_desk::access::Role::Viewer);
        self
    }

    /// Tenant tokens of the `editor` and `admin` roles may call it.
    pub fn editor(mut self) -> Self {
        self.role = Some(fronta_desk::access::Role::Editor);
        self
    }

    /// Only the tenant's `admin` tokens may call it (tokens, the audit log).
    pub fn tenant_admin(mut self) -> Self {
        self.role = Some(fronta_desk::access::Role::Admin);
        self
    }

    /// The JSON body is a `T` (required).
    pub fn body<T: JsonSchema>(mut self) -> Self {
        self.body = Some(schema_of::<T>);
        self
    }

    /// The JSON body is a `T`, and may be left out.
    pub fn optional_body<T: JsonSchema>(mut self) -> Self {
        self.body = Some(schema_of::<T>);
        self.body_optional = true;
        self
    }

    /// The query string is a `T`: its fields are the route's query parameters.
    pub fn query<T: JsonSchema + crate::extract::QueryKeys>(mut self) -> Self {
        self.query = Some((root_schema_of::<T>, T::KEYS));
        self
    }

    /// The success answer: `status` with a JSON `T`.
    pub fn answers<T: JsonSchema>(mut self, status: u16) -> Self {
        self.answer = (status, Some(schema_of::<T>));
        self
    }

    /// Another success answer: `status` with a JSON `T`.
    pub fn also_answers<T: JsonSchema>(mut self, status: u16) -> Self {
        self.also.push((status, schema_of::<T>));
        self
    }

    /// The success answer: `status` with no body.
    pub fn empty(mut self, status: u16) -> Self {
        self.answer = (status, None);
        self
    }

    /// The answer's `field` is the id of what it created, taken by the routes under
    /// this path (`/…/{param}`).
    pub fn creates(mut self, field: &'static str) -> Self {
        self.creates = Some(Creates {
            field,
            prefix: None,
        });
        self
    }

    /// As [`Op::creates`], for the routes under `prefix` (`/…/{param}`).
    pub fn creates_under(mut self, field: &'static str, prefix: &'static str) -> Self {
        self.creates = Some(Creates {
            field,
            prefix: Some(prefix),
        });
        self
    }

    pub fn text(mut self) -> Self {
        self.media = "text/plain";
        self
    }

    pub fn events(mut self) -> Self {
        self.media = "text/event-stream";
        self
    }

    /// Who may call it: [`Op::caller`]'s field, or what its path says.
    pub fn caller(&self, path: &str) -> Caller {
        self.caller.unwrap_or(if path.starts_with("/api/admin/") {
            Caller::Admin
        } else if path.starts_with("/api/") {
            Caller::Tenant
        } else {
            Caller::Anyone
        })
    }
}

/// The error shape every route answers with (API.md "Errors"; `crate::error::ApiError`).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "Error")]
pub struct ErrorAnswer {
    pub error: ErrorDetail,
}

/// The `error` object: `code` and `message` always; some codes add fields
/// (`problems`, `usedBy`, `limit`, `retryAfter`, a contract's `parameter` and `path`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// A path's parameters, in order: `/api/groups/{id}/members/{member_id}` → `id`, `member_id`.
pub fn path_parameters(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// The operation's id: its method and path, `get_api_groups_id_members`.
pub fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_ascii_lowercase();
    for part in path.split('/').filter(|part| !part.is_empty()) {
        id.push('_');
        id.extend(
            part.chars()
                .filter(|c| *c != '{' && *c != '}')
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
        );
    }
    id
}

/// Both generators: answers are what serializing writes, bodies what deserializing reads.
struct Generators {
    answers: SchemaGenerator,
    bodies: SchemaGenerator,
}

fn generator(contract: Contract) -> SchemaGenerator {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings.contract = contract;
    settings.into_generator()
}

/// The links of `creator` (a route that answers a created id) to every operation of the
/// routes under it that take the id.
fn links(routes: &[RouteDoc], path: &str, creates: Creates) -> Map<String, Value> {
    let prefix = creates.prefix.unwrap_or(path);
    let own: BTreeSet<&str> = path_parameters(path).into_iter().collect();
    let mut links = Map::new();
    for route in routes {
        let Some(rest) = route
            .path
            .strip_prefix(prefix)
            .and_then(|r| r.strip_prefix('/'))
        else {
            continue;
        };
        let Some(param) = rest
            .split('/')
            .next()
            .and_then(|part| part.strip_prefix('{')?.strip_suffix('}'))
        else {
            continue;
        };
        let mut parameters = Map::new();
        for name in path_parameters(route.path) {
            if name == param {
                parameters.insert(
                    name.into(),
                    json!(format!("$response.body#/{}", creates.field)),
                );
            } else if own.contains(name) {
                parameters.insert(name.into(), json!(format!("$request.path.{name}")));
            }
        }
        // A route that needs more than the answer and the request give is not linked.
        if parameters.len() != path_parameters(route.path).len() {
            continue;
        }
        for target in &route.ops {
            let id = operation_id(target.method, route.path);
            links.insert(
                id.clone(),
                json!({"operationId": id, "parameters": parameters}),
            );
        }
    }
    links
}

fn operation(routes: &[RouteDoc], path: &str, op: &Op, generators: &mut Generators) -> Value {
    let mut operation = Map::new();
    operation.insert("operationId".into(), json!(operation_id(op.method, path)));
    operation.insert("summary".into(), json!(op.summary));
    let mut parameters: Vec<Value> = path_parameters(path)
        .into_iter()
        .map(|name| {
            json!({"name": name, "in": "path", "required": true,
                   "schema": {"type": "string", "minLength": 1}})
        })
        .collect();
    if let Some((query, _)) = op.query {
        let schema = query(&mut generators.bodies);
        parameters.extend(query_parameters(schema.as_value()));
    }
    if !parameters.is_empty() {
        operation.insert("parameters".into(), json!(parameters));
    }
    if let Some(body) = op.body {
        let schema = body(&mut generators.bodies);
        operation.insert(
            "requestBody".into(),
            json!({"required": !op.body_optional,
                   "content": {"application/json": {"schema": schema}}}),
        );
    }
    let (status, schema) = op.answer;
    let mut success = json!({"description": "success"});
    match (schema, op.media) {
        (Some(schema), media) => {
            success["content"] = json!({media: {"schema": schema(&mut generators.answers)}});
        }
        (None, "application/json") => {}
        (None, media) => success["content"] = json!({media: {"schema": {"type": "string"}}}),
    }
    if let Some(creates) = op.creates {
        let links = links(routes, path, creates);
        if !links.is_empty() {
            success["links"] = Value::Object(links);
        }
    }
    let mut responses = Map::new();
    responses.insert(status.to_string(), success);
    for (status, schema) in &op.also {
        responses.insert(
            status.to_string(),
            json!({"description": "success",
                   "content": {"application/json": {"schema": schema(&mut generators.answers)}}}),
        );
    }
    let error = generators.answers.subschema_for::<ErrorAnswer>();
    responses.insert(
        "default".into(),
        json!({"description": "an error of the API's error shape",
               "content": {"application/json": {"schema": error}}}),
    );
    operation.insert("responses".into(), Value::Object(responses));
    let security = match op.caller(path) {
        Caller::Anyone => json!([]),
        Caller::Tenant => json!([{"tenantToken": []}]),
        Caller::Admin => json!([{"adminToken": []}]),
    };
    operation.insert("security".into(), security);
    if op.caller(path) == Caller::Tenant {
        // The least role of a tenant token that may call it (403 `forbidden` below it).
        let role = op.role.unwrap_or(fronta_desk::access::Role::Admin);
        operation.insert("x-fronta-role".into(), json!(role));
    }
    Value::Object(operation)
}

/// Every `$ref` in `value`.
pub fn references(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("$ref", Value::String(target)) => found.push(target.clone()),
                    _ => references(inner, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, found)),
        _ => {}
    }
}

/// Rewrite `$ref`s to `renamed` schemas in `value` to their `.in` names.
fn rename_references(value: &mut Value, renamed: &BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if let ("$ref", Value::String(target)) = (key.as_str(), &*inner) {
                    if let Some(name) = target.strip_prefix("#/components/schemas/")
                        && renamed.contains(name)
                    {
                        *inner = json!(format!("{target}.in"));
                    }
                } else {
                    rename_references(inner, renamed);
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rename_references(item, renamed)),
        _ => {}
    }
}

/// The OpenAPI 3.1 document of `routes`.
pub fn document_of(routes: &[RouteDoc]) -> Value {
    let mut generators = Generators {
        answers: generator(Contract::Serialize),
        bodies: generator(Contract::Deserialize),
    };
    let mut paths = Map::new();
    for route in routes {
        let mut item = Map::new();
        for op in &route.ops {
            item.insert(
                op.method.to_ascii_lowercase(),
                operation(routes, route.path, op, &mut generators),
            );
        }
        paths.insert(route.path.to_owned(), Value::Object(item));
    }
    let mut schemas = generators.answers.take_definitions(true);
    let mut bodies = generators.bodies.take_definitions(true);
    // A type whose request form differs from its answer form: the request's is `.in`.
    // And, until nothing changes, a request schema that refers to one renamed.
    let mut renamed: BTreeSet<String> = bodies
        .iter()
        .filter(|(name, schema)| schemas.get(*name).is_some_and(|answer| answer != *schema))
        .map(|(name, _)| name.clone())
        .collect();
    loop {
        let more: Vec<String> = bodies
            .iter()
            .filter(|(name, schema)| {
                !renamed.contains(*name) && schemas.contains_key(*name) && {
                    let mut found = Vec::new();
                    references(schema, &mut found);
                    found.iter().any(|target| {
                        target
                            .strip_prefix("#/components/schemas/")
                            .is_some_and(|target| renamed.contains(target))
                    })
                }
            })
            .map(|(name, _)| name.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        renamed.extend(more);
    }
    if !renamed.is_empty() {
        for schema in bodies.values_mut() {
            rename_references(schema, &renamed);
        }
        for item in paths.values_mut() {
            for operation in item
                .as_object_mut()
                .into_iter()
                .flat_map(|m| m.values_mut())
            {
                if let Some(body) = operation.get_mut("requestBody") {
                    rename_references(body, &renamed);
                }
            }
        }
    }
    for (name, schema) in bodies {
        let name = if renamed.contains(&name) {
            format!("{name}.in")
        } else {
            name
        };
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "fronta",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Durable runs and automations for service desks. The contract is API.md; \
                            docs/api-notes.md adds what it leaves open.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "tenantToken": {"type": "http", "scheme": "bearer",
                                "description": "a tenant token: sees only its tenant"},
                "adminToken": {"type": "http", "scheme": "bearer",
                               "description": "the admin token (FRONTA_ADMIN_TOKEN)"},
            },
            "schemas": schemas,
        },
    })
}

/// `GET /api/openapi.json`: no token needed (it describes the API, not anyone's data).
pub async fn document() -> Json<Value> {
    Json(document_of(&crate::routes::route_docs()))
}
