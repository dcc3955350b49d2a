//! MCP servers over the API (`/api/mcp-servers`) and `mcp/call-tool` through a real run:
//! the router, the SQLite store, the worker and the executor, calling an in-process
//! `rmcp` server over streamable HTTP on 127.0.0.1 (allow-listed in the harness). The
//! server's `Authorization` header comes from a tenant secret; a later step reads the
//! tool's text, and a trigger parameter named like a tool output keeps its value.

mod support;

use axum::http::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use support::{Harness, webhook_path};

const TOKEN: &str = "mcp-tok-5e4d3c";

/// One tool, `lookup`, answering "customer <id> is vip".
#[derive(Clone)]
struct Crm;

impl ServerHandler for Crm {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "lookup" {
            return Err(ErrorData::invalid_params("unknown tool", None));
        }
        let id = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("customer"))
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        Ok(
            CallToolResult::success(vec![ContentBlock::text(format!("customer {id} is vip"))])
                .into(),
        )
    }
}

/// The MCP server on 127.0.0.1; every request without `Authorization: Bearer TOKEN` is
/// refused with 401, so a run that completes proves the secret reached the header.
async fn crm_server() -> String {
    let service: StreamableHttpService<Crm, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Crm),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router =
        axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(
                |request: axum::extract::Request, next: axum::middleware::Next| async move {
                    let expected = format!("Bearer {TOKEN}");
                    let given = request
                        .headers()
                        .get("authorization")
                        .and_then(|value| value.to_str().ok());
                    if given != Some(expected.as_str()) {
                        return axum::response::IntoResponse::into_response(
                            StatusCode::UNAUTHORIZED,
                        );
                    }
                    next.run(request).await
                },
            ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}/mcp")
}

#[tokio::test]
async fn mcp_servers_are_created_read_replaced_and_deleted() {
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let server = json!({"name": "crm", "transport": {"type": "http", "url": "https://mcp.crm.test/mcp",
        "headers": {"Authorization": "Bearer {{secrets.token}}"}}});
    let created = harness
        .post("/api/mcp-servers", &token, server.clone())
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json);
    assert_eq!(created.json["timeoutSec"], 30, "the default timeout");
    assert_eq!(
        created.json["transport"]["headers"]["Authorization"], "Bearer {{secrets.token}}",
        "the reference is kept, never a value"
    );
    let again = harness.post("/api/mcp-servers", &token, server).await;
    assert_eq!(again.status, StatusCode::CONFLICT, "the name is taken");
    assert_eq!(again.code(), "mcp_server_exists");

    let bad = harness
        .post(
            "/api/mcp-servers",
            &token,
            json!({"name": "bad", "transport": {"type": "http", "url": "ftp://x",
                "headers": {"X": "{{ticket.id}}"}}}),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.json);
    assert_eq!(bad.code(), "invalid_mcp_server");

    let replaced = harness
        .call(
            Method::PUT,
            "/api/mcp-servers/crm",
            Some(&token),
            Some(json!({"transport": {"type": "stdio", "command": "crm-mcp"}, "timeoutSec": 5})),
        )
        .await;
    assert_eq!(replaced.status, StatusCode::OK, "{}", replaced.json);
    let read = harness.get("/api/mcp-servers/crm", &token).await;
    assert_eq!(read.json["transport"]["type"], "stdio", "replaced whole");
    assert_eq!(read.json["timeoutSec"], 5);
    let list = harness.get("/api/mcp-servers", &token).await;
    assert_eq!(list.json["items"].as_array().map(Vec::len), Some(1));

    let deleted = harness
        .call(Method::DELETE, "/api/mcp-servers/crm", Some(&token), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = harness.get("/api/mcp-servers/crm", &token).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_run_calls_the_tool_and_the_next_step_reads_its_text() {
    let url = crm_server().await;
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let secret = harness
        .call(
            Method::PUT,
            "/api/secrets/crm_token",
            Some(&token),
            Some(json!({"value": TOKEN})),
        )
        .await;
    assert_eq!(secret.status, StatusCode::NO_CONTENT, "{}", secret.json);
    let server = harness
        .post(
            "/api/mcp-servers",
            &token,
            json!({"name": "crm", "transport": {"type": "http", "url": url,
                "headers": {"Authorization": "Bearer {{secrets.crm_token}}"}}}),
        )
        .await;
    assert_eq!(server.status, StatusCode::CREATED, "{}", server.json);
    let automation = harness
        .automation(
            &token,
            json!({
                "name": "Customer lookup",
                "trigger": {"type": "webhook", "params": [
                    {"name": "customer", "path": "customer", "type": "string", "required": true},
                    {"name": "content", "path": "note", "type": "string", "required": true}]},
                "steps": [
                    {"name": "tool", "op": "mcp/call-tool", "service": "crm",
                     "input": {"server": "crm", "tool": "lookup",
                               "arguments": {"customer": "{{customer}}"}}},
                    {"name": "note", "op": "flow/log",
                     "input": {"message": "{{tool.content.0.text}}; trigger said {{content}}"}}
                ]
            }),
        )
        .await;
    let accepted = harness
        .webhook(
            &webhook_path(&automation),
            r#"{"customer": "C-42", "note": "hello"}"#,
            &[],
        )
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.json);
    let run = accepted.text("runId");
    harness.drain().await;

    let shown = harness.get(&format!("/api/runs/{run}"), &token).await;
    assert_eq!(shown.json["status"], "completed", "{}", shown.json);
    let steps = shown.json["steps"].as_array().cloned().unwrap_or_default();
    let tool = steps
        .iter()
        .find(|step| step["name"] == "tool")
        .expect("the tool's log line");
    assert_eq!(tool["outputs"]["isError"], false);
    assert_eq!(
        tool["outputs"]["content"][0]["text"],
        "customer C-42 is vip"
    );
    let note = steps
        .iter()
        .find(|step| step["name"] == "note")
        .expect("the note");
    assert_eq!(
        note["message"], "customer C-42 is vip; trigger said hello",
        "the next step reads the tool's text, and the trigger's `content` is not overwritten"
    );
    let stored = harness.runs_raw().await;
    assert!(!stored.contains(TOKEN), "the secret is not kept: {stored}");
}

/// A dashboard widget over an MCP tool: the same connector, the server's header secret
/// revealed at connect time, the first text of the result picked by `path`, and the
/// cache answering the next read.
#[tokio::test]
async fn a_widget_calls_the_tool_and_keeps_its_text() {
    let url = crm_server().await;
    let harness = Harness::new();
    let (_, token) = harness.tenant("Acme").await;
    let secret = harness
        .call(
            Method::PUT,
            "/api/secrets/crm_token",
            Some(&token),
            Some(json!({"value": TOKEN})),
        )
        .await;
    assert_eq!(secret.status, StatusCode::NO_CONTENT, "{}", secret.json);
    let server = harness
        .post(
            "/api/mcp-servers",
            &token,
            json!({"name": "crm", "transport": {"type": "http", "url": url,
                "headers": {"Authorization": "Bearer {{secrets.crm_token}}"}}}),
        )
        .await;
    assert_eq!(server.status, StatusCode::CREATED, "{}", server.json);
    let widget = harness
        .post(
            "/api/widgets",
            &token,
            json!({"name": "VIP check", "op": "mcp/call-tool", "service": "crm",
                   "input": {"server": "crm", "tool": "lookup", "arguments": {"customer": "42"}},
                   "path": "content.0.text", "ttlSec": 60}),
        )
        .await;
    assert_eq!(widget.status, StatusCode::CREATED, "{}", widget.json);
    let id = widget.text("id");
    let read = harness.get(&format!("/api/widgets/{id}"), &token).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.json);
    assert_eq!(
        read.json["data"],
        json!("customer 42 is vip"),
        "{}",
        read.json
    );
    assert_eq!(read.json["error"], Value::Null);
    let again = harness.get("/api/widgets", &token).await;
    assert_eq!(again.json["items"][0]["fetchedAt"], read.json["fetchedAt"]);
    assert!(!String::from_utf8_lossy(&again.bytes).contains(TOKEN));
}
