//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from the router's route
//! table (`routes::route_docs`): every path, its methods, who may call it (no token,
//! a tenant token, the admin token), its path parameters, its body and answer schemas,
//! and the error answers every route shares.
//!
//! The router is built from the same table ([`RouteDoc`] per path, an [`Op`] per
//! method), so a route cannot be served undocumented; a test checks that every
//! documented method is routed and no other method is.
//!
//! The schemas are deliberately light: the main objects of API.md with their fields and
//! types, `additionalProperties` left open (the API adds fields; API.md is the contract
//! for their meaning). Left out: query parameters of the lists (named in the summaries),
//! examples.

use axum::Json;
use serde_json::{Map, Value, json};

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Anyone,
    Tenant,
    Admin,
}

/// One method of a route.
#[derive(Debug, Clone)]
pub struct Op {
    pub method: &'static str,
    pub summary: &'static str,
    /// `None`: decided by the path (`/api/admin/…` admin, other `/api/…` tenant, else anyone).
    pub caller: Option<Caller>,
    /// The schema of the JSON body, if it takes one.
    pub body: Option<&'static str>,
    /// The success status and the schema of its body (`""`: no JSON schema).
    pub answer: (u16, &'static str),
    /// A page of this schema (`{"items": [...], "nextCursor"}`).
    pub page: bool,
    /// The answer's media type.
    pub media: &'static str,
}

/// A route of the table: a path and its methods.
#[derive(Debug, Clone)]
pub struct RouteDoc {
    pub path: &'static str,
    pub ops: Vec<Op>,
}

/// A method with its summary, answering 200 JSON.
pub fn op(method: &'static str, summary: &'static str) -> Op {
    Op {
        method,
        summary,
        caller: None,
        body: None,
        answer: (200, ""),
        page: false,
        media: "application/json",
    }
}

impl Op {
    /// A method anyone may call, whatever its path.
    pub fn public(method: &'static str, summary: &'static str) -> Op {
        Op {
            caller: Some(Caller::Anyone),
            ..op(method, summary)
        }
    }

    pub fn body(mut self, schema: &'static str) -> Self {
        self.body = Some(schema);
        self
    }

    pub fn answers(mut self, status: u16, schema: &'static str) -> Self {
        self.answer = (status, schema);
        self
    }

    pub fn page(mut self, schema: &'static str) -> Self {
        self.answer = (200, schema);
        self.page = true;
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

    fn caller(&self, path: &str) -> Caller {
        self.caller.unwrap_or(if path.starts_with("/api/admin/") {
            Caller::Admin
        } else if path.starts_with("/api/") {
            Caller::Tenant
        } else {
            Caller::Anyone
        })
    }
}

fn reference(schema: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{schema}")})
}

fn error_answer(description: &str) -> Value {
    json!({"description": description,
           "content": {"application/json": {"schema": reference("Error")}}})
}

fn operation(path: &str, op: &Op) -> Value {
    let mut operation = Map::new();
    operation.insert("summary".into(), json!(op.summary));
    let parameters: Vec<Value> = path
        .split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
        .collect();
    if !parameters.is_empty() {
        operation.insert("parameters".into(), json!(parameters));
    }
    if let Some(body) = op.body {
        operation.insert(
            "requestBody".into(),
            json!({"required": true, "content": {"application/json": {"schema": reference(body)}}}),
        );
    }
    let (status, schema) = op.answer;
    let mut success = json!({"description": "success"});
    if !schema.is_empty() || op.media != "application/json" {
        let schema = match (op.page, schema) {
            (true, schema) => json!({"type": "object", "required": ["items", "nextCursor"],
                "properties": {"items": {"type": "array", "items": reference(schema)},
                               "nextCursor": {"type": ["string", "null"]}}}),
            (false, "") => json!({"type": "string"}),
            (false, schema) => reference(schema),
        };
        success["content"] = json!({op.media: {"schema": schema}});
    }
    let mut responses = Map::new();
    responses.insert(status.to_string(), success);
    responses.insert(
        "default".into(),
        error_answer("an error of the API's error shape"),
    );
    operation.insert("responses".into(), Value::Object(responses));
    let caller = op.caller(path);
    let security = match caller {
        Caller::Anyone => json!([]),
        Caller::Tenant => json!([{"tenantToken": []}]),
        Caller::Admin => json!([{"adminToken": []}]),
    };
    operation.insert("security".into(), security);
    Value::Object(operation)
}

/// The OpenAPI 3.1 document of `routes`.
pub fn document_of(routes: &[RouteDoc]) -> Value {
    let mut paths = Map::new();
    for route in routes {
        let mut item = Map::new();
        for op in &route.ops {
            item.insert(op.method.to_ascii_lowercase(), operation(route.path, op));
        }
        paths.insert(route.path.to_owned(), Value::Object(item));
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
            "schemas": schemas(),
        },
    })
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

fn schemas() -> Value {
    let text = json!({"type": "string"});
    let texts = json!({"type": "array", "items": {"type": "string"}});
    let time = json!({"type": "string", "format": "date-time"});
    let optional_time = json!({"type": ["string", "null"], "format": "date-time"});
    let named = json!({"type": ["object", "null"], "properties": {"id": text, "name": text}});
    let timeline = json!({"type": "array", "items": {"type": "object"},
        "description": "one run only: enqueued, started, step, waiting, cancel requested, ended; oldest first"});
    let mut all = json!({
        "Error": object(&["error"], json!({"error": object(&["code", "message"], json!({
            "code": text, "message": text}))})),
        "RunAccepted": object(&["runId", "status"], json!({
            "runId": text, "status": text, "duplicate": {"type": "boolean"}})),
        "WebhookBody": {"type": "object", "description": "any JSON the automation's contract reads"},
        "WebhookHelp": object(&["method", "url", "parameters"], json!({
            "method": text, "url": text, "enabled": {"type": "boolean"},
            "parameters": {"type": "array", "items": object(&["name", "path", "type", "required"], json!({
                "name": text, "path": text, "type": text, "required": {"type": "boolean"}}))},
            "exampleBody": {"type": "object"}})),
        "NewTenant": object(&["name"], json!({"name": text})),
        "Tenant": object(&["id", "name"], json!({"id": text, "name": text, "token": text})),
        "Group": object(&["name"], json!({"id": text, "name": text})),
        "SecretValue": object(&["value"], json!({"value": text})),
        "SecretList": object(&["items"], json!({"items": {"type": "array", "items": object(
            &["name", "keyVersion", "updatedAt"],
            json!({"name": text, "keyVersion": {"type": "integer"}, "updatedAt": time}))},
            "nextCursor": {"type": "null"}})),
        "ServiceList": object(&["items"], json!({"items": {"type": "array", "items": object(
            &["service", "breaker", "failures", "inFlight", "openedAt", "retryAt"],
            json!({"service": text,
                   "breaker": {"type": "string", "enum": ["closed", "open", "half_open"]},
                   "failures": {"type": "integer"}, "inFlight": {"type": "integer"},
                   "openedAt": {"type": ["string", "null"], "format": "date-time"},
                   "retryAt": {"type": ["string", "null"], "format": "date-time"}}))},
            "nextCursor": {"type": "null"}})),
        "McpServer": object(&["name", "transport"], json!({"name": text,
            "transport": {"oneOf": [
                object(&["type", "url"], json!({"type": {"enum": ["http"]}, "url": text,
                    "headers": {"type": "object", "additionalProperties": text,
                                "description": "values may use {{secrets.<name>}}"}})),
                object(&["type", "command"], json!({"type": {"enum": ["stdio"]}, "command": text,
                    "args": texts}))]},
            "timeoutSec": {"type": "integer", "minimum": 1, "maximum": 300}})),
        "McpServerList": object(&["items"], json!({"items": {"type": "array", "items": {"$ref": "#/components/schemas/McpServer"}},
            "nextCursor": {"type": "null"}})),
        "Member": object(&["name"], json!({"id": text, "name": text, "email": {"type": ["string", "null"]},
            "capacity": {"type": "integer"}, "available": {"type": "boolean"}})),
        "TicketType": object(&["name", "statuses"], json!({"id": text, "name": text, "statuses": texts,
            "fields": {"type": "array", "items": object(&["name", "type"], json!({"name": text, "type": text}))}})),
        "Automation": object(&["name", "trigger", "steps"], json!({
            "id": text, "name": text, "enabled": {"type": "boolean"},
            "trigger": object(&["type"], json!({"type": {"enum": ["webhook", "event", "poll", "schedule", "manual"]}})),
            "steps": {"type": "array", "items": {"type": "object"}},
            "webhookUrl": text, "signed": {"type": "boolean"},
            "currentVersion": {"type": "integer"},
            "inFlight": {"enum": ["finish", "hold"], "description": "while paused"}})),
        "Ticket": object(&["id", "number", "title"], json!({
            "id": text, "number": text, "externalId": {"type": ["string", "null"]}, "title": text,
            "type": {"type": ["string", "null"]}, "status": {"type": ["string", "null"]},
            "closed": {"type": "boolean"}, "tags": texts, "assignee": named,
            "group": {"type": ["string", "null"]}, "fields": {"type": "object"},
            "createdAt": time, "updatedAt": time,
            "log": {"type": "array", "items": object(&["at", "kind", "message"], json!({
                "at": time, "kind": text, "message": text, "runId": {"type": ["string", "null"]}}))}})),
        "TicketPatch": object(&[], json!({"title": text, "type": text, "status": text,
            "closed": {"type": "boolean"}, "tags": texts, "addTags": texts,
            "assignee": {}, "group": {"type": ["string", "null"]}, "fields": {"type": "object"}})),
        "Run": object(&["id", "kind", "status"], json!({
            "id": text, "automationId": {"type": ["string", "null"]}, "kind": text, "trigger": text,
            "status": {"enum": ["scheduled", "queued", "running", "completed", "failed", "cancelled", "suppressed"]},
            "attempts": {"type": "integer"}, "maxRetries": {"type": "integer"},
            "reclaims": {"type": "integer"}, "parks": {"type": "integer"},
            "runAt": time, "createdAt": time, "startedAt": optional_time, "finishedAt": optional_time,
            "lastError": {"type": ["string", "null"]}, "cancelRequested": {"type": "boolean"},
            "automationVersion": {"type": "integer"}, "retryOf": text,
            "steps": {"type": "array", "items": {"type": "object"}},
            "input": {"type": "object"},
            "timeline": timeline})),
        "Validation": object(&["valid", "problems", "warnings"], json!({
            "valid": {"type": "boolean"},
            "problems": {"type": "array", "items": {"type": "object"}},
            "warnings": {"type": "array", "items": {"type": "object"}}})),
        "Catalogue": object(&["ops", "triggers", "events", "paramTypes", "pollSources", "operators", "matches"], json!({
            "ops": {"type": "array", "items": object(&["op", "required", "optional", "outputs", "connector"], json!({
                "op": text, "required": texts, "optional": texts, "outputs": texts, "connector": {"type": "boolean"}}))},
            "triggers": texts, "events": texts, "paramTypes": texts, "pollSources": texts,
            "operators": {"type": "array", "items": object(&["operator", "takesValue"], json!({
                "operator": text, "takesValue": {"type": "boolean"}}))},
            "matches": texts})),
        "CancelAnswer": object(&["runId", "cancel", "status"], json!({
            "runId": text, "cancel": {"enum": ["cancelled", "requested"]}, "status": text})),
        "Incident": object(&["id", "title", "impact", "status", "count"], json!({
            "id": text, "title": text, "impact": text, "status": {"enum": ["open", "resolved"]},
            "count": {"type": "integer"}, "ticket": {"type": ["string", "null"]},
            "detail": {"description": "admin routes only"}})),
        "Setup": object(&[], json!({
            "groups": {"type": "array", "items": {"type": "object"}},
            "ticketTypes": {"type": "array", "items": reference("TicketType")},
            "automations": {"type": "array", "items": reference("Automation")}})),
        "ApplyAnswer": object(&["groups", "ticketTypes", "automations"], json!({
            "groups": {"type": "array", "items": {"type": "object"}},
            "ticketTypes": {"type": "array", "items": {"type": "object"}},
            "automations": {"type": "array", "items": {"type": "object"}}})),
    });
    if let (Value::Object(all), Value::Object(widgets)) = (&mut all, widget_schemas()) {
        all.extend(widgets);
    }
    if let (Value::Object(all), Value::Object(mail)) = (&mut all, mail_server_schemas()) {
        all.extend(mail);
    }
    if let (Value::Object(all), Value::Object(versions)) = (&mut all, version_schemas()) {
        all.extend(versions);
    }
    if let (Value::Object(all), Value::Object(dry_runs)) = (&mut all, dry_run_schemas()) {
        all.extend(dry_runs);
    }
    all
}

/// The schemas of an automation's history (`…/versions`, `…/rollback`, a run's retry).
fn version_schemas() -> Value {
    let text = json!({"type": "string"});
    let time = json!({"type": "string", "format": "date-time"});
    let number = json!({"type": "integer", "minimum": 1});
    json!({
        "AutomationVersion": object(&["automationId", "version", "hash", "current", "createdAt", "createdBy"],
            json!({"automationId": text, "version": number, "hash": text,
                   "current": {"type": "boolean"}, "createdAt": time, "createdBy": text,
                   "definition": {"type": "object", "description": "read alone: name, trigger, steps"}})),
        "VersionDiff": object(&["automationId", "version", "against", "changes"], json!({
            "automationId": text, "version": number, "against": number,
            "changes": {"type": "array", "items": object(&["path", "change"], json!({
                "path": text, "change": {"enum": ["added", "removed", "changed", "moved"]},
                "before": {}, "after": {}}))}})),
        "Rollback": object(&["version"], json!({"version": number})),
        "TenantRetentionBody": object(&[], json!({
            "completed": {"description": "seconds, a duration (\"7d\"), \"off\" or null (the operator's)"},
            "cancelled": {"description": "as completed"},
            "failed": {"description": "as completed; failed and suppressed runs"}})),
        "TenantRetention": object(&["tenant", "own", "effective", "operator"], json!({
            "tenant": text, "own": {"type": "object"}, "effective": {"type": "object"},
            "operator": {"type": "object", "description": "seconds, or \"off\" (kept forever), per status"}})),
        "PauseBody": object(&[], json!({"inFlight": {"enum": ["finish", "hold"]}})),
        "RetryBody": object(&[], json!({"version": {"enum": ["own", "current"]},
            "fromStep": text, "fromStart": {"type": "boolean"}})),
        "BulkBody": object(&["action"], json!({
            "action": {"enum": ["retry", "cancel"]},
            "filter": {"type": "object", "additionalProperties": false,
                       "description": "the names of GET /api/runs' query",
                       "properties": {"status": text, "automation": text, "version": text,
                                      "trigger": text, "ticket": text, "from": text,
                                      "to": text, "q": text}},
            "preview": {"type": "boolean"}})),
        "BulkStarted": object(&["action", "filter"], json!({
            "id": text, "status": text, "action": {"enum": ["retry", "cancel"]},
            "filter": {"type": "object"}, "matching": {"type": "integer", "minimum": 0},
            "exact": {"type": "boolean"}})),
        "BulkAction": object(&["id", "action", "filter", "status", "phase", "total", "matched",
                                "acted", "skipped", "errors", "skips", "percent", "createdAt"], json!({
            "id": text, "action": {"enum": ["retry", "cancel"]}, "filter": {"type": "object"},
            "status": text, "phase": {"enum": ["counting", "acting", "done"]},
            "total": {"type": "integer", "minimum": 0}, "matched": {"type": "integer", "minimum": 0},
            "acted": {"type": "integer", "minimum": 0}, "skipped": {"type": "integer", "minimum": 0},
            "errors": {"type": "integer", "minimum": 0},
            "skips": {"type": "array", "items": object(&["reason", "count"], json!({
                "reason": text, "count": {"type": "integer", "minimum": 1}}))},
            "percent": {"type": "integer", "minimum": 0, "maximum": 100},
            "lastError": {"type": ["string", "null"]}, "createdAt": time,
            "finishedAt": {"type": ["string", "null"], "format": "date-time"}})),
        "BulkCancelAnswer": object(&["id", "cancel"], json!({
            "id": text, "cancel": {"enum": ["cancelled", "requested"]}})),
    })
}

/// The schemas of a dry run (`…/test`).
fn dry_run_schemas() -> Value {
    let text = json!({"type": "string"});
    let texts = json!({"type": "array", "items": {"type": "string"}});
    json!({
        "DryRunBody": object(&[], json!({
            "automation": {"type": "object", "description": "POST /api/automations/test only: the unsaved definition"},
            "version": {"type": "integer", "minimum": 1, "description": "POST /api/automations/{id}/test only"},
            "body": {"description": "webhook or manual trigger: the body"},
            "ticket": {"description": "event trigger: \"TK-12\", 12 or the ticket's id"},
            "change": {"type": "object", "description": "with ticket: {\"<field>\": {\"from\", \"to\"}}"},
            "run": {"type": "string", "description": "a past run whose input is replayed"},
            "items": {"type": "array", "description": "poll trigger: the items as if polled"},
            "mocks": {"type": "object", "description": "connector step name → its outputs"},
            "connectors": {"enum": ["mock", "live"]}})),
        "DryRun": object(&["dryRun", "automation", "status", "input", "steps", "writes", "events", "notes"], json!({
            "dryRun": {"enum": [true]}, "automation": {"type": "object"},
            "status": {"enum": ["completed", "failed", "would retry", "stopped"]},
            "error": {"type": ["string", "null"]}, "input": {"type": "object"},
            "steps": {"type": "array", "items": {"type": "object"}},
            "writes": {"type": "array", "items": object(&["summary"], json!({"summary": text, "log": text}))},
            "events": {"type": "array", "items": object(&["event", "ticket", "change", "wouldStart", "notStarted"], json!({
                "event": text, "ticket": text, "change": {"type": "object"},
                "wouldStart": {"type": "array", "items": {"type": "object"}},
                "notStarted": {"type": "array", "items": {"type": "object"}}}))},
            "incident": {"type": ["object", "null"]}, "notes": texts})),
    })
}

/// The schemas of `/api/mail-servers` (apart: one `json!` of every schema is too deep).
fn mail_server_schemas() -> Value {
    let text = json!({"type": "string"});
    json!({
        "MailServer": object(&["name", "host", "port", "security", "from"], json!({"name": text,
            "host": {"type": "string", "description": "a bare name or address; judged by the connectors' address guard (FRONTA_HTTP_ALLOW)"},
            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "default 465 (tls), 587 (starttls), 25 (none)"},
            "security": {"enum": ["tls", "starttls", "none"], "description": "default tls; none allows no user and password"},
            "user": {"type": "string"},
            "password": {"type": "string", "description": "a {{secrets.<name>}} reference, never a value"},
            "from": {"type": "string", "description": "the sender: name@example.com or \"Name <name@example.com>\""}})),
        "MailServerList": object(&["items"], json!({"items": {"type": "array", "items": {"$ref": "#/components/schemas/MailServer"}},
            "nextCursor": {"type": "null"}})),
    })
}

/// The schemas of `/api/widgets` (apart: one `json!` of every schema is too deep).
fn widget_schemas() -> Value {
    let text = json!({"type": "string"});
    let time = json!({"type": "string", "format": "date-time"});
    let optional_time = json!({"type": ["string", "null"], "format": "date-time"});
    json!({
        "WidgetDefinition": object(&["name", "op", "input", "ttlSec"], json!({"name": text,
            "op": {"enum": ["http/request", "mcp/call-tool"]},
            "service": {"type": ["string", "null"], "description": "the unit of per-(tenant, service) caps and breaker"},
            "input": {"type": "object", "description": "the op's step input; templates may name only {{secrets.<name>}}"},
            "path": {"type": ["string", "null"], "description": "dot path into the call's outputs, e.g. body.count"},
            "ttlSec": {"type": "integer", "description": "seconds the data is served from the cache"}})),
        "Widget": object(&["id", "name", "data", "fetchedAt", "ageSec", "stale", "refreshing", "error"], json!({
            "id": text, "name": text, "op": text, "service": {"type": ["string", "null"]},
            "input": {"type": "object"}, "path": {"type": ["string", "null"]},
            "ttlSec": {"type": "integer"}, "data": {"description": "the cached data (any JSON), null before the first success"},
            "fetchedAt": optional_time, "ageSec": {"type": ["integer", "null"]},
            "stale": {"type": "boolean"}, "refreshing": {"type": "boolean"},
            "checkedAt": optional_time, "error": {"type": ["string", "null"]}, "errorAt": optional_time,
            "createdAt": time, "updatedAt": time})),
        "WidgetList": object(&["items"], json!({"items": {"type": "array", "items": {"$ref": "#/components/schemas/Widget"}},
            "nextCursor": {"type": "null"}})),
    })
}

/// `GET /api/openapi.json`: no token needed (it describes the API, not anyone's data).
pub async fn document() -> Json<Value> {
    Json(document_of(&crate::routes::route_docs()))
}
