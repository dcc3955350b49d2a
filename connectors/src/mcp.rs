//! The `mcp/call-tool` step: looks up the tenant's server named by the step's `server`
//! input, connects (streamable HTTP through the SSRF guard, or a local command over
//! stdio when the operator allows it), initialises, sends one `tools/call` with the
//! step's `arguments`, and answers the tool result as outputs:
//!
//! | output | what |
//! |---|---|
//! | `content` | the result's content list as JSON (`{{tool.content.0.text}}`) |
//! | `structured` | the result's `structuredContent`, or null |
//! | `isError` | whether the tool reported an error |
//!
//! A result with `isError: true` is the tool's answer, published as data: the step
//! succeeds and later steps decide (a condition on `{{tool.isError}}`). The executor
//! publishes the outputs under the step's name and never over a trigger parameter.
//!
//! Classification (DESIGN.md §4.5, through [`Cause`]):
//!
//! | what happened | cause | retried |
//! |---|---|---|
//! | could not connect; the connection broke or timed out while connecting or initialising | `McpConnection` | yes |
//! | the server answered with HTTP 408, 425, 429, 502, 503, 504 | `McpStatus` (+ `Retry-After`) | yes |
//! | the server answered with another HTTP status | `McpStatus` | no |
//! | `tools/call` was sent and no result came within the server's timeout | `McpTimeoutAfterSend` | no: the call may have happened |
//! | the connection broke after `tools/call` was sent | `BrokenAfterSend` | no: same doubt |
//! | the server answered `tools/call` with a JSON-RPC error (unknown tool, bad arguments) | `BadInput` | no |
//! | an answer that is not MCP | `BadAnswer` | no |
//! | unknown server; missing or bad input; an address the SSRF guard refuses | `BadInput` | no |
//! | a stdio server while stdio is off; no server directory installed; a command that cannot start | `NotConfigured` | no |
//!
//! One connection per call (initialise, call, close): simple and stateless, at the cost
//! of a handshake per step; a pool per (tenant, server) can come later.
//!
//! Never logged: arguments, header values, results. Log lines name the tenant's server,
//! the tool, the address (`scheme://host/path`) and the outcome.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use fronta_automation::connector::{ConnectorCall, ConnectorFailure, ConnectorReply};
use fronta_automation::context::Context;
use fronta_automation::mcp::{McpServer, McpServerStore, McpTransport};
use fronta_automation::retry::Cause;
use fronta_automation::secrets::{Revealed, SecretVault, WithSecrets};
use fronta_automation::template;
use fronta_desk::{DeskError, TenantId};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::streamable_http_client::{
    HttpStatusError, StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Map, Value, json};
use url::Url;

use crate::http::{describe, guarded_client};
use crate::ssrf::{AddressPolicy, NameLookup, SystemLookup};

/// Default of [`McpLimits::connect_timeout`] (name lookup, TCP, TLS of each HTTP request).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`McpLimits::max_result_bytes`]: 1 MiB.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1024 * 1024;
/// A longer `Retry-After` is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The limits and switches of `mcp/call-tool`, each configurable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpLimits {
    /// Name lookup + TCP + TLS of each HTTP request; also the least time a server
    /// gets to start and answer `initialize` (its own timeout when that is longer).
    pub connect_timeout: Duration,
    /// The largest JSON answer read from an HTTP server.
    pub max_result_bytes: usize,
    /// Whether `stdio` servers (local commands) may run: off unless the operator sets
    /// `FRONTA_MCP_STDIO=1`.
    pub allow_stdio: bool,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            allow_stdio: false,
        }
    }
}

/// The `mcp/call-tool` connector.
#[derive(Clone)]
pub struct McpConnector {
    servers: Arc<dyn McpServerStore>,
    vault: Option<SecretVault>,
    client: reqwest::Client,
    policy: Arc<AddressPolicy>,
    limits: McpLimits,
}

impl std::fmt::Debug for McpConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpConnector")
            .field("policy", &self.policy)
            .field("limits", &self.limits)
            .finish()
    }
}

fn bad_input(message: impl Into<String>) -> ConnectorFailure {
    ConnectorFailure::new(Cause::BadInput, message)
}

impl McpConnector {
    /// A connector reading servers from `servers`, revealing header secrets with
    /// `vault` (without one, a header that uses a secret fails the step as
    /// `NotConfigured`), resolving names with the system's resolver.
    pub fn new(
        servers: Arc<dyn McpServerStore>,
        vault: Option<SecretVault>,
        policy: AddressPolicy,
        limits: McpLimits,
    ) -> Result<Self, String> {
        Self::with_lookup(servers, vault, policy, limits, Arc::new(SystemLookup))
    }

    /// Like [`McpConnector::new`] with `lookup` resolving names (tests).
    pub fn with_lookup(
        servers: Arc<dyn McpServerStore>,
        vault: Option<SecretVault>,
        policy: AddressPolicy,
        limits: McpLimits,
        lookup: Arc<dyn NameLookup>,
    ) -> Result<Self, String> {
        if limits.connect_timeout.is_zero() {
            return Err("the MCP connect timeout must be above zero".to_owned());
        }
        let policy = Arc::new(policy);
        let client = guarded_client(policy.clone(), lookup, limits.connect_timeout)?;
        Ok(Self {
            servers,
            vault,
            client,
            policy,
            limits,
        })
    }

    pub fn limits(&self) -> &McpLimits {
        &self.limits
    }

    /// Performs one `mcp/call-tool` step.
    pub async fn call(&self, call: ConnectorCall<'_>) -> Result<ConnectorReply, ConnectorFailure> {
        let server_name = match call.input.get("server") {
            Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_owned(),
            _ => return Err(bad_input("input \"server\" is required and must be text")),
        };
        let tool = match call.input.get("tool") {
            Some(Value::String(tool)) if !tool.trim().is_empty() => tool.trim().to_owned(),
            _ => return Err(bad_input("input \"tool\" is required and must be text")),
        };
        let arguments = match call.input.get("arguments") {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments.clone()),
            Some(_) => return Err(bad_input("input \"arguments\" must be an object")),
        };
        let server = self.server(call.tenant, &server_name).await?;
        match &server.transport {
            McpTransport::Http { url, headers } => {
                let (url, headers) = self.http_target(call.tenant, &server, url, headers).await?;
                let shown = describe(&url);
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(headers)
                    .max_json_response_size(self.limits.max_result_bytes)
                    .reinit_on_expired_session(false);
                let transport =
                    StreamableHttpClientTransport::with_client(self.client.clone(), config);
                let outcome = run(
                    transport,
                    &server,
                    &tool,
                    arguments,
                    call.secrets,
                    self.limits.connect_timeout,
                )
                .await;
                log_outcome(&call, &server.name, &tool, &shown, &outcome);
                outcome
            }
            McpTransport::Stdio { command, args } => {
                if !self.limits.allow_stdio {
                    tracing::warn!(tenant = %call.tenant, server = %server.name, step = call.step_name,
                        "mcp/call-tool refused: stdio servers are off (FRONTA_MCP_STDIO)");
                    return Err(ConnectorFailure::new(
                        Cause::NotConfigured,
                        format!(
                            "MCP server {:?} runs a local command, and stdio servers are off on this platform (the operator enables them with FRONTA_MCP_STDIO=1)",
                            server.name
                        ),
                    ));
                }
                let mut process = tokio::process::Command::new(command);
                process.args(args).kill_on_drop(true);
                let transport = TokioChildProcess::builder(process)
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .map(|(transport, _stderr)| transport)
                    .map_err(|err| {
                        ConnectorFailure::new(
                            Cause::NotConfigured,
                            format!(
                                "MCP server {:?}: the command {command:?} cannot start: {err}",
                                server.name
                            ),
                        )
                    })?;
                let outcome = run(
                    transport,
                    &server,
                    &tool,
                    arguments,
                    call.secrets,
                    self.limits.connect_timeout,
                )
                .await;
                log_outcome(
                    &call,
                    &server.name,
                    &tool,
                    &format!("stdio:{command}"),
                    &outcome,
                );
                outcome
            }
        }
    }

    async fn server(&self, tenant: TenantId, name: &str) -> Result<McpServer, ConnectorFailure> {
        match self.servers.mcp_server_get(tenant, name).await {
            Ok(Some(server)) => Ok(server),
            Ok(None) => Err(bad_input(format!(
                "MCP server {name:?} is not configured for this tenant (PUT /api/mcp-servers/{name})"
            ))),
            Err(DeskError::Unavailable(message)) => Err(ConnectorFailure::new(
                Cause::StorageUnavailable,
                format!("MCP servers could not be read: {message}"),
            )),
            Err(other) => Err(ConnectorFailure::new(
                Cause::Bug,
                format!("MCP servers could not be read: {other}"),
            )),
        }
    }

    /// The checked URL and the headers with their secrets revealed.
    async fn http_target(
        &self,
        tenant: TenantId,
        server: &McpServer,
        url: &str,
        headers: &std::collections::BTreeMap<String, String>,
    ) -> Result<
        (
            Url,
            std::collections::HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>,
        ),
        ConnectorFailure,
    > {
        let url = Url::parse(url).map_err(|err| {
            bad_input(format!(
                "MCP server {:?}: the URL is not a URL: {err}",
                server.name
            ))
        })?;
        self.policy.check_url(&url).map_err(|refused| {
            tracing::warn!(tenant = %tenant, server = %server.name, address = %describe(&url),
                "mcp/call-tool refused by the address guard");
            bad_input(format!("MCP server {:?}: {}", server.name, refused.0))
        })?;
        let header_map: Map<String, Value> = headers
            .iter()
            .map(|(name, value)| (name.clone(), Value::String(value.clone())))
            .collect();
        let names = fronta_automation::secrets::names_in(&header_map);
        let revealed = if names.is_empty() {
            Revealed::default()
        } else {
            let Some(vault) = &self.vault else {
                return Err(ConnectorFailure::new(
                    Cause::NotConfigured,
                    format!(
                        "MCP server {:?} uses secrets in its headers, and secrets are not available here",
                        server.name
                    ),
                ));
            };
            vault
                .reveal(tenant, &names)
                .await
                .map_err(|err| ConnectorFailure {
                    cause: if err.retryable {
                        Cause::StorageUnavailable
                    } else {
                        Cause::BadInput
                    },
                    message: format!("MCP server {:?}: {}", server.name, err.message),
                    retry_after: None,
                    not_now: None,
                })?
        };
        let context = Context::default();
        let scope = WithSecrets {
            context: &context,
            revealed: &revealed,
        };
        let mut out = std::collections::HashMap::new();
        for (name, value) in headers {
            let rendered = template::render_str(value, &scope).map_err(|err| {
                bad_input(format!(
                    "MCP server {:?}: header {name}: {err}",
                    server.name
                ))
            })?;
            let text = template::to_text(&rendered);
            let header_name =
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    bad_input(format!(
                        "MCP server {:?}: {name:?} is not a header name",
                        server.name
                    ))
                })?;
            let mut header_value = reqwest::header::HeaderValue::from_str(&text).map_err(|_| {
                bad_input(format!(
                    "MCP server {:?}: the value of header {name} is not a valid header value",
                    server.name
                ))
            })?;
            header_value.set_sensitive(true);
            out.insert(header_name, header_value);
        }
        Ok((url, out))
    }
}

fn log_outcome(
    call: &ConnectorCall<'_>,
    server: &str,
    tool: &str,
    address: &str,
    outcome: &Result<ConnectorReply, ConnectorFailure>,
) {
    match outcome {
        Ok(reply) => {
            let is_error = reply.outputs.get("isError") == Some(&Value::Bool(true));
            tracing::info!(tenant = %call.tenant, run = call.run_id, step = call.step_name,
                server, tool, address, is_error, "mcp/call-tool answered")
        }
        Err(failure) => {
            tracing::warn!(tenant = %call.tenant, run = call.run_id, step = call.step_name,
            server, tool, address, cause = ?failure.cause, retryable = failure.cause.retryable(),
            message = %call.secrets.scrub(&failure.message), "mcp/call-tool failed")
        }
    }
}

/// Connect and initialise within the server's timeout or `connect_timeout`, whichever
/// is longer (a local command such as a Node.js server can take seconds to start, even
/// when its calls are quick), then send `tools/call` and wait for its result within
/// the server's timeout; close the connection either way.
async fn run<T, E, A>(
    transport: T,
    server: &McpServer,
    tool: &str,
    arguments: Option<Map<String, Value>>,
    secrets: &Revealed,
    connect_timeout: Duration,
) -> Result<ConnectorReply, ConnectorFailure>
where
    T: rmcp::transport::IntoTransport<rmcp::RoleClient, E, A> + Send + 'static,
    E: StdError + Send + Sync + 'static,
{
    let timeout = server.timeout();
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("fronta", env!("CARGO_PKG_VERSION")),
    );
    let start_timeout = timeout.max(connect_timeout);
    let client = match tokio::time::timeout(start_timeout, info.serve(transport)).await {
        Err(_) => {
            return Err(ConnectorFailure::new(
                Cause::McpConnection,
                format!(
                    "MCP server {:?}: connecting and initialising took longer than {:.0?} (tools/call was not sent)",
                    server.name, start_timeout
                ),
            ));
        }
        Ok(Err(err)) => return Err(init_failure(&server.name, &err)),
        Ok(Ok(client)) => client,
    };
    let mut params = CallToolRequestParams::new(tool.to_owned());
    if let Some(arguments) = arguments {
        params = params.with_arguments(arguments);
    }
    let answer = tokio::time::timeout(timeout, client.call_tool(params)).await;
    // Closing is best effort and bounded; the result is already known.
    tokio::spawn(async move {
        let mut client = client;
        let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
    });
    match answer {
        Err(_) => Err(ConnectorFailure::new(
            Cause::McpTimeoutAfterSend,
            format!(
                "MCP server {:?}: tools/call {tool:?} was sent and no result came within {}s; the call may have happened, so it is not repeated",
                server.name, server.timeout_sec
            ),
        )),
        Ok(Err(err)) => Err(call_failure(&server.name, tool, &err, secrets)),
        Ok(Ok(result)) => Ok(reply(&server.name, tool, result)),
    }
}

fn reply(server: &str, tool: &str, result: CallToolResult) -> ConnectorReply {
    let is_error = result.is_error.unwrap_or(false);
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Array(Vec::new()));
    let structured = result.structured_content.unwrap_or(Value::Null);
    let mut outputs = Map::new();
    outputs.insert("content".into(), content);
    outputs.insert("structured".into(), structured);
    outputs.insert("isError".into(), json!(is_error));
    ConnectorReply {
        outputs,
        message: if is_error {
            format!("MCP {server}/{tool}: the tool reported an error (isError)")
        } else {
            format!("MCP {server}/{tool}: answered")
        },
    }
}

/// The HTTP status of a transport failure, with its Retry-After, when the server gave
/// one.
fn http_status(error: &(dyn StdError + 'static)) -> Option<(u16, Option<Duration>)> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(err) = current {
        let status = err.downcast_ref::<HttpStatusError>().or_else(|| {
            // `HttpStatus` is a transparent variant: the chain holds the enum, not the
            // status error inside it.
            match err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                Some(StreamableHttpError::HttpStatus(status)) => Some(status),
                _ => None,
            }
        });
        if let Some(status) = status {
            let retry_after = status
                .retry_after
                .as_deref()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .map(|secs| Duration::from_secs(secs).min(MAX_RETRY_AFTER));
            return Some((status.status, retry_after));
        }
        current = err.source();
    }
    None
}

/// Whether the failure happened while connecting (nothing was sent).
fn is_connect_error(error: &(dyn StdError + 'static)) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(err) = current {
        if let Some(err) = err.downcast_ref::<reqwest::Error>()
            && err.is_connect()
        {
            return true;
        }
        current = err.source();
    }
    false
}

fn status_failure(server: &str, status: u16, retry_after: Option<Duration>) -> ConnectorFailure {
    let cause = Cause::McpStatus(status);
    let mut failure = ConnectorFailure::new(
        cause.clone(),
        format!("MCP server {server:?} answered HTTP {status}"),
    );
    if cause.retryable() {
        failure.retry_after = retry_after;
    }
    failure
}

fn init_failure(server: &str, error: &ClientInitializeError) -> ConnectorFailure {
    // The transport error is a field, not the error's `source`: walk it directly.
    let transport: &(dyn StdError + 'static) = match error {
        ClientInitializeError::TransportError { error, .. } => error,
        other => other,
    };
    if let Some((status, retry_after)) = http_status(transport) {
        return status_failure(server, status, retry_after);
    }
    match error {
        ClientInitializeError::JsonRpcError(data) => ConnectorFailure::new(
            Cause::BadAnswer,
            format!(
                "MCP server {server:?} refused to initialise: {}",
                data.message
            ),
        ),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ConflictInitResponseId(..)
        | ClientInitializeError::UncorrelatedErrorResponse { .. } => ConnectorFailure::new(
            Cause::BadAnswer,
            format!("MCP server {server:?} did not answer the MCP handshake: {error}"),
        ),
        // Refused, reset, closed, or any other transport failure: nothing was called yet.
        _ => ConnectorFailure::new(
            Cause::McpConnection,
            format!(
                "MCP server {server:?}: could not connect: {}",
                source_text(error)
            ),
        ),
    }
}

fn call_failure(
    server: &str,
    tool: &str,
    error: &ServiceError,
    secrets: &Revealed,
) -> ConnectorFailure {
    if let Some((status, retry_after)) = http_status(error) {
        return status_failure(server, status, retry_after);
    }
    match error {
        ServiceError::McpError(data) => ConnectorFailure::new(
            Cause::BadInput,
            format!(
                "MCP server {server:?} refused tools/call {tool:?} (JSON-RPC {}): {}",
                data.code.0,
                secrets.scrub(&data.message)
            ),
        ),
        ServiceError::TransportSend(_) if is_connect_error(error) => ConnectorFailure::new(
            Cause::McpConnection,
            format!("MCP server {server:?}: could not connect to send tools/call {tool:?}"),
        ),
        ServiceError::UnexpectedResponse => ConnectorFailure::new(
            Cause::BadAnswer,
            format!("MCP server {server:?} answered tools/call {tool:?} with something else"),
        ),
        _ => ConnectorFailure::new(
            Cause::BrokenAfterSend,
            format!(
                "MCP server {server:?}: the connection failed after tools/call {tool:?} was sent ({}); the call may have happened, so it is not repeated",
                source_text(error)
            ),
        ),
    }
}

/// The error and its sources in one line.
fn source_text(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut current = error.source();
    while let Some(err) = current {
        text.push_str(": ");
        text.push_str(&err.to_string());
        current = err.source();
    }
    text
}
