//! `GET /api/openapi.json` and the route table it is generated from: the document is
//! OpenAPI 3.1 with every path and method of the table and no dangling schema
//! reference; every documented method is routed (never the 404 of an unknown route nor
//! a 405) and every other method of a documented path is a 405, so the router and the
//! document cannot drift apart. Every operation has a unique `operationId`, every link
//! names an operation and fills its path parameters; the schemas are exact (required
//! fields, enums, bounds, no unknown fields where the type denies them): a small schema
//! walker judges bodies, and the server refuses exactly the bodies the walker refuses
//! (the cases schemathesis found), and its answers fit their schemas.

mod support;

use axum::http::{Method, StatusCode};
use serde_json::Value;
use support::Harness;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

use fronta_server::openapi::references;
use serde_json::json;
use support::ADMIN;

#[tokio::test]
async fn the_document_lists_every_route_of_the_table_with_resolvable_schemas() {
    let harness = Harness::new();
    let reply = harness
        .call(Method::GET, "/api/openapi.json", None, None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "the document needs no token");
    let document = reply.json;
    assert_eq!(document["openapi"], "3.1.0", "OpenAPI 3.1");
    let routes = fronta_server::routes::route_docs();
    assert!(
        routes.len() >= 30,
        "the whole API is in the table: {}",
        routes.len()
    );
    let paths = document["paths"].as_object().expect("paths");
    assert_eq!(paths.len(), routes.len(), "one path item per route");
    for route in &routes {
        let item = &paths
            .get(route.path)
            .unwrap_or_else(|| panic!("{} is documented", route.path));
        for op in &route.ops {
            let operation = &item[op.method.to_ascii_lowercase()];
            assert!(
                operation["responses"].is_object(),
                "{} {} has its answers: {item}",
                op.method,
                route.path
            );
        }
        if route.path.contains('{') {
            let first = item.as_object().and_then(|ops| ops.values().next());
            assert!(
                first.is_some_and(|op| op["parameters"].is_array()),
                "{} names its path parameters",
                route.path
            );
        }
    }
    for path in [
        "/webhook/{token}",
        "/api/apply",
        "/api/stream",
        "/metrics",
        "/api/tickets/{id}",
    ] {
        assert!(paths.contains_key(path), "{path} is documented");
    }
    let mut found = Vec::new();
    references(&document, &mut found);
    assert!(!found.is_empty(), "the operations use the schemas");
    for target in found {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a local schema reference: {target}"));
        assert!(
            document["components"]["schemas"][name].is_object(),
            "{target} resolves"
        );
    }
}

#[tokio::test]
async fn every_documented_method_is_routed_and_no_other_is() {
    let harness = Harness::new();
    let unknown_route = harness
        .call(Method::GET, "/no/such/route", None, None)
        .await;
    assert_eq!(unknown_route.status, StatusCode::NOT_FOUND, "the fallback");
    for route in fronta_server::routes::route_docs() {
        let path = route
            .path
            .split('/')
            .map(|part| if part.starts_with('{') { "x" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        for method in METHODS {
            let documented = route.ops.iter().any(|op| op.method == method);
            let reply = harness
                .call(
                    Method::from_bytes(method.as_bytes()).expect("a method"),
                    &path,
                    None,
                    None,
                )
                .await;
            if documented {
                assert_ne!(
                    reply.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {} is routed",
                    route.path
                );
                assert!(
                    reply.bytes != unknown_route.bytes,
                    "{method} {} is not the unknown-route fallback",
                    route.path
                );
            } else {
                assert_eq!(
                    reply.status,
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{method} {} is not served: {}",
                    route.path,
                    reply.json
                );
            }
        }
    }
}

/// The query strings: every route that reads one (it refuses a key it does not take)
/// documents it, and the document names exactly the keys the server takes, each an
/// optional query parameter. Every method is called with an unknown key, with the token
/// its caller needs and the ids of real objects.
#[tokio::test]
async fn every_route_that_reads_a_query_documents_exactly_its_keys() {
    use fronta_server::openapi::Caller;
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let automation = harness
        .call(
            Method::POST,
            "/api/automations",
            Some(&token),
            Some(json!({"name": "Probe", "trigger": {"type": "manual"}, "steps": []})),
        )
        .await;
    assert_eq!(
        automation.status,
        StatusCode::CREATED,
        "{}",
        automation.json
    );
    let id = automation.json["id"].as_str().expect("an id").to_owned();
    let group = harness
        .call(
            Method::POST,
            "/api/groups",
            Some(&token),
            Some(json!({"name": "Probe"})),
        )
        .await;
    let group = group.json["id"].as_str().expect("a group id").to_owned();
    let document = document(&harness).await;
    let mut documented = 0;
    for route in fronta_server::routes::route_docs() {
        let path = route
            .path
            .replace("/api/automations/{id}", &format!("/api/automations/{id}"))
            .replace("/api/groups/{id}", &format!("/api/groups/{group}"))
            .replace("{number}", "1")
            .split('/')
            .map(|part| if part.starts_with('{') { "x" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        for op in &route.ops {
            if op.media == "text/event-stream" {
                // A stream answers once it is over; it takes no query (its route says so).
                assert!(op.query.is_none(), "{}", route.path);
                continue;
            }
            let auth = match op.caller(route.path) {
                Caller::Anyone => None,
                Caller::Tenant => Some(token.as_str()),
                Caller::Admin => Some(ADMIN),
            };
            let body = (op.method != "GET" && op.method != "DELETE").then(|| json!({}));
            let reply = harness
                .call(
                    Method::from_bytes(op.method.as_bytes()).expect("a method"),
                    &format!("{path}?fronta_probe=1"),
                    auth,
                    body,
                )
                .await;
            let refused = reply.status == StatusCode::BAD_REQUEST
                && reply.json["error"]["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("unknown query parameter"));
            let parameters: Vec<String> = document["paths"][route.path]
                [op.method.to_ascii_lowercase()]["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|parameter| parameter["in"] == "query")
                .map(|parameter| {
                    assert_eq!(parameter["required"], false, "{parameter}");
                    parameter["name"].as_str().unwrap_or_default().to_owned()
                })
                .collect();
            match op.query {
                Some((_, keys)) => {
                    documented += 1;
                    assert!(
                        refused,
                        "{} {} documents a query but took an unknown key: {} {}",
                        op.method, route.path, reply.status, reply.json
                    );
                    let mut keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
                    let mut parameters = parameters;
                    keys.sort();
                    parameters.sort();
                    assert_eq!(
                        parameters, keys,
                        "{} {}: the document names the keys the server takes",
                        op.method, route.path
                    );
                }
                None => {
                    assert!(
                        !refused,
                        "{} {} reads a query string but documents none: {}",
                        op.method, route.path, reply.json
                    );
                    assert!(parameters.is_empty(), "{} {}", op.method, route.path);
                }
            }
        }
    }
    assert!(
        documented >= 15,
        "the lists document their queries: {documented}"
    );
}

/// The problems of `value` against `schema` (resolving `#/components/schemas/…` in
/// `document`): the keywords the document uses — `$ref`, `type`, `enum`, `const`,
/// `required`, `properties`, `additionalProperties`, `items`, `anyOf`, `oneOf`,
/// `minLength`, `maxLength`, `pattern` (only `\\S` and a character class with a count),
/// `minimum`, `maximum`. An unknown keyword fails, so the walker cannot silently pass
/// what it does not understand.
fn problems(document: &Value, schema: &Value, value: &Value, at: &str, found: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            found.push(format!("{at}: nothing is allowed here"));
        }
        return;
    };
    for (keyword, rule) in schema {
        match keyword.as_str() {
            "$ref" => {
                let name = rule
                    .as_str()
                    .and_then(|target| target.strip_prefix("#/components/schemas/"))
                    .expect("a local reference");
                let target = &document["components"]["schemas"][name];
                assert!(target.is_object() || target.is_boolean(), "{name} resolves");
                problems(document, target, value, at, found);
            }
            "type" => {
                let types: Vec<&str> = match rule {
                    Value::String(one) => vec![one.as_str()],
                    Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                    other => panic!("a type: {other}"),
                };
                let fits = types.iter().any(|kind| match *kind {
                    "object" => value.is_object(),
                    "array" => value.is_array(),
                    "string" => value.is_string(),
                    "boolean" => value.is_boolean(),
                    "null" => value.is_null(),
                    "integer" => value.is_i64() || value.is_u64(),
                    "number" => value.is_number(),
                    other => panic!("a JSON type: {other}"),
                });
                if !fits {
                    found.push(format!("{at}: {value} is not {types:?}"));
                }
            }
            "enum" => {
                if !rule.as_array().expect("an enum").contains(value) {
                    found.push(format!("{at}: {value} is not one of {rule}"));
                }
            }
            "const" => {
                if rule != value {
                    found.push(format!("{at}: {value} is not {rule}"));
                }
            }
            "required" => {
                for name in rule.as_array().expect("required names") {
                    let name = name.as_str().expect("a name");
                    if value.as_object().is_some_and(|map| !map.contains_key(name)) {
                        found.push(format!("{at}: {name} is required"));
                    }
                }
            }
            "properties" => {
                if let Some(map) = value.as_object() {
                    for (name, inner) in map {
                        if let Some(property) = rule.get(name) {
                            problems(document, property, inner, &format!("{at}.{name}"), found);
                        }
                    }
                }
            }
            "additionalProperties" => {
                if let Some(map) = value.as_object() {
                    let known = schema.get("properties");
                    for (name, inner) in map {
                        if known.and_then(|known| known.get(name)).is_none() {
                            problems(document, rule, inner, &format!("{at}.{name}"), found);
                        }
                    }
                }
            }
            "items" => {
                for (index, item) in value.as_array().into_iter().flatten().enumerate() {
                    problems(document, rule, item, &format!("{at}[{index}]"), found);
                }
            }
            "anyOf" | "oneOf" => {
                let fitting = rule
                    .as_array()
                    .expect("alternatives")
                    .iter()
                    .filter(|alternative| {
                        let mut inner = Vec::new();
                        problems(document, alternative, value, at, &mut inner);
                        inner.is_empty()
                    })
                    .count();
                let fits = if keyword == "oneOf" {
                    fitting == 1
                } else {
                    fitting >= 1
                };
                if !fits {
                    found.push(format!("{at}: {value} fits {fitting} of {keyword}"));
                }
            }
            "minLength" | "maxLength" => {
                if let Some(text) = value.as_str() {
                    let length = text.chars().count() as u64;
                    let bound = rule.as_u64().expect("a length");
                    if (keyword == "minLength" && length < bound)
                        || (keyword == "maxLength" && length > bound)
                    {
                        found.push(format!("{at}: {length} characters, {keyword} {bound}"));
                    }
                }
            }
            "pattern" => {
                if let Some(text) = value.as_str() {
                    let fits = match rule.as_str().expect("a pattern") {
                        "\\S" => text.chars().any(|c| !c.is_whitespace()),
                        "^[A-Za-z0-9_-]{1,64}$" => {
                            (1..=64).contains(&text.len())
                                && text
                                    .bytes()
                                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                        }
                        other => panic!("a pattern the walker knows: {other}"),
                    };
                    if !fits {
                        found.push(format!("{at}: {text:?} does not match {rule}"));
                    }
                }
            }
            "minimum" | "maximum" => {
                if let (Some(number), Some(bound)) = (value.as_f64(), rule.as_f64())
                    && ((keyword == "minimum" && number < bound)
                        || (keyword == "maximum" && number > bound))
                {
                    found.push(format!("{at}: {number}, {keyword} {bound}"));
                }
            }
            "description" | "title" | "format" | "default" | "examples" | "$schema" => {}
            other => panic!("a keyword the walker knows: {other} in {schema:?}"),
        }
    }
}

fn body_schema(document: &Value, method: &str, path: &str) -> Value {
    document["paths"][path][method.to_ascii_lowercase()]["requestBody"]["content"]
        ["application/json"]["schema"]
        .clone()
}

fn answer_schema(document: &Value, method: &str, path: &str, status: u16) -> Value {
    document["paths"][path][method.to_ascii_lowercase()]["responses"][status.to_string()]["content"]
        ["application/json"]["schema"]
        .clone()
}

async fn document(harness: &Harness) -> Value {
    harness
        .call(Method::GET, "/api/openapi.json", None, None)
        .await
        .json
}

#[tokio::test]
async fn every_operation_has_a_unique_id_and_every_link_names_one_with_its_parameters() {
    let harness = Harness::new();
    let document = document(&harness).await;
    let mut ids = std::collections::BTreeMap::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an item") {
            let id = operation["operationId"].as_str().expect("an operationId");
            assert!(
                ids.insert(id.to_owned(), path.clone()).is_none(),
                "{id} is unique ({method} {path})"
            );
        }
    }
    let mut links = 0;
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("an item") {
            for answer in operation["responses"]
                .as_object()
                .expect("answers")
                .values()
            {
                for (name, link) in answer["links"].as_object().into_iter().flatten() {
                    links += 1;
                    let target = link["operationId"].as_str().expect("a target");
                    let target_path = ids
                        .get(target)
                        .unwrap_or_else(|| panic!("{method} {path}: link {name} names {target}"));
                    let wanted: Vec<&str> = fronta_server::openapi::path_parameters(target_path);
                    let given = link["parameters"].as_object().expect("parameters");
                    for parameter in &wanted {
                        let expression = given
                            .get(*parameter)
                            .and_then(Value::as_str)
                            .unwrap_or_else(|| {
                                panic!("{method} {path} → {target} fills {parameter}")
                            });
                        assert!(
                            expression.starts_with("$response.body#/")
                                || expression.starts_with("$request.path."),
                            "a runtime expression: {expression}"
                        );
                    }
                }
            }
        }
    }
    assert!(
        links >= 30,
        "the creates link to the routes under them: {links}"
    );
    let group_links = &document["paths"]["/api/groups"]["post"]["responses"]["201"]["links"];
    assert_eq!(
        group_links["get_api_groups_id"]["parameters"]["id"], "$response.body#/id",
        "a created group's id leads to GET /api/groups/{{id}}: {group_links}"
    );
    let run_links =
        &document["paths"]["/api/automations/{id}/runs"]["post"]["responses"]["202"]["links"];
    assert_eq!(
        run_links["get_api_runs_id"]["parameters"]["id"], "$response.body#/runId",
        "a started run's id leads to GET /api/runs/{{id}}: {run_links}"
    );
}

#[tokio::test]
async fn the_body_schemas_are_exact_the_server_refuses_what_they_refuse() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let document = document(&harness).await;
    let ticket_type = harness
        .post(
            "/api/ticket-types",
            &token,
            json!({"name": "order", "statuses": ["new", "done"]}),
        )
        .await
        .json;
    let type_path = format!(
        "/api/ticket-types/{}",
        ticket_type["id"].as_str().expect("id")
    );
    // (method, documented path, path called, body, whether the schema allows it)
    let cases = [
        // schemathesis 4.32 found these accepted against the hand-written document
        (
            "PATCH",
            "/api/ticket-types/{id}",
            type_path.as_str(),
            json!({"statuses": []}),
            true,
        ),
        ("POST", "/api/apply", "/api/apply", json!([]), false),
        (
            "PUT",
            "/api/mcp-servers/{name}",
            "/api/mcp-servers/tools",
            json!({}),
            false,
        ),
        (
            "PUT",
            "/api/mcp-servers/{name}",
            "/api/mcp-servers/tools",
            json!({"transport": {"type": "http", "url": "https://mcp.example.com/mcp"}}),
            true,
        ),
        (
            "PUT",
            "/api/mcp-servers/{name}",
            "/api/mcp-servers/tools",
            json!({"transport": {"type": "ftp"}}),
            false,
        ),
        (
            "POST",
            "/api/groups",
            "/api/groups",
            json!({"name": "Support"}),
            true,
        ),
        (
            "POST",
            "/api/groups",
            "/api/groups",
            json!({"name": ""}),
            false,
        ),
        (
            "POST",
            "/api/groups",
            "/api/groups",
            json!({"name": "   "}),
            false,
        ),
        (
            "POST",
            "/api/groups",
            "/api/groups",
            json!({"name": "x".repeat(201)}),
            false,
        ),
        (
            "POST",
            "/api/groups",
            "/api/groups",
            json!({"name": "B", "extra": 1}),
            false,
        ),
        ("POST", "/api/groups", "/api/groups", json!(["B"]), false),
        (
            "POST",
            "/api/ticket-types",
            "/api/ticket-types",
            json!({"name": "t", "fields": [{"name": "f", "type": "colour"}]}),
            false,
        ),
        (
            "POST",
            "/api/runs/bulk",
            "/api/runs/bulk",
            json!({"action": "delete"}),
            false,
        ),
        (
            "POST",
            "/api/runs/bulk",
            "/api/runs/bulk",
            json!({"action": "retry", "preview": true}),
            true,
        ),
        (
            "POST",
            "/api/runs/bulk",
            "/api/runs/bulk",
            json!({"action": "retry", "filter": {"nope": "1"}}),
            false,
        ),
        (
            "PUT",
            "/api/secrets/{name}",
            "/api/secrets/a",
            json!({"value": 5}),
            false,
        ),
        // serde reads a struct from an array; the document does not allow it
        (
            "POST",
            "/api/runs/bulk",
            "/api/runs/bulk",
            json!({"action": "retry", "filter": [null, null]}),
            false,
        ),
        (
            "POST",
            "/api/ticket-types",
            "/api/ticket-types",
            json!({"name": "t2", "fields": [["f", "string"]]}),
            false,
        ),
        (
            "PUT",
            "/api/mcp-servers/{name}",
            "/api/mcp-servers/tools",
            json!({"transport": ["http", "https://mcp.example.com/mcp"]}),
            false,
        ),
        (
            "POST",
            "/api/automations",
            "/api/automations",
            json!("text"),
            false,
        ),
    ];
    for (method, documented, path, body, allowed) in cases {
        let schema = body_schema(&document, method, documented);
        assert!(!schema.is_null(), "{method} {documented} has a body schema");
        let mut found = Vec::new();
        problems(&document, &schema, &body, "body", &mut found);
        assert_eq!(
            found.is_empty(),
            allowed,
            "{method} {documented} {body}: the schema's verdict: {found:?}"
        );
        let reply = harness
            .call(
                Method::from_bytes(method.as_bytes()).expect("a method"),
                path,
                Some(&token),
                Some(body.clone()),
            )
            .await;
        if allowed {
            assert!(
                reply.status.is_success() || reply.status == StatusCode::CONFLICT,
                "{method} {path} {body} fits its schema and is taken: {} {}",
                reply.status,
                reply.json
            );
        } else {
            assert_eq!(
                reply.status,
                StatusCode::BAD_REQUEST,
                "{method} {path} {body} breaks its schema and is refused: {}",
                reply.json
            );
        }
    }
}

#[tokio::test]
async fn answers_fit_their_schemas() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let document = document(&harness).await;
    let group = harness
        .post("/api/groups", &token, json!({"name": "Support"}))
        .await;
    let group_id = group.json["id"].as_str().expect("id").to_owned();
    let member = harness
        .post(
            &format!("/api/groups/{group_id}/members"),
            &token,
            json!({"name": "Ada", "email": "ada@example.com"}),
        )
        .await;
    let ticket_type = harness
        .post(
            "/api/ticket-types",
            &token,
            json!({"name": "order", "statuses": ["new"], "fields": [{"name": "n", "type": "number"}]}),
        )
        .await;
    let tenants = harness
        .call(Method::GET, "/api/admin/tenants", Some(ADMIN), None)
        .await;
    let mcp = harness
        .call(
            Method::PUT,
            "/api/mcp-servers/tools",
            Some(&token),
            Some(json!({"transport": {"type": "stdio", "command": "tool", "args": ["-v"]}})),
        )
        .await;
    let groups = harness
        .call(Method::GET, "/api/groups", Some(&token), None)
        .await;
    let health = harness.call(Method::GET, "/healthz", None, None).await;
    let runs = harness
        .call(Method::GET, "/api/runs", Some(&token), None)
        .await;
    let refused = harness.post("/api/groups", &token, json!({})).await;
    let answers = [
        ("POST", "/api/groups", 201, &group),
        ("POST", "/api/groups/{id}/members", 201, &member),
        ("POST", "/api/ticket-types", 201, &ticket_type),
        ("GET", "/api/admin/tenants", 200, &tenants),
        ("PUT", "/api/mcp-servers/{name}", 200, &mcp),
        ("GET", "/api/groups", 200, &groups),
        ("GET", "/healthz", 200, &health),
        ("GET", "/api/runs", 200, &runs),
    ];
    for (method, path, status, reply) in answers {
        assert_eq!(
            reply.status.as_u16(),
            status,
            "{method} {path}: {}",
            reply.json
        );
        let schema = answer_schema(&document, method, path, status);
        assert!(!schema.is_null(), "{method} {path} documents its {status}");
        let mut found = Vec::new();
        problems(&document, &schema, &reply.json, "answer", &mut found);
        assert!(
            found.is_empty(),
            "{method} {path}: {} breaks its schema: {found:?}",
            reply.json
        );
    }
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "a refusal: {}",
        refused.json
    );
    let error = &document["paths"]["/api/groups"]["post"]["responses"]["default"]["content"]["application/json"]
        ["schema"];
    let mut found = Vec::new();
    problems(&document, error, &refused.json, "error", &mut found);
    assert!(found.is_empty(), "the error shape: {found:?}");
}
