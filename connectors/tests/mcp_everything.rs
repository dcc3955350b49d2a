//! `mcp/call-tool` over stdio against the reference MCP server "everything"
//! (`@modelcontextprotocol/server-everything`, pinned in `tests/everything/package.json`),
//! run by Node.js as a child process, the way an operator's local tool runs.
//!
//! The server comes from the npm registry: `.ci/run` installs it
//! (`npm ci --prefix connectors/tests/everything`), and these tests do the same on first
//! use when it is missing. Without Node.js, npm or the registry they fail and say so;
//! `FRONTA_SKIP_NPM=1` skips them explicitly, saying so.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fronta_automation::Op;
use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::mcp::{McpServer, McpServerStore, McpTransport};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::Revealed;
use fronta_automation::store::StoreResult;
use fronta_connectors::{AddressPolicy, AllowList, McpConnector, McpLimits};
use fronta_desk::{DeskError, TenantId};
use serde_json::{Value, json};

/// The server's entry point, or `None` when the tests are skipped on purpose. Installs
/// the pinned server with `npm ci` on first use when it is missing (once per test
/// binary), so the README's test command needs no step of its own.
fn everything() -> Option<PathBuf> {
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if std::env::var_os("FRONTA_SKIP_NPM").is_some_and(|value| value == "1") {
        eprintln!("FRONTA_SKIP_NPM=1: the MCP \"everything\" server tests are skipped");
        return None;
    }
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/everything");
    let entry = folder.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let _installing = INSTALL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !entry.is_file() {
        eprintln!(
            "installing the MCP \"everything\" server: npm ci --prefix {}",
            folder.display()
        );
        let installed = std::process::Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--prefix"])
            .arg(&folder)
            .status();
        assert!(
            installed.as_ref().is_ok_and(|status| status.success()),
            "`npm ci --prefix connectors/tests/everything` failed ({installed:?}): the MCP \"everything\" server tests need Node.js, npm and the npm registry; set FRONTA_SKIP_NPM=1 to skip them"
        );
    }
    assert!(
        entry.is_file(),
        "the MCP \"everything\" server is not at {} after npm ci",
        entry.display()
    );
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|out| out.status.success()),
        "Node.js (`node`) is needed to run the MCP \"everything\" server: {node:?}"
    );
    Some(entry)
}

/// One tenant's servers, in memory.
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
        Ok(servers
            .iter()
            .filter(|((owner, _), _)| *owner == tenant)
            .map(|(_, server)| server.clone())
            .collect())
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
    tenant: TenantId,
}

/// A connector with stdio on and the "everything" server as `everything`, whose calls
/// time out after `timeout_sec`.
async fn setup(entry: PathBuf, timeout_sec: u64) -> Setup {
    let servers = Arc::new(Servers::default());
    let tenant = TenantId::new();
    servers
        .mcp_server_put(
            tenant,
            McpServer {
                name: "everything".into(),
                transport: McpTransport::Stdio {
                    command: "node".into(),
                    args: vec![entry.display().to_string(), "stdio".into()],
                },
                timeout_sec,
            },
        )
        .await
        .expect("stored");
    let connector = McpConnector::new(
        servers,
        None,
        AddressPolicy::new(AllowList::parse("").expect("an empty allow-list")),
        McpLimits {
            allow_stdio: true,
            ..McpLimits::default()
        },
    )
    .expect("a connector");
    Setup { connector, tenant }
}

impl Setup {
    async fn call(&self, tool: &str, arguments: Value) -> Result<ConnectorReply, ConnectorFailure> {
        let Value::Object(input) =
            json!({"server": "everything", "tool": tool, "arguments": arguments})
        else {
            unreachable!("an object literal")
        };
        self.connector
            .call(ConnectorCall {
                op: &Op::McpCallTool,
                tenant: self.tenant,
                service: Some("everything"),
                input,
                secrets: &Revealed::default(),
                run_id: "run",
                step_name: "tool",
            })
            .await
    }
}

fn output<'a>(reply: &'a ConnectorReply, name: &str) -> &'a Value {
    reply
        .outputs
        .get(name)
        .unwrap_or_else(|| panic!("no output {name:?} in {:?}", reply.outputs))
}

#[tokio::test]
async fn echo_and_sum_come_back_as_content() {
    let Some(entry) = everything() else { return };
    let setup = setup(entry, 30).await;

    let reply = setup
        .call("echo", json!({"message": "hello from fronta"}))
        .await
        .expect("echo answers");
    let text = output(&reply, "content")[0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned();
    assert!(text.contains("hello from fronta"), "{text}");
    assert_eq!(output(&reply, "isError"), &json!(false));

    let reply = setup
        .call("get-sum", json!({"a": 19, "b": 23}))
        .await
        .expect("get-sum answers");
    let text = output(&reply, "content")[0]["text"]
        .as_str()
        .expect("a text block")
        .to_owned();
    assert!(text.contains("42"), "{text}");
}

#[tokio::test]
async fn structured_content_is_published() {
    let Some(entry) = everything() else { return };
    let setup = setup(entry, 30).await;
    let reply = setup
        .call("get-structured-content", json!({"location": "Chicago"}))
        .await
        .expect("the tool answers");
    let structured = output(&reply, "structured");
    assert!(
        structured.is_object(),
        "structuredContent should be an object: {structured}"
    );
}

#[tokio::test]
async fn bad_arguments_and_unknown_tools_are_not_retried() {
    let Some(entry) = everything() else { return };
    let setup = setup(entry, 30).await;
    for (tool, arguments) in [
        ("no-such-tool", json!({})),
        ("get-sum", json!({"a": "not a number"})),
    ] {
        match setup.call(tool, arguments).await {
            // The server may answer either way; neither may be retried.
            Err(failure) => assert!(
                !failure.cause.retryable(),
                "{tool}: {:?} {}",
                failure.cause,
                failure.message
            ),
            Ok(reply) => assert_eq!(output(&reply, "isError"), &json!(true), "{tool}"),
        }
    }
}

#[tokio::test]
async fn a_long_operation_past_the_timeout_is_final_and_says_it_may_have_happened() {
    let Some(entry) = everything() else { return };
    let setup = setup(entry, 1).await;
    let failure = setup
        .call(
            "trigger-long-running-operation",
            json!({"duration": 20, "steps": 2}),
        )
        .await
        .expect_err("the call outlives its 1 s timeout");
    assert_eq!(
        failure.cause,
        Cause::McpTimeoutAfterSend,
        "{}",
        failure.message
    );
    assert!(!failure.cause.retryable());
    assert!(
        failure.message.contains("may have happened"),
        "{}",
        failure.message
    );
}

#[test]
fn the_pinned_version_is_the_installed_one() {
    let Some(entry) = everything() else { return };
    let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/everything");
    let wanted: Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("package.json")).expect("package.json"),
    )
    .expect("JSON");
    let installed_manifest = entry
        .parent()
        .and_then(|dist| dist.parent())
        .expect("the package folder")
        .join("package.json");
    let installed: Value = serde_json::from_str(
        &std::fs::read_to_string(installed_manifest).expect("the installed package.json"),
    )
    .expect("JSON");
    assert_eq!(
        wanted["dependencies"]["@modelcontextprotocol/server-everything"], installed["version"],
        "run `npm ci --prefix connectors/tests/everything` again"
    );
}
