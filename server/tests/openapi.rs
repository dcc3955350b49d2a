//! `GET /api/openapi.json` and the route table it is generated from: the document is
//! OpenAPI 3.1 with every path and method of the table and no dangling schema
//! reference; every documented method is routed (never the 404 of an unknown route nor
//! a 405) and every other method of a documented path is a 405, so the router and the
//! document cannot drift apart.

mod support;

use axum::http::{Method, StatusCode};
use serde_json::Value;
use support::Harness;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// `$ref`s anywhere in `value`.
fn references(value: &Value, found: &mut Vec<String>) {
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
