//! Per-tenant MCP servers: the configuration an `mcp/call-tool` step names by its
//! `server` input, and the [`McpServerStore`] port that keeps it.
//!
//! A server is a name, a transport and a timeout:
//!
//! ```json
//! {"name": "crm", "transport": {"type": "http", "url": "https://mcp.crm.test/mcp",
//!   "headers": {"Authorization": "Bearer {{secrets.crm_token}}"}}, "timeoutSec": 30}
//! {"name": "local", "transport": {"type": "stdio", "command": "mcp-tool", "args": ["--quiet"]}}
//! ```
//!
//! Header values may use `{{secrets.<name>}}` (revealed only when a call connects, never
//! stored in the clear here); nothing else is a template. A `stdio` server runs a command
//! on the host: the connector refuses it unless the operator enabled stdio servers
//! (`FRONTA_MCP_STDIO=1`), so a tenant cannot run commands by default.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use fronta_desk::TenantId;
use serde::{Deserialize, Serialize};

use crate::store::StoreResult;
use crate::template;

/// The longest server name.
pub const MAX_SERVER_NAME: usize = 64;
/// The most headers a server may configure.
pub const MAX_HEADERS: usize = 32;
/// The most arguments of a stdio command.
pub const MAX_ARGS: usize = 64;
/// The largest `timeoutSec` a server may configure.
pub const MAX_TIMEOUT_SEC: u64 = 300;
/// `timeoutSec` when a server gives none.
pub const DEFAULT_TIMEOUT_SEC: u64 = 30;

/// How the connector reaches a server.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum McpTransport {
    /// Streamable HTTP; the URL goes through the SSRF guard like `http/request`.
    Http {
        url: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
    /// A local command speaking MCP on its standard input and output.
    Stdio {
        command: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
    },
}

/// One configured MCP server of a tenant.
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServer {
    pub name: String,
    pub transport: McpTransport,
    /// Bounds connecting and initialising, then separately the `tools/call`.
    #[serde(default = "default_timeout_sec")]
    pub timeout_sec: u64,
}

fn default_timeout_sec() -> u64 {
    DEFAULT_TIMEOUT_SEC
}

impl McpServer {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_sec)
    }

    /// Every problem of this configuration, each a sentence (empty when it is fine).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(problem) = check_name(&self.name) {
            problems.push(problem);
        }
        if self.timeout_sec == 0 || self.timeout_sec > MAX_TIMEOUT_SEC {
            problems.push(format!(
                "timeoutSec must be between 1 and {MAX_TIMEOUT_SEC}, found {}",
                self.timeout_sec
            ));
        }
        match &self.transport {
            McpTransport::Http { url, headers } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    problems.push("transport.url must be an http:// or https:// URL".to_owned());
                }
                if headers.len() > MAX_HEADERS {
                    problems.push(format!(
                        "at most {MAX_HEADERS} headers, found {}",
                        headers.len()
                    ));
                }
                for (name, value) in headers {
                    if name.is_empty()
                        || !name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                    {
                        problems.push(format!("transport.headers: {name:?} is not a header name"));
                    }
                    for used in template::names_in(&serde_json::Value::String(value.clone())) {
                        if !used.starts_with("secrets.") {
                            problems.push(format!(
                                "transport.headers.{name}: only {{{{secrets.<name>}}}} may be used, found {{{{{used}}}}}"
                            ));
                        }
                    }
                }
            }
            McpTransport::Stdio { command, args } => {
                if command.trim().is_empty() {
                    problems.push("transport.command must not be empty".to_owned());
                }
                if args.len() > MAX_ARGS {
                    problems.push(format!(
                        "at most {MAX_ARGS} arguments, found {}",
                        args.len()
                    ));
                }
            }
        }
        problems
    }
}

/// A server name: 1–64 of `a-z`, `A-Z`, `0-9`, `_`, `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_SERVER_NAME {
        return Err(format!(
            "a server name has 1 to {MAX_SERVER_NAME} characters, found {}",
            name.len()
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "server name {name:?} may use only letters, digits, '_' and '-'"
        ));
    }
    Ok(())
}

/// The MCP servers of each tenant.
///
/// # Contract
///
/// - Every method is scoped by tenant; another tenant's server answers exactly like one
///   that does not exist. A write for an unknown tenant is `NotFound`.
/// - `mcp_server_put` creates the server or replaces it whole (by `server.name`).
/// - `mcp_server_get` answers the server or `None`; `mcp_server_list` answers the
///   tenant's servers ordered by name.
/// - `mcp_server_delete` removes it; `NotFound` when there is none.
/// - Stores keep the configuration as given (it was checked with
///   [`McpServer::problems`] before); header values hold secret *references*, never
///   values.
#[async_trait]
pub trait McpServerStore: Send + Sync + 'static {
    async fn mcp_server_put(&self, tenant: TenantId, server: McpServer) -> StoreResult<McpServer>;
    async fn mcp_server_get(&self, tenant: TenantId, name: &str) -> StoreResult<Option<McpServer>>;
    async fn mcp_server_list(&self, tenant: TenantId) -> StoreResult<Vec<McpServer>>;
    async fn mcp_server_delete(&self, tenant: TenantId, name: &str) -> StoreResult<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_configuration_reads_from_json_and_checks() {
        let server: McpServer = serde_json::from_value(json!({
            "name": "crm",
            "transport": {"type": "http", "url": "https://mcp.crm.test/mcp",
                "headers": {"Authorization": "Bearer {{secrets.crm_token}}"}}
        }))
        .expect("parses");
        assert_eq!(server.timeout_sec, DEFAULT_TIMEOUT_SEC);
        assert!(server.problems().is_empty(), "{:?}", server.problems());

        let stdio: McpServer = serde_json::from_value(json!({
            "name": "local", "timeoutSec": 5,
            "transport": {"type": "stdio", "command": "tool", "args": ["-q"]}
        }))
        .expect("parses");
        assert!(stdio.problems().is_empty());
    }

    #[test]
    fn bad_configurations_say_what_is_wrong() {
        let server = McpServer {
            name: "bad name".into(),
            timeout_sec: 0,
            transport: McpTransport::Http {
                url: "ftp://x".into(),
                headers: BTreeMap::from([("X".into(), "{{ticket.id}}".into())]),
            },
        };
        let problems = server.problems();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(
            problems[3].contains("only {{secrets.<name>}}"),
            "{problems:?}"
        );
        let unknown = serde_json::from_value::<McpServer>(json!({
            "name": "x", "transport": {"type": "ws", "url": "ws://x"}
        }));
        assert!(unknown.is_err());
    }
}
