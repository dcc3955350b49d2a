//! The schema, as numbered migrations embedded in the binary. A migration never changes
//! once released; a new one is appended. `migrate` applies what is missing, each in its
//! own `BEGIN IMMEDIATE`, so several processes starting at once agree. Versions only
//! increase along the list but need not be consecutive: each missing one is applied.

use rusqlite::Connection;

/// `(version, name, sql)`, in order.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "runs", RUNS_V1),
    (2, "desk", DESK_V2),
    (3, "automations", AUTOMATIONS_V3),
    (4, "member open counts", MEMBER_OPEN_V4),
    (5, "runs by unique key, finished too", KEY_HISTORY_V5),
    (6, "secrets", SECRETS_V6),
    (7, "mcp servers", MCP_SERVERS_V7),
    (8, "service limits", SERVICE_LIMITS_V8),
    (9, "widgets", WIDGETS_V9),
    (10, "poll cursors", POLL_CURSORS_V10),
    (11, "automation versions", AUTOMATION_VERSIONS_V11),
    (12, "references by id", REFS_V12),
    (13, "finished runs by their end", RETENTION_V13),
    (14, "a tenant's own retention", TENANT_RETENTION_V14),
    (15, "incidents by their last change", INCIDENTS_UPDATED_V15),
    (16, "finished runs counted, runs by tenant", RUN_COUNTS_V16),
    (17, "mail servers", MAIL_SERVERS_V17),
    (18, "member availability, runs waiting for room", ROOM_V18),
    (
        19,
        "the process registry, runs name their holder",
        PROCESSES_V19,
    ),
    (
        20,
        "named tokens with roles, admin tokens, the audit log",
        ACCESS_V20,
    ),
    (
        21,
        "retired webhook tokens and signing secrets",
        RETIRED_V21,
    ),
];

/// Capacity as a cap (`fronta_desk::plan::assign_least_busy`): a member's `available`
/// (1 by default), and the runs waiting for room in a group — one row per waiting run,
/// written with the step's "waiting for room" line, deleted when that run's assignment
/// goes through. A ticket write that moves an open count wakes its group's rows
/// (`desk::writes::wake_waiters`: the `run_at` of their pending runs set to now), found
/// by the group index, never by a walk of the runs.
const ROOM_V18: &str = r#"
ALTER TABLE desk_members ADD COLUMN available INTEGER NOT NULL DEFAULT 1;
CREATE TABLE desk_group_waiters (
    run_id   BLOB    PRIMARY KEY,
    tenant   BLOB    NOT NULL REFERENCES desk_tenants (id),
    group_id BLOB    NOT NULL REFERENCES desk_groups (id) ON DELETE CASCADE,
    since    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX desk_group_waiters_group ON desk_group_waiters (group_id, since);
"#;

/// Per-tenant mail servers (the `MailServerStore` port), like the MCP servers of
/// migration 7: the configuration as JSON (the password a secret reference, never a
/// value).
const MAIL_SERVERS_V17: &str = r#"
CREATE TABLE mail_servers (
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    name       TEXT    NOT NULL,
    config     TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
"#;

/// References by id (`fronta_automation::refs`): what the names of each version, and of
/// the current definition, are bound to. `automations.refs` is NULL for a definition
/// saved before: it is bound by name the first time a save, a rename or a removal needs
/// it.
const REFS_V12: &str = r#"
ALTER TABLE automations ADD COLUMN refs TEXT;
ALTER TABLE automation_versions ADD COLUMN refs TEXT NOT NULL DEFAULT '[]';
"#;

/// Automation versions (`fronta_automation::versions`): every saved definition, numbered
/// per automation, with its content hash and author; kept when the automation is deleted
/// (its runs name their version). `automations.current_version` is the newest;
/// `automations.in_flight` says what a pause does to runs in flight. Every automation
/// saved before becomes version 1 (its hash is filled in when it is read: SQLite has no
/// SHA-256), and every run enqueued before names no version, which reads as 1.
const AUTOMATION_VERSIONS_V11: &str = r#"
CREATE TABLE automation_versions (
    automation BLOB    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    tenant     BLOB    NOT NULL,
    definition TEXT    NOT NULL,
    hash       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    created_by TEXT    NOT NULL,
    PRIMARY KEY (automation, version)
) WITHOUT ROWID;
ALTER TABLE automations ADD COLUMN current_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE automations ADD COLUMN in_flight TEXT NOT NULL DEFAULT 'finish'
    CHECK (in_flight IN ('finish', 'hold'));
INSERT INTO automation_versions (automation, version, tenant, definition, hash, created_at, created_by)
    SELECT id, 1, tenant, definition, '', updated_at, 'migration' FROM automations;
"#;

/// Dashboard widgets (the `WidgetStore` port): the definition as JSON beside its cache —
/// the data (JSON text), when it was fetched, when the last call ended, the last error —
/// and the refresh lease (`lease_token`, `lease_until`) that keeps one call per widget at
/// a time across processes.
const WIDGETS_V9: &str = r#"
CREATE TABLE widgets (
    id          BLOB    PRIMARY KEY,
    tenant      BLOB    NOT NULL REFERENCES desk_tenants (id),
    name        TEXT    NOT NULL,
    config      TEXT    NOT NULL,
    data        TEXT,
    fetched_at  INTEGER,
    checked_at  INTEGER,
    error       TEXT,
    error_at    INTEGER,
    lease_token TEXT,
    lease_until INTEGER,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX widgets_by_tenant ON widgets (tenant, name, id);
"#;

/// The cursor of each poll automation (the `PollCursors` port): the JSON value its last
/// poll moved it to, and which run did. Deleted with the automation.
const POLL_CURSORS_V10: &str = r#"
CREATE TABLE poll_cursors (
    automation BLOB    PRIMARY KEY,
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    value      TEXT    NOT NULL,
    run        TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
"#;

/// Per-(tenant, service) limits (the `ServiceLimits` port): a breaker row per (tenant,
/// service), and a row per in-flight call (a slot) with its lease's expiry, so a crashed
/// process's slots free themselves. `probe_slot` names the half-open breaker's probe.
const SERVICE_LIMITS_V8: &str = r#"
CREATE TABLE service_breakers (
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    service    TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    failures   INTEGER NOT NULL,
    opened_at  INTEGER,
    retry_at   INTEGER,
    probe_slot TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, service)
) WITHOUT ROWID;
CREATE TABLE service_slots (
    id         TEXT    PRIMARY KEY,
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    service    TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX service_slots_by_service ON service_slots (tenant, service, expires_at);
CREATE INDEX service_slots_by_expiry ON service_slots (expires_at);
"#;

/// Per-tenant MCP servers (the `McpServerStore` port): the configuration as JSON (a
/// header value holds secret references, never values).
const MCP_SERVERS_V7: &str = r#"
CREATE TABLE mcp_servers (
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    name       TEXT    NOT NULL,
    config     TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
"#;

/// Reads that stay flat as history grows (`RunStore::run_stats`, `RunStore::run_list`).
///
/// `run_counts` holds, per kind and finished status (2..=5), how many runs are in it and
/// their summed counters. Triggers keep it on every write of `runs` whatever code path
/// makes it: a row that enters a finished status adds itself, one that leaves it (a
/// retry, a restart) or is deleted (retention) takes itself away, and a change of a
/// finished row's counters moves the sums. Runs still going are counted from the partial
/// indexes `runs_pending` and `runs_running`, so a count costs what is live, not the
/// history. `runs_by_tenant` and `runs_finished_by_tenant` let a tenant's list walk its
/// own runs newest first instead of every tenant's.
const RUN_COUNTS_V16: &str = r#"
CREATE TABLE run_counts (
    kind     TEXT    NOT NULL,
    status   INTEGER NOT NULL,
    runs     INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    reclaims INTEGER NOT NULL,
    parks    INTEGER NOT NULL,
    PRIMARY KEY (kind, status)
) WITHOUT ROWID;
INSERT INTO run_counts (kind, status, runs, attempts, reclaims, parks)
    SELECT kind, status, count(*), sum(attempts), sum(reclaims), sum(parks)
    FROM runs WHERE status >= 2 GROUP BY kind, status;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs WHEN NEW.status >= 2
BEGIN
    INSERT INTO run_counts (kind, status, runs, attempts, reclaims, parks)
        VALUES (NEW.kind, NEW.status, 1, NEW.attempts, NEW.reclaims, NEW.parks)
        ON CONFLICT (kind, status) DO UPDATE SET runs = runs + 1,
            attempts = attempts + excluded.attempts, reclaims = reclaims + excluded.reclaims,
            parks = parks + excluded.parks;
END;
CREATE TRIGGER run_counts_leave AFTER UPDATE OF kind, status, attempts, reclaims, parks ON runs
    WHEN OLD.status >= 2
BEGIN
    UPDATE run_counts SET runs = runs - 1, attempts = attempts - OLD.attempts,
        reclaims = reclaims - OLD.reclaims, parks = parks - OLD.parks
        WHERE kind = OLD.kind AND status = OLD.status;
END;
CREATE TRIGGER run_counts_enter AFTER UPDATE OF kind, status, attempts, reclaims, parks ON runs
    WHEN NEW.status >= 2
BEGIN
    INSERT INTO run_counts (kind, status, runs, attempts, reclaims, parks)
        VALUES (NEW.kind, NEW.status, 1, NEW.attempts, NEW.reclaims, NEW.parks)
        ON CONFLICT (kind, status) DO UPDATE SET runs = runs + 1,
            attempts = attempts + excluded.attempts, reclaims = reclaims + excluded.reclaims,
            parks = parks + excluded.parks;
END;
CREATE TRIGGER run_counts_delete AFTER DELETE ON runs WHEN OLD.status >= 2
BEGIN
    UPDATE run_counts SET runs = runs - 1, attempts = attempts - OLD.attempts,
        reclaims = reclaims - OLD.reclaims, parks = parks - OLD.parks
        WHERE kind = OLD.kind AND status = OLD.status;
END;
CREATE INDEX runs_by_tenant ON runs (tenant, id);
CREATE INDEX runs_finished_by_tenant ON runs (tenant, status, id) WHERE status >= 2;
"#;

/// `DeskStore::incident_recent`: a tenant's incidents by their last change.
const INCIDENTS_UPDATED_V15: &str = r#"
CREATE INDEX desk_incidents_updated ON desk_incidents (tenant, updated_at, id);
"#;

/// A tenant's own retention of finished runs (JSON of `TenantRetention`; NULL: the
/// operator's).
const TENANT_RETENTION_V14: &str = r#"
ALTER TABLE desk_tenants ADD COLUMN retention TEXT;
"#;

/// Retention (`RunStore::run_prune`) walks finished runs of one status, oldest end first.
const RETENTION_V13: &str = r#"
CREATE INDEX runs_finished ON runs (status, coalesce(completed_at, failed_at, cancelled_at))
    WHERE status >= 2;
"#;

/// `RunStore::run_find_by_key`: the unique index `runs_unique_key` covers live runs only
/// (a finished run frees its key); this one keeps every keyed run findable.
const KEY_HISTORY_V5: &str = r#"
CREATE INDEX runs_key_history ON runs (tenant, unique_key, id)
    WHERE unique_key IS NOT NULL;
"#;

/// Per-tenant secrets (the `SecretStore` port): sealed values only, never plain text.
/// `key_version` says which configured key opens the row, so keys can be rotated.
const SECRETS_V6: &str = r#"
CREATE TABLE secrets (
    tenant      BLOB    NOT NULL REFERENCES desk_tenants (id),
    name        TEXT    NOT NULL,
    key_version INTEGER NOT NULL,
    nonce       BLOB    NOT NULL,
    ciphertext  BLOB    NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) WITHOUT ROWID;
"#;

/// Open tickets per member, kept by triggers on every write of `desk_tickets` whatever
/// code path makes it, so least-busy reads one row per member instead of counting a
/// member's open tickets (which grows with the desk).
const MEMBER_OPEN_V4: &str = r#"
CREATE TABLE desk_member_open (
    member BLOB    PRIMARY KEY,
    open   INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO desk_member_open (member, open)
    SELECT assignee, count(*) FROM desk_tickets
    WHERE assignee IS NOT NULL AND closed = 0 GROUP BY assignee;
CREATE TRIGGER desk_member_open_insert AFTER INSERT ON desk_tickets
    WHEN NEW.assignee IS NOT NULL AND NEW.closed = 0
BEGIN
    INSERT INTO desk_member_open (member, open) VALUES (NEW.assignee, 1)
        ON CONFLICT (member) DO UPDATE SET open = open + 1;
END;
CREATE TRIGGER desk_member_open_update AFTER UPDATE OF assignee, closed ON desk_tickets
    WHEN (OLD.assignee IS NOT NEW.assignee) OR (OLD.closed IS NOT NEW.closed)
BEGIN
    UPDATE desk_member_open SET open = open - 1
        WHERE OLD.assignee IS NOT NULL AND OLD.closed = 0 AND member = OLD.assignee;
    INSERT INTO desk_member_open (member, open)
        SELECT NEW.assignee, 1 WHERE NEW.assignee IS NOT NULL AND NEW.closed = 0
        ON CONFLICT (member) DO UPDATE SET open = open + 1;
END;
CREATE TRIGGER desk_member_open_delete AFTER DELETE ON desk_tickets
    WHEN OLD.assignee IS NOT NULL AND OLD.closed = 0
BEGIN
    UPDATE desk_member_open SET open = open - 1 WHERE member = OLD.assignee;
END;
"#;

/// The runs table. `status`: 0 pending, 1 running, 2 completed, 3 failed, 4 cancelled,
/// 5 suppressed (added later; the column takes it as it is).
/// Instants are milliseconds since the Unix epoch (UTC).
const RUNS_V1: &str = r#"
CREATE TABLE runs (
    seq              INTEGER PRIMARY KEY,
    id               BLOB    NOT NULL UNIQUE,
    tenant           TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    state            BLOB,
    trigger          TEXT    NOT NULL,
    unique_key       TEXT,
    priority         INTEGER NOT NULL DEFAULT 0,
    status           INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    reclaims         INTEGER NOT NULL DEFAULT 0,
    parks            INTEGER NOT NULL DEFAULT 0,
    locked_by        BLOB,
    locked_until     INTEGER,
    heartbeat_at     INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    started_at       INTEGER,
    completed_at     INTEGER,
    failed_at        INTEGER,
    cancelled_at     INTEGER,
    last_error       TEXT,
    result           TEXT
);
-- Due runs per tenant, in claim order: the fair claim probes it once per tenant.
CREATE INDEX runs_pending ON runs (tenant, priority DESC, run_at) WHERE status = 0;
-- Running runs by lease end: expired leases are found without a scan.
CREATE INDEX runs_running ON runs (locked_until) WHERE status = 1;
-- One non-terminal run per unique key within a tenant.
CREATE UNIQUE INDEX runs_unique_key ON runs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND status IN (0, 1);
-- Tenants that may have pending runs: the claim walks this short list, not the queue.
CREATE TABLE run_tenants (tenant TEXT PRIMARY KEY) WITHOUT ROWID;
"#;

/// The service desk (the `DeskStore` port). Ids are UUID bytes (BLOB, like `runs.id`);
/// instants are milliseconds since the Unix epoch (UTC); lists (statuses, fields, tags)
/// and maps (ticket fields, incident detail) are JSON text. Every row but a tenant's
/// carries its tenant, and every query the port makes is scoped by it.
const DESK_V2: &str = r#"
CREATE TABLE desk_tenants (
    id         BLOB    PRIMARY KEY,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
-- API tokens, by their SHA-256 hash only (the raw token is shown once and never stored).
CREATE TABLE desk_tenant_tokens (
    hash       TEXT    PRIMARY KEY,
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE desk_groups (
    id         BLOB    PRIMARY KEY,
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (tenant, name)
);
CREATE TABLE desk_members (
    id         BLOB    PRIMARY KEY,
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    group_id   BLOB    NOT NULL REFERENCES desk_groups (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    email      TEXT,
    capacity   INTEGER NOT NULL CHECK (capacity >= 0),
    created_at INTEGER NOT NULL
);
CREATE INDEX desk_members_group ON desk_members (group_id, name);
CREATE TABLE desk_ticket_types (
    id         BLOB    PRIMARY KEY,
    tenant     BLOB    NOT NULL REFERENCES desk_tenants (id),
    name       TEXT    NOT NULL,
    statuses   TEXT    NOT NULL,
    fields     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (tenant, name)
);
-- The last ticket number given out per tenant: numbers are never reused.
CREATE TABLE desk_ticket_counters (
    tenant      BLOB    PRIMARY KEY REFERENCES desk_tenants (id),
    last_number INTEGER NOT NULL
) WITHOUT ROWID;
-- `type_name` and `group_name` are names (a type is never renamed; a group rename is
-- carried to its tickets). `assignee_name` keeps who handled a closed ticket after the
-- member is deleted; a rename is carried to it.
CREATE TABLE desk_tickets (
    id            BLOB    PRIMARY KEY,
    tenant        BLOB    NOT NULL REFERENCES desk_tenants (id),
    number        INTEGER NOT NULL,
    external_id   TEXT,
    title         TEXT    NOT NULL,
    type_name     TEXT,
    status        TEXT,
    closed        INTEGER NOT NULL DEFAULT 0,
    tags          TEXT    NOT NULL DEFAULT '[]',
    assignee      BLOB,
    assignee_name TEXT,
    group_name    TEXT,
    fields        TEXT    NOT NULL DEFAULT '{}',
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
-- Numbers are unique per tenant; newest first is a walk of this index backwards.
CREATE UNIQUE INDEX desk_tickets_number ON desk_tickets (tenant, number);
CREATE UNIQUE INDEX desk_tickets_external_id ON desk_tickets (tenant, external_id)
    WHERE external_id IS NOT NULL;
-- The filters of `ticket_list`, each walked newest first.
CREATE INDEX desk_tickets_status ON desk_tickets (tenant, status, number);
CREATE INDEX desk_tickets_type ON desk_tickets (tenant, type_name, number);
CREATE INDEX desk_tickets_closed ON desk_tickets (tenant, closed, number);
CREATE INDEX desk_tickets_assignee ON desk_tickets (tenant, assignee, number)
    WHERE assignee IS NOT NULL;
-- Open tickets per assignee: the least-busy count.
CREATE INDEX desk_tickets_open_by_assignee ON desk_tickets (tenant, assignee)
    WHERE closed = 0 AND assignee IS NOT NULL;
CREATE TABLE desk_ticket_log (
    seq     INTEGER PRIMARY KEY,
    ticket  BLOB    NOT NULL REFERENCES desk_tickets (id),
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    message TEXT    NOT NULL,
    run_id  TEXT
);
CREATE INDEX desk_ticket_log_ticket ON desk_ticket_log (ticket, seq);
-- `status`: 'open' or 'resolved'.
CREATE TABLE desk_incidents (
    id          BLOB    PRIMARY KEY,
    tenant      BLOB    NOT NULL REFERENCES desk_tenants (id),
    cause       TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    impact      TEXT    NOT NULL,
    detail      TEXT    NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('open', 'resolved')),
    count       INTEGER NOT NULL,
    ticket      BLOB    REFERENCES desk_tickets (id),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    resolved_at INTEGER
);
-- At most one open incident per cause within a tenant.
CREATE UNIQUE INDEX desk_incidents_open_cause ON desk_incidents (tenant, cause)
    WHERE status = 'open';
CREATE INDEX desk_incidents_tenant ON desk_incidents (tenant, created_at);
CREATE INDEX desk_incidents_created ON desk_incidents (created_at);
"#;

/// Saved automations (the `AutomationStore` port) and the loop guard's counter. The
/// definition is the automation's JSON; `enabled`, `trigger_kind` and `event` mirror it for
/// the queries that pick automations (`event` is set only for event triggers).
/// `webhook_token` stays in the row while the trigger is not a webhook, so a trigger that
/// changes away and back keeps its URL; the store shows and finds it only for webhook
/// triggers.
const AUTOMATIONS_V3: &str = r#"
CREATE TABLE automations (
    id             BLOB    PRIMARY KEY,
    tenant         BLOB    NOT NULL REFERENCES desk_tenants (id),
    name           TEXT    NOT NULL,
    definition     TEXT    NOT NULL,
    enabled        INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    trigger_kind   TEXT    NOT NULL,
    event          TEXT,
    webhook_token  TEXT,
    signing_secret TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    UNIQUE (tenant, name)
);
-- `automation_by_webhook_token`: one automation per token, ever.
CREATE UNIQUE INDEX automations_webhook_token ON automations (webhook_token)
    WHERE webhook_token IS NOT NULL;
-- `automations_for_event`: the tenant's enabled listeners of one event, oldest first.
CREATE INDEX automations_event ON automations (tenant, event, created_at, id)
    WHERE enabled = 1;
-- One row per run the loop guard admitted; rows older than the window are pruned by the
-- next admission of the same (automation, ticket).
CREATE TABLE automation_guard (
    seq        INTEGER PRIMARY KEY,
    tenant     BLOB    NOT NULL,
    automation BLOB    NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    ticket     BLOB    NOT NULL REFERENCES desk_tickets (id),
    at         INTEGER NOT NULL
);
-- The window count and the prune: a range of one (automation, ticket).
CREATE INDEX automation_guard_window ON automation_guard (automation, ticket, at);
"#;

/// The process registry ([`fronta_engine::liveness`]): one row per process that executes
/// runs, beating; each running run names the process that holds it, so a dead process's
/// runs are found and released at once (the partial index covers running runs only).
const PROCESSES_V19: &str = r#"
CREATE TABLE processes (
    id            BLOB    PRIMARY KEY,
    host          TEXT    NOT NULL,
    pid           INTEGER NOT NULL,
    started       TEXT    NOT NULL,
    beat_at       INTEGER NOT NULL,
    registered_at INTEGER NOT NULL
);
ALTER TABLE runs ADD COLUMN locked_proc BLOB;
CREATE INDEX runs_held ON runs (locked_proc) WHERE status = 1;
"#;

/// Named tenant tokens with roles (`fronta_desk::access`): the token made with each tenant
/// so far becomes its first admin token, called `admin`; the operator's admin tokens; and
/// the audit log (`fronta_engine::audit`), read newest first per tenant or for all.
const ACCESS_V20: &str = r#"
ALTER TABLE desk_tenant_tokens ADD COLUMN id BLOB;
ALTER TABLE desk_tenant_tokens ADD COLUMN name TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE desk_tenant_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE desk_tenant_tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE desk_tenant_tokens ADD COLUMN last_used_at INTEGER;
UPDATE desk_tenant_tokens SET id = randomblob(16);
CREATE UNIQUE INDEX desk_tenant_tokens_id ON desk_tenant_tokens (id);
CREATE UNIQUE INDEX desk_tenant_tokens_name ON desk_tenant_tokens (tenant, name);
CREATE TABLE admin_tokens (
    id           BLOB    PRIMARY KEY,
    name         TEXT    NOT NULL UNIQUE,
    hash         TEXT    NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER
);
CREATE TABLE audit_log (
    id          BLOB    PRIMARY KEY,
    at          INTEGER NOT NULL,
    tenant      BLOB,
    actor_kind  TEXT    NOT NULL,
    actor_id    BLOB,
    actor_name  TEXT    NOT NULL,
    actor_role  TEXT,
    client      TEXT,
    method      TEXT    NOT NULL,
    route       TEXT    NOT NULL,
    object_kind TEXT    NOT NULL,
    object_id   TEXT,
    summary     TEXT    NOT NULL
);
CREATE INDEX audit_log_tenant ON audit_log (tenant, at, id);
CREATE INDEX audit_log_at ON audit_log (at, id);
"#;

/// Old webhook tokens and signing secrets an automation keeps after a rotation, each
/// valid until `expires_at` (Unix milliseconds; `fronta_automation::rotation`). A webhook
/// lookup by an old token goes through `automation_retired_value`; an automation's rows
/// are read with it (the primary key) and go with it.
const RETIRED_V21: &str = r#"
CREATE TABLE automation_retired (
    automation  BLOB    NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    tenant      BLOB    NOT NULL,
    kind        TEXT    NOT NULL,
    value       TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (automation, kind, value)
);
CREATE INDEX automation_retired_value ON automation_retired (value);
"#;

/// Apply the migrations this database lacks. Returns the versions applied now.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<Vec<i64>> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )?;
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let present: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?1)",
            [version],
            |row| row.get(0),
        )?;
        if !present {
            tx.execute_batch(sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
                rusqlite::params![version, name, chrono::Utc::now().timestamp_millis()],
            )?;
            applied.push(*version);
        }
        tx.commit()?;
    }
    Ok(applied)
}
