//! `mcp/call-tool` against a real MCP server: an in-process `rmcp` server over
//! streamable HTTP on 127.0.0.1 (allow-listed explicitly), plus plain HTTP endpoints
//! (wiremock) for the statuses a real server would not answer. Covers the outputs and
//! every row of the MCP classification (DESIGN.md §4.5) that can be produced here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fronta_automation::Op;
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::mcp::{McpServer, McpServerStore, McpTransport};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::Revealed;
use fronta_automation::store::StoreResult;
use fronta_connectors::{AddressPolicy, AllowList, McpConnector, McpLimits};
use fronta_desk::{DeskError, TenantId};
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
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// How long the `slow` tool sleeps: far past the 1 s timeout of the servers below.
const SLOW_TOOL_SLEEP: Duration = Duration::from_secs(30);

/// The test server's tools: `echo`, `fails` (isError), `slow`, `structured`.
#[derive(Clone)]
struct Tools;

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => {
                let text = arguments
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            "fails" => CallToolResult::error(vec![ContentBlock::text("no such customer")]),
            "slow" => {
                tokio::time::sleep(SLOW_TOOL_SLEEP).await;
                CallToolResult::success(vec![ContentBlock::text("late")])
            }
            "structured" => CallToolResult::structured(json!({"status": "vip", "score": 7})),
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// Starts the MCP server on 127.0.0.1 and answers its URL.
async fn mcp_server() -> String {
    let service: StreamableHttpService<Tools, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Tools),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{address}/mcp")
}

/// The servers of each tenant, in memory.
#[derive(Default)]
struct Servers(Mutex<HashMap<(TenantId, String), McpServer>>);

#[async_trait]
impl McpServerStore for Servers {
    async fn mcp_server_put(&self, tenant: TenantId, server: McpServer) -> StoreResult<McpServer> {
        let mut servers = self.0.lock().expect("lock");
        servers.insert((tenant, server.name.clone()), server.clone());
        Ok(server)
    }
    async fn mcp_server_get(&self, tenant: TenantId, name: &str) -> StoreResult<Option<McpServer>> {
        let servers = self.0.lock().expect("lock");
        Ok(servers.get(&(tenant, name.to_owned())).cloned())
    }
    async fn mcp_server_list(&self, tenant: TenantId) -> StoreResult<Vec<McpServer>> {
        let servers = self.0.lock().expect("lock");
        let mut list: Vec<McpServer> = servers
            .iter()
            .filter(|((owner, _), _)| *owner == tenant)
            .map(|(_, server)| server.clone())
            .collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(list)
    }
    async fn mcp_server_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()> {
        let mut servers = self.0.lock().expect("lock");
        servers
            .remove(&(tenant, name.to_owned()))
            .map(|_| ())
            .ok_or(DeskError::NotFound("MCP server"))
    }
}

struct Setup {
    connector: McpConnector,
    servers: Arc<Servers>,
    tenant: TenantId,
}

fn setup_with(policy: AddressPolicy, limits: McpLimits) -> Setup {
    let servers = Arc::new(Servers::default());
    let connector = McpConnector::new(servers.clone(), None, policy, limits).expect("a connector");
    Setup {
        connector,
        servers,
        tenant: TenantId::new(),
    }
}

fn setup() -> Setup {
    setup_with(
        AddressPolicy::new(AllowList::parse("127.0.0.1").expect("allow")),
        McpLimits::default(),
    )
}

fn http_server(name: &str, url: &str) -> McpServer {
    McpServer {
        name: name.to_owned(),
        transport: McpTransport::Http {
            url: url.to_owned(),
            headers: BTreeMap::new(),
        },
        timeout_sec: 1,
    }
}

impl Setup {
    async fn add(&self, server: McpServer) {
        self.servers
            .mcp_server_put(self.tenant, server)
            .await
            .expect("stored");
    }

    async fn call(&self, input: Value) -> Result<ConnectorReply, ConnectorFailure> {
        let Value::Object(input) = input else {
            panic!("an object")
        };
        self.connector
            .call(ConnectorCall {
                op: &Op::McpCallTool,
                tenant: self.tenant,
                service: Some("crm"),
                input,
                secrets: &Revealed::default(),
                run_id: "run",
                step_name: "tool",
            })
            .await
    }

    async fn failure(&self, input: Value) -> ConnectorFailure {
        match self.call(input).await {
            Ok(reply) => panic!("expected a failure, got {reply:?}"),
            Err(failure) => failure,
        }
    }
}

#[tokio::test]
async fn a_tool_result_becomes_content_structured_and_is_error() {
    let setup = setup();
    setup.add(http_server("crm", &mcp_server().await)).await;
    let reply = setup
        .call(json!({"server": "crm", "tool": "echo", "arguments": {"text": "hello"}}))
        .await
        .expect("answered");
    assert_eq!(reply.outputs["content"][0]["text"], "hello");
    assert_eq!(reply.outputs["content"][0]["type"], "text");
    assert_eq!(reply.outputs["structured"], Value::Null);
    assert_eq!(reply.outputs["isError"], false);

    let reply = setup
        .call(json!({"server": "crm", "tool": "structured"}))
        .await
        .expect("answered");
    assert_eq!(
        reply.outputs["structured"],
        json!({"status": "vip", "score": 7})
    );
    assert_eq!(reply.outputs["isError"], false);
}

#[tokio::test]
async fn a_tool_that_reports_an_error_is_data_not_a_failure() {
    let setup = setup();
    setup.add(http_server("crm", &mcp_server().await)).await;
    let reply = setup
        .call(json!({"server": "crm", "tool": "fails", "arguments": {}}))
        .await
        .expect("isError is published, not failed");
    assert_eq!(reply.outputs["isError"], true);
    assert_eq!(reply.outputs["content"][0]["text"], "no such customer");
    assert!(reply.message.contains("isError"), "{}", reply.message);
}

#[tokio::test]
async fn a_sent_call_that_times_out_is_fatal_and_says_it_may_have_happened() {
    let setup = setup();
    setup.add(http_server("crm", &mcp_server().await)).await;
    let failure = setup
        .failure(json!({"server": "crm", "tool": "slow"}))
        .await;
    assert_eq!(failure.cause, Cause::McpTimeoutAfterSend);
    assert!(!failure.cause.retryable());
    assert!(
        failure.message.contains("may have happened"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn an_unknown_tool_is_fatal() {
    let setup = setup();
    setup.add(http_server("crm", &mcp_server().await)).await;
    let failure = setup
        .failure(json!({"server": "crm", "tool": "nope"}))
        .await;
    assert_eq!(failure.cause, Cause::BadInput);
    assert!(!failure.cause.retryable());
    assert!(failure.message.contains("nope"), "{}", failure.message);
}

#[tokio::test]
async fn a_refused_connection_is_retried() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    let setup = setup();
    setup
        .add(http_server("crm", &format!("http://{address}/mcp")))
        .await;
    let failure = setup
        .failure(json!({"server": "crm", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::McpConnection, "{}", failure.message);
    assert!(failure.cause.retryable());
}

#[tokio::test]
async fn statuses_follow_the_mcp_row_of_the_table() {
    for (status, retried) in [(503, true), (429, true), (502, true), (500, false)] {
        let plain = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status).insert_header("Retry-After", "7"))
            .mount(&plain)
            .await;
        let setup = setup();
        setup
            .add(http_server("crm", &format!("{}/mcp", plain.uri())))
            .await;
        let failure = setup
            .failure(json!({"server": "crm", "tool": "echo"}))
            .await;
        assert_eq!(
            failure.cause,
            Cause::McpStatus(status),
            "{}",
            failure.message
        );
        assert_eq!(failure.cause.retryable(), retried, "HTTP {status}");
        let expected = retried.then_some(Duration::from_secs(7));
        assert_eq!(failure.retry_after, expected, "HTTP {status}");
    }
}

#[tokio::test]
async fn an_unknown_server_and_bad_input_are_fatal() {
    let setup = setup();
    let failure = setup
        .failure(json!({"server": "crm", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::BadInput);
    assert!(
        failure.message.contains("not configured"),
        "{}",
        failure.message
    );

    setup
        .add(http_server("crm", "http://127.0.0.1:9/mcp"))
        .await;
    let failure = setup.failure(json!({"server": "crm"})).await;
    assert_eq!(failure.cause, Cause::BadInput);
    let failure = setup
        .failure(json!({"server": "crm", "tool": "echo", "arguments": [1]}))
        .await;
    assert_eq!(failure.cause, Cause::BadInput);
}

#[tokio::test]
async fn another_tenants_server_is_not_found() {
    let setup = setup();
    setup.add(http_server("crm", &mcp_server().await)).await;
    let other = Setup {
        connector: setup.connector.clone(),
        servers: setup.servers.clone(),
        tenant: TenantId::new(),
    };
    let failure = other
        .failure(json!({"server": "crm", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::BadInput);
    assert!(
        failure.message.contains("not configured"),
        "{}",
        failure.message
    );
}

#[tokio::test]
async fn the_address_guard_refuses_loopback_unless_allow_listed() {
    let setup = setup_with(
        AddressPolicy::new(AllowList::default()),
        McpLimits::default(),
    );
    setup.add(http_server("crm", &mcp_server().await)).await;
    let failure = setup
        .failure(json!({"server": "crm", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::BadInput, "{}", failure.message);
    assert!(!failure.cause.retryable());
}

#[tokio::test]
async fn stdio_servers_are_refused_unless_the_operator_enables_them() {
    let setup = setup();
    setup
        .add(McpServer {
            name: "local".into(),
            transport: McpTransport::Stdio {
                command: "true".into(),
                args: Vec::new(),
            },
            timeout_sec: 1,
        })
        .await;
    let failure = setup
        .failure(json!({"server": "local", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::NotConfigured);
    assert!(
        failure.message.contains("FRONTA_MCP_STDIO"),
        "{}",
        failure.message
    );

    // Enabled: a command that exits at once never answers the handshake (retried as a
    // connection error); one that cannot start is missing configuration.
    let enabled = setup_with(
        AddressPolicy::new(AllowList::parse("127.0.0.1").expect("allow")),
        McpLimits {
            allow_stdio: true,
            ..McpLimits::default()
        },
    );
    enabled
        .add(McpServer {
            name: "local".into(),
            transport: McpTransport::Stdio {
                command: "true".into(),
                args: Vec::new(),
            },
            timeout_sec: 1,
        })
        .await;
    let failure = enabled
        .failure(json!({"server": "local", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::McpConnection, "{}", failure.message);
    enabled
        .add(McpServer {
            name: "missing".into(),
            transport: McpTransport::Stdio {
                command: "/nonexistent/fronta-mcp-tool".into(),
                args: Vec::new(),
            },
            timeout_sec: 1,
        })
        .await;
    let failure = enabled
        .failure(json!({"server": "missing", "tool": "echo"}))
        .await;
    assert_eq!(failure.cause, Cause::NotConfigured, "{}", failure.message);
}
