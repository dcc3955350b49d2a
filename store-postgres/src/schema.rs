//! The schema, as numbered migrations embedded in the binary, and `migrate`, which applies
//! the missing ones. A migration never changes once released; a new one is appended.
//!
//! Each migration runs in its own transaction that first takes a transaction-level
//! advisory lock ([`MIGRATION_LOCK`]), so several processes starting at once agree: the
//! first applies, the others wait, then find it recorded in `schema_migrations` and skip
//! it. Left out: down-migrations and a CLI (`fronta migrate` calls [`migrate`]).
//!
//! The versions and names follow the SQLite store's (`fronta_store_sqlite::schema`): 1
//! runs, 2 desk, 3 automations, 4 member open counts, 6 secrets, 7 mcp servers, 8 service
//! limits, 9 widgets, so one number means the same tables on both. Versions increase along the list but need not be consecutive.

use sqlx::PgPool;

/// The advisory lock (single `bigint` key space) that orders migrating processes:
/// "fronta" in ASCII, then 1.
pub const MIGRATION_LOCK: i64 = 0x6672_6F6E_7461_0001;

/// The advisory lock class (two-`int4` key space) of the per-tenant locks that keep
/// `run_tenants` truthful; the second key is `hashtext(tenant)`. See [`RUNS_V1`].
pub const TENANT_LOCK_CLASS: i32 = 0x6672_6F6E;

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
    (11, "wake-ups name their sender", SENDER_V11),
    (12, "an owner token means running", OWNER_IFF_RUNNING_V12),
    (13, "automation versions", AUTOMATION_VERSIONS_V13),
    (14, "references by id", REFS_V14),
    (15, "suppressed runs", SUPPRESSED_V15),
    (16, "finished runs by their end", RETENTION_V16),
    (17, "a tenant's own retention", TENANT_RETENTION_V17),
    (18, "incidents by their last change", INCIDENTS_UPDATED_V18),
    (19, "finished runs counted, runs by tenant", RUN_COUNTS_V19),
    (20, "mail servers", MAIL_SERVERS_V20),
    (21, "member availability, runs waiting for room", ROOM_V21),
    (
        22,
        "the process registry, runs name their holder",
        PROCESSES_V22,
    ),
    (
        23,
        "named tokens with roles, admin tokens, the audit log",
        ACCESS_V23,
    ),
    (
        24,
        "retired webhook tokens and signing secrets",
        RETIRED_V24,
    ),
];

/// Named tenant tokens with roles, the operator's admin tokens and the audit log, like
/// SQLite's migration 20.
const ACCESS_V23: &str = r#"
ALTER TABLE desk_tenant_tokens ADD COLUMN id uuid;
ALTER TABLE desk_tenant_tokens ADD COLUMN name text NOT NULL DEFAULT 'admin';
ALTER TABLE desk_tenant_tokens ADD COLUMN role text NOT NULL DEFAULT 'admin';
ALTER TABLE desk_tenant_tokens ADD COLUMN expires_at timestamptz;
ALTER TABLE desk_tenant_tokens ADD COLUMN last_used_at timestamptz;
UPDATE desk_tenant_tokens SET id = gen_random_uuid();
ALTER TABLE desk_tenant_tokens ALTER COLUMN id SET NOT NULL;
CREATE UNIQUE INDEX desk_tenant_tokens_id ON desk_tenant_tokens (id);
CREATE UNIQUE INDEX desk_tenant_tokens_name ON desk_tenant_tokens (tenant, name);
CREATE TABLE admin_tokens (
    id           uuid        PRIMARY KEY,
    name         text        NOT NULL UNIQUE,
    hash         text        NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz
);
CREATE TABLE audit_log (
    id          uuid        PRIMARY KEY,
    at          timestamptz NOT NULL,
    tenant      uuid,
    actor_kind  text        NOT NULL,
    actor_id    uuid,
    actor_name  text        NOT NULL,
    actor_role  text,
    client      text,
    method      text        NOT NULL,
    route       text        NOT NULL,
    object_kind text        NOT NULL,
    object_id   text,
    summary     text        NOT NULL
);
CREATE INDEX audit_log_tenant ON audit_log (tenant, at, id);
CREATE INDEX audit_log_at ON audit_log (at, id);
"#;

/// Capacity as a cap, like SQLite's migration 18: a member's `available`, and the runs
/// waiting for room in a group (one row per waiting run; a ticket write that moves an
/// open count wakes its group's rows through the group index).
pub const ROOM_V21: &str = r#"
ALTER TABLE desk_members ADD COLUMN available boolean NOT NULL DEFAULT true;
CREATE TABLE desk_group_waiters (
    run_id   uuid        PRIMARY KEY,
    tenant   uuid        NOT NULL REFERENCES desk_tenants (id),
    group_id uuid        NOT NULL REFERENCES desk_groups (id) ON DELETE CASCADE,
    since    timestamptz NOT NULL
);
CREATE INDEX desk_group_waiters_group ON desk_group_waiters (group_id, since);
"#;

/// Per-tenant mail servers (the `MailServerStore` port), like SQLite's migration 17 and
/// the MCP servers of migration 7: the configuration as `jsonb` (the password a secret
/// reference, never a value).
pub const MAIL_SERVERS_V20: &str = r#"
CREATE TABLE mail_servers (
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    name       text        COLLATE "C" NOT NULL,
    config     jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
"#;

/// Reads that stay flat as history grows (`RunStore::run_stats`, `RunStore::run_list`).
///
/// `run_counts` holds, per kind and finished status (2..=5), how many runs are in it and
/// their summed counters, in shards: each connection adds to the row of its own backend
/// (`shard` = `pg_backend_pid()`), so concurrent finishes never wait on one counter row
/// (nor deadlock on two), and a reader sums the shards. Statement triggers with
/// transition tables keep it on every write of `runs` whatever code path makes it — one
/// upsert per statement and (kind, status), not one per row: a row that enters a
/// finished status adds itself, one that leaves it (a retry, a restart) or is deleted
/// (retention) takes itself away. `RunStore::compact_counts` folds the shards of
/// backends that are gone into shard 0, so the table stays as small as the kinds times
/// the live connections. Runs still going are counted from the partial indexes
/// `runs_pending` and `runs_running`. `runs_by_tenant` and `runs_finished_by_tenant` let
/// a tenant's list walk its own runs newest first instead of every tenant's.
pub const RUN_COUNTS_V19: &str = r#"
CREATE TABLE run_counts (
    kind     text     NOT NULL,
    status   smallint NOT NULL,
    shard    integer  NOT NULL,
    runs     bigint   NOT NULL,
    attempts bigint   NOT NULL,
    reclaims bigint   NOT NULL,
    parks    bigint   NOT NULL,
    PRIMARY KEY (kind, status, shard)
);
INSERT INTO run_counts (kind, status, shard, runs, attempts, reclaims, parks)
    SELECT kind, status, 0, count(*), sum(attempts), sum(reclaims), sum(parks)
    FROM runs WHERE status >= 2 GROUP BY kind, status;

CREATE FUNCTION fronta_count_runs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO run_counts AS c (kind, status, shard, runs, attempts, reclaims, parks)
            SELECT kind, status, pg_backend_pid(), count(*), sum(attempts), sum(reclaims), sum(parks)
            FROM new_runs WHERE status >= 2 GROUP BY kind, status ORDER BY kind, status
            ON CONFLICT (kind, status, shard) DO UPDATE SET runs = c.runs + excluded.runs,
                attempts = c.attempts + excluded.attempts,
                reclaims = c.reclaims + excluded.reclaims, parks = c.parks + excluded.parks;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO run_counts AS c (kind, status, shard, runs, attempts, reclaims, parks)
            SELECT kind, status, pg_backend_pid(), sum(n), sum(a), sum(r), sum(p) FROM (
                SELECT kind, status, 1 AS n, attempts AS a, reclaims AS r, parks AS p
                    FROM new_runs WHERE status >= 2
                UNION ALL
                SELECT kind, status, -1, -attempts, -reclaims, -parks
                    FROM old_runs WHERE status >= 2
            ) AS moved
            GROUP BY kind, status
            HAVING sum(n) <> 0 OR sum(a) <> 0 OR sum(r) <> 0 OR sum(p) <> 0
            ORDER BY kind, status
            ON CONFLICT (kind, status, shard) DO UPDATE SET runs = c.runs + excluded.runs,
                attempts = c.attempts + excluded.attempts,
                reclaims = c.reclaims + excluded.reclaims, parks = c.parks + excluded.parks;
    ELSE
        INSERT INTO run_counts AS c (kind, status, shard, runs, attempts, reclaims, parks)
            SELECT kind, status, pg_backend_pid(), -count(*), -sum(attempts), -sum(reclaims),
                -sum(parks)
            FROM old_runs WHERE status >= 2 GROUP BY kind, status ORDER BY kind, status
            ON CONFLICT (kind, status, shard) DO UPDATE SET runs = c.runs + excluded.runs,
                attempts = c.attempts + excluded.attempts,
                reclaims = c.reclaims + excluded.reclaims, parks = c.parks + excluded.parks;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER run_counts_insert AFTER INSERT ON runs
    REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION fronta_count_runs();
CREATE TRIGGER run_counts_update AFTER UPDATE ON runs
    REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION fronta_count_runs();
CREATE TRIGGER run_counts_delete AFTER DELETE ON runs
    REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION fronta_count_runs();
CREATE INDEX runs_by_tenant ON runs (tenant, id);
CREATE INDEX runs_finished_by_tenant ON runs (tenant, status, id) WHERE status >= 2;
"#;

/// `DeskStore::incident_recent`: a tenant's incidents by their last change.
pub const INCIDENTS_UPDATED_V18: &str = r#"
CREATE INDEX desk_incidents_updated ON desk_incidents (tenant, updated_at, id);
"#;

/// A tenant's own retention of finished runs (`TenantRetention`; NULL: the operator's).
pub const TENANT_RETENTION_V17: &str = r#"
ALTER TABLE desk_tenants ADD COLUMN retention jsonb;
"#;

/// Retention (`RunStore::run_prune`) walks finished runs of one status, oldest end first.
pub const RETENTION_V16: &str = r#"
CREATE INDEX runs_finished ON runs (status, COALESCE(completed_at, failed_at, cancelled_at))
    WHERE status >= 2;
"#;

/// A run may end `suppressed` (5): a guard stopped it on purpose (the automation loop
/// guard); a manual retry starts it like a failed one.
pub const SUPPRESSED_V15: &str = r#"
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status BETWEEN 0 AND 5);
"#;

/// References by id (`fronta_automation::refs`): what the names of each version, and of
/// the current definition, are bound to. `automations.refs` is NULL for a definition
/// saved before: it is bound by name the first time a save, a rename or a removal needs
/// it.
pub const REFS_V14: &str = r#"
ALTER TABLE automations ADD COLUMN refs jsonb;
ALTER TABLE automation_versions ADD COLUMN refs jsonb NOT NULL DEFAULT '[]';
"#;

/// Automation versions (`fronta_automation::versions`): every saved definition, numbered
/// per automation, with its content hash and author; kept when the automation is deleted
/// (its runs name their version). `automations.current_version` is the newest;
/// `automations.in_flight` says what a pause does to runs in flight. Every automation
/// saved before becomes version 1 (its hash is filled in when it is read, as on SQLite),
/// and every run enqueued before names no version, which reads as 1.
pub const AUTOMATION_VERSIONS_V13: &str = r#"
CREATE TABLE automation_versions (
    automation uuid        NOT NULL,
    version    integer     NOT NULL CHECK (version >= 1),
    tenant     uuid        NOT NULL,
    definition jsonb       NOT NULL,
    hash       text        NOT NULL,
    created_at timestamptz NOT NULL,
    created_by text        NOT NULL,
    PRIMARY KEY (automation, version)
);
ALTER TABLE automations ADD COLUMN current_version integer NOT NULL DEFAULT 1;
ALTER TABLE automations ADD COLUMN in_flight text NOT NULL DEFAULT 'finish'
    CHECK (in_flight IN ('finish', 'hold'));
INSERT INTO automation_versions (automation, version, tenant, definition, hash, created_at, created_by)
    SELECT id, 1, tenant, definition, '', updated_at, 'migration' FROM automations;
"#;

/// A run holds an owner token exactly while it is `running`: every write that leaves
/// `running` clears `locked_by`, and the claim sets both together. As a constraint, the
/// owner check of a write (`locked_by = $owner`) implies `status = 1` by itself, so the
/// finish need not name the status (see `runs::FINISH`).
///
/// Before the constraint, a cancel racing a claim could write `cancelled` and keep the
/// claim's token (see `runs::REQUEST_CANCEL`). Such rows are repaired first: a run that
/// left `running` drops its token (no write can use it: the run is terminal or pending),
/// and a `running` run without one — none is known to exist — gets a token nobody holds,
/// so it is reclaimed when its lease ends.
pub const OWNER_IFF_RUNNING_V12: &str = r#"
UPDATE runs SET locked_by = NULL, locked_until = NULL
    WHERE status <> 1 AND locked_by IS NOT NULL;
UPDATE runs SET locked_by = gen_random_uuid()
    WHERE status = 1 AND locked_by IS NULL;
ALTER TABLE runs ADD CONSTRAINT runs_owner_iff_running
    CHECK ((status = 1) = (locked_by IS NOT NULL));
"#;

/// `fronta_note_pending` as in migration 1, but its notification's payload is the
/// session's `fronta.sender` (each store sets it on its connections; empty when unset),
/// so a process's listener can skip the wake-ups its own writes sent.
pub const SENDER_V11: &str = r#"
CREATE OR REPLACE FUNCTION fronta_note_pending(tenants text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    noted text[];
BEGIN
    SELECT coalesce(array_agg(DISTINCT t ORDER BY t), '{}') INTO noted FROM unnest(tenants) AS t;
    IF cardinality(noted) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1718775662, hashtext(t)) FROM unnest(noted) AS t;
    INSERT INTO run_tenants (tenant) SELECT t FROM unnest(noted) AS t ON CONFLICT DO NOTHING;
    PERFORM pg_notify('fronta_runs', coalesce(current_setting('fronta.sender', true), ''));
    RETURN cardinality(noted);
END
$$;
"#;

/// Dashboard widgets (the `WidgetStore` port), like SQLite's migration 9: the definition
/// as JSON beside its cache (data, when fetched, when last tried, the last error) and the
/// refresh lease (`lease_token`, `lease_until`) that keeps one call per widget at a time
/// across processes; claims lock the row (`FOR UPDATE`).
pub const WIDGETS_V9: &str = r#"
CREATE TABLE widgets (
    id          uuid        PRIMARY KEY,
    tenant      uuid        NOT NULL REFERENCES desk_tenants (id),
    name        text        COLLATE "C" NOT NULL,
    config      jsonb       NOT NULL,
    data        jsonb,
    fetched_at  timestamptz,
    checked_at  timestamptz,
    error       text,
    error_at    timestamptz,
    lease_token uuid,
    lease_until timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);
CREATE INDEX widgets_by_tenant ON widgets (tenant, name, id);
"#;

/// The cursor of each poll automation (the `PollCursors` port), like SQLite's migration
/// 10: the JSON value (as text) its last poll moved it to, and which run did.
const POLL_CURSORS_V10: &str = r#"
CREATE TABLE poll_cursors (
    automation uuid        PRIMARY KEY REFERENCES automations (id) ON DELETE CASCADE,
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    value      text        NOT NULL,
    run        text        NOT NULL,
    updated_at timestamptz NOT NULL
);
"#;

/// Per-(tenant, service) limits (the `ServiceLimits` port), like SQLite's migration 8: a
/// breaker row per (tenant, service), locked by every acquire and release of it, and a
/// row per in-flight call (a slot) with its lease's expiry, so a crashed process's slots
/// free themselves. `probe_slot` names the half-open breaker's probe.
pub const SERVICE_LIMITS_V8: &str = r#"
CREATE TABLE service_breakers (
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    service    text        COLLATE "C" NOT NULL,
    state      text        NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    failures   integer     NOT NULL,
    opened_at  timestamptz,
    retry_at   timestamptz,
    probe_slot uuid,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, service)
);
CREATE TABLE service_slots (
    id         uuid        PRIMARY KEY,
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    service    text        COLLATE "C" NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX service_slots_by_service ON service_slots (tenant, service, expires_at);
CREATE INDEX service_slots_by_expiry ON service_slots (expires_at);
"#;

/// Per-tenant MCP servers (the `McpServerStore` port), like SQLite's migration 7: the
/// configuration as JSON (a header value holds secret references, never values).
pub const MCP_SERVERS_V7: &str = r#"
CREATE TABLE mcp_servers (
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    name       text        COLLATE "C" NOT NULL,
    config     jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
"#;

/// Per-tenant secrets (the `SecretStore` port), like SQLite's migration 6: sealed values
/// only, never plain text; `key_version` says which configured key opens the row.
pub const SECRETS_V6: &str = r#"
CREATE TABLE secrets (
    tenant      uuid        NOT NULL REFERENCES desk_tenants (id),
    name        text        COLLATE "C" NOT NULL,
    key_version integer     NOT NULL,
    nonce       bytea       NOT NULL,
    ciphertext  bytea       NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
"#;

/// The advisory lock class (two-`int4` key space) of the loop guard: one lock per
/// (automation, ticket), the second key `hashtext` of the pair ("guar" in ASCII). See
/// `automations::guard_admit`.
pub const GUARD_LOCK_CLASS: i32 = 0x6775_6172;

/// The runs table, its indexes, the tenants with possible pending work, and the one
/// function that records pending work.
///
/// `status`: 0 pending, 1 running, 2 completed, 3 failed, 4 cancelled (as on SQLite; 5
/// suppressed since migration 15).
/// Instants are `timestamptz` kept to the millisecond. `max_retries` is a `bigint` so any
/// `u32` fits; the counters are `integer`.
///
/// `run_tenants` lists every tenant that may have pending runs, so a claim walks tenants
/// instead of the queue. The invariant "a tenant with a pending run has a row" must hold
/// while writers run concurrently:
/// - whoever makes runs pending (enqueue, a finish that puts runs back) calls
///   `fronta_note_pending(tenants)` in the same transaction: it takes a *shared*
///   transaction-level advisory lock per tenant, then inserts the missing rows, then
///   notifies `fronta_runs`;
/// - a claim forgets a tenant only after taking the *exclusive* lock with
///   `pg_try_advisory_xact_lock` (never waiting) and then, in a later statement (a
///   fresh snapshot), finding no pending run of it.
///
/// So a forget never overlaps an uncommitted enqueue of the same tenant, and an enqueue
/// that waited for a forget re-inserts the row after it.
pub const RUNS_V1: &str = r#"
CREATE TABLE runs (
    id               uuid        PRIMARY KEY,
    tenant           text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    state            bytea,
    trigger          text        NOT NULL,
    unique_key       text,
    priority         smallint    NOT NULL DEFAULT 0,
    status           smallint    NOT NULL CHECK (status BETWEEN 0 AND 4),
    run_at           timestamptz NOT NULL,
    attempts         integer     NOT NULL DEFAULT 0,
    max_retries      bigint      NOT NULL,
    reclaims         integer     NOT NULL DEFAULT 0,
    parks            integer     NOT NULL DEFAULT 0,
    locked_by        uuid,
    locked_until     timestamptz,
    heartbeat_at     timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    started_at       timestamptz,
    completed_at     timestamptz,
    failed_at        timestamptz,
    cancelled_at     timestamptz,
    last_error       text,
    result           jsonb
);
-- Due runs per tenant, in claim order: the fair claim probes it once per tenant.
CREATE INDEX runs_pending ON runs (tenant, priority DESC, run_at) WHERE status = 0;
-- Running runs by lease end: expired leases are found without a scan.
CREATE INDEX runs_running ON runs (locked_until) WHERE status = 1;
-- One non-terminal run per unique key within a tenant (the enqueue's ON CONFLICT arbiter).
CREATE UNIQUE INDEX runs_unique_key ON runs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND status IN (0, 1);
-- Tenants that may have pending runs: the claim walks this short list, not the queue.
CREATE TABLE run_tenants (tenant text PRIMARY KEY);

-- Record that `tenants` have pending runs (see the lock protocol in schema.rs) and wake
-- listeners. Returns how many distinct tenants it noted; 0 does nothing at all.
CREATE FUNCTION fronta_note_pending(tenants text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    noted text[];
BEGIN
    SELECT coalesce(array_agg(DISTINCT t ORDER BY t), '{}') INTO noted FROM unnest(tenants) AS t;
    IF cardinality(noted) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1718775662, hashtext(t)) FROM unnest(noted) AS t;
    INSERT INTO run_tenants (tenant) SELECT t FROM unnest(noted) AS t ON CONFLICT DO NOTHING;
    PERFORM pg_notify('fronta_runs', '');
    RETURN cardinality(noted);
END
$$;
"#;

/// The service desk (the `DeskStore` port), like SQLite's migration 2: ids are `uuid`,
/// instants `timestamptz` (kept to the millisecond), lists (statuses, fields, tags) and
/// maps (ticket fields, incident detail) `jsonb`. Every row but a tenant's carries its
/// tenant, and every query the port makes is scoped by it.
///
/// Names that lists are ordered by (groups, members, ticket types) are `COLLATE "C"`:
/// byte order, as on SQLite, whatever the database's default collation.
///
/// Differences from SQLite: a tenant's ticket counter row is made with the tenant (a
/// ticket create locks it first, which orders the creates of one tenant — see
/// `desk::ticket_upsert`); the log's `seq` is an identity column.
pub const DESK_V2: &str = r#"
CREATE TABLE desk_tenants (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL
);
-- API tokens, by their SHA-256 hash only (the raw token is shown once and never stored).
CREATE TABLE desk_tenant_tokens (
    hash       text        PRIMARY KEY,
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    created_at timestamptz NOT NULL
);
CREATE TABLE desk_groups (
    id         uuid        PRIMARY KEY,
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    name       text        COLLATE "C" NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (tenant, name)
);
CREATE TABLE desk_members (
    id         uuid        PRIMARY KEY,
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    group_id   uuid        NOT NULL REFERENCES desk_groups (id) ON DELETE CASCADE,
    name       text        COLLATE "C" NOT NULL,
    email      text,
    capacity   bigint      NOT NULL CHECK (capacity >= 0),
    created_at timestamptz NOT NULL
);
CREATE INDEX desk_members_group ON desk_members (group_id, name, id);
CREATE TABLE desk_ticket_types (
    id         uuid        PRIMARY KEY,
    tenant     uuid        NOT NULL REFERENCES desk_tenants (id),
    name       text        COLLATE "C" NOT NULL,
    statuses   jsonb       NOT NULL,
    fields     jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    UNIQUE (tenant, name)
);
-- The last ticket number given out per tenant: numbers are never reused.
CREATE TABLE desk_ticket_counters (
    tenant      uuid   PRIMARY KEY REFERENCES desk_tenants (id),
    last_number bigint NOT NULL
);
-- `type_name` and `group_name` are names (a type is never renamed; a group rename is
-- carried to its tickets). `assignee_name` keeps who handled a closed ticket after the
-- member is deleted; a rename is carried to it.
CREATE TABLE desk_tickets (
    id            uuid        PRIMARY KEY,
    tenant        uuid        NOT NULL REFERENCES desk_tenants (id),
    number        bigint      NOT NULL,
    external_id   text,
    title         text        NOT NULL,
    type_name     text,
    status        text,
    closed        boolean     NOT NULL DEFAULT false,
    tags          jsonb       NOT NULL DEFAULT '[]',
    assignee      uuid,
    assignee_name text,
    group_name    text,
    fields        jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);
-- Numbers are unique per tenant; newest first is a walk of this index backwards.
CREATE UNIQUE INDEX desk_tickets_number ON desk_tickets (tenant, number);
CREATE UNIQUE INDEX desk_tickets_external_id ON desk_tickets (tenant, external_id)
    WHERE external_id IS NOT NULL;
-- The filters of `ticket_list`, each walked newest first.
CREATE INDEX desk_tickets_status ON desk_tickets (tenant, status, number);
CREATE INDEX desk_tickets_type ON desk_tickets (tenant, type_name, number);
CREATE INDEX desk_tickets_closed ON desk_tickets (tenant, closed, number);
-- Also a member's open tickets, unassigned when the member is deleted. (SQLite's
-- `desk_tickets_open_by_assignee` served the least-busy count, which migration 4 replaced
-- with per-member counts: not made here.)
CREATE INDEX desk_tickets_assignee ON desk_tickets (tenant, assignee, number)
    WHERE assignee IS NOT NULL;
CREATE TABLE desk_ticket_log (
    seq     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ticket  uuid        NOT NULL REFERENCES desk_tickets (id),
    at      timestamptz NOT NULL,
    kind    text        NOT NULL,
    message text        NOT NULL,
    run_id  text
);
CREATE INDEX desk_ticket_log_ticket ON desk_ticket_log (ticket, seq);
CREATE TABLE desk_incidents (
    id          uuid        PRIMARY KEY,
    tenant      uuid        NOT NULL REFERENCES desk_tenants (id),
    cause       text        NOT NULL,
    title       text        NOT NULL,
    impact      text        NOT NULL,
    detail      jsonb       NOT NULL,
    status      text        NOT NULL CHECK (status IN ('open', 'resolved')),
    count       bigint      NOT NULL,
    ticket      uuid        REFERENCES desk_tickets (id),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    resolved_at timestamptz
);
-- At most one open incident per cause within a tenant (the arbiter of a repeat report).
CREATE UNIQUE INDEX desk_incidents_open_cause ON desk_incidents (tenant, cause)
    WHERE status = 'open';
CREATE INDEX desk_incidents_tenant ON desk_incidents (tenant, created_at);
CREATE INDEX desk_incidents_created ON desk_incidents (created_at);
"#;

/// Saved automations (the `AutomationStore` port) and the loop guard's counter, like
/// SQLite's migration 3. The definition is the automation's JSON; `enabled`,
/// `trigger_kind` and `event` mirror it for the queries that pick automations (`event` is
/// set only for event triggers). `webhook_token` stays in the row while the trigger is
/// not a webhook, so a trigger that changes away and back keeps its URL; the store shows
/// and finds it only for webhook triggers.
pub const AUTOMATIONS_V3: &str = r#"
CREATE TABLE automations (
    id             uuid        PRIMARY KEY,
    tenant         uuid        NOT NULL REFERENCES desk_tenants (id),
    name           text        COLLATE "C" NOT NULL,
    definition     jsonb       NOT NULL,
    enabled        boolean     NOT NULL,
    trigger_kind   text        NOT NULL,
    event          text,
    webhook_token  text,
    signing_secret text,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    UNIQUE (tenant, name)
);
-- `automation_by_webhook_token`: one automation per token, ever.
CREATE UNIQUE INDEX automations_webhook_token ON automations (webhook_token)
    WHERE webhook_token IS NOT NULL;
-- `automations_for_event`: the tenant's enabled listeners of one event, oldest first.
CREATE INDEX automations_event ON automations (tenant, event, created_at, id)
    WHERE enabled;
-- One row per run the loop guard admitted; rows older than the window are pruned by the
-- next admission of the same (automation, ticket).
CREATE TABLE automation_guard (
    seq        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant     uuid        NOT NULL,
    automation uuid        NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    ticket     uuid        NOT NULL REFERENCES desk_tickets (id),
    at         timestamptz NOT NULL
);
-- The window count and the prune: a range of one (automation, ticket).
CREATE INDEX automation_guard_window ON automation_guard (automation, ticket, at);
"#;

/// `RunStore::run_find_by_key`: the unique index on live runs frees a key when its run
/// finishes; this one keeps every keyed run findable.
pub const KEY_HISTORY_V5: &str = r#"
CREATE INDEX runs_key_history ON runs (tenant, unique_key, id)
    WHERE unique_key IS NOT NULL;
"#;

/// Open tickets per member, kept by triggers on every write of `desk_tickets` whatever
/// code path makes it, so least-busy reads one row per member (a primary-key probe)
/// instead of counting a member's open tickets (which grows with the desk). Like SQLite's
/// migration 4, plus: every member has a row from `member_add` on (backfilled here with 0
/// for members without open tickets), so least-busy can lock the group's rows with
/// `FOR UPDATE` before it reads them — that lock is what makes concurrent assignments
/// count each other's. Rows of deleted members stay (their closed tickets still name
/// them), as on SQLite.
pub const MEMBER_OPEN_V4: &str = r#"
CREATE TABLE desk_member_open (
    member uuid   PRIMARY KEY,
    open   bigint NOT NULL
);
INSERT INTO desk_member_open (member, open)
    SELECT assignee, count(*) FROM desk_tickets
    WHERE assignee IS NOT NULL AND NOT closed GROUP BY assignee;
INSERT INTO desk_member_open (member, open)
    SELECT id, 0 FROM desk_members
    ON CONFLICT (member) DO NOTHING;

-- One function for the three triggers: take the old row's open ticket off its assignee,
-- put the new row's on its assignee.
CREATE FUNCTION desk_member_open_count() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.assignee IS NOT NULL AND NOT OLD.closed THEN
            UPDATE desk_member_open SET open = open - 1 WHERE member = OLD.assignee;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.assignee IS NOT NULL AND NOT NEW.closed THEN
            INSERT INTO desk_member_open AS counts (member, open) VALUES (NEW.assignee, 1)
                ON CONFLICT (member) DO UPDATE SET open = counts.open + 1;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER desk_member_open_insert AFTER INSERT ON desk_tickets
    FOR EACH ROW WHEN (NEW.assignee IS NOT NULL AND NOT NEW.closed)
    EXECUTE FUNCTION desk_member_open_count();
CREATE TRIGGER desk_member_open_update AFTER UPDATE OF assignee, closed ON desk_tickets
    FOR EACH ROW WHEN (OLD.assignee IS DISTINCT FROM NEW.assignee
                       OR OLD.closed IS DISTINCT FROM NEW.closed)
    EXECUTE FUNCTION desk_member_open_count();
CREATE TRIGGER desk_member_open_delete AFTER DELETE ON desk_tickets
    FOR EACH ROW WHEN (OLD.assignee IS NOT NULL AND NOT OLD.closed)
    EXECUTE FUNCTION desk_member_open_count();
"#;

/// The process registry ([`fronta_engine::liveness`]): one row per process that executes
/// runs, beating by the database clock; each running run names the process that holds
/// it, so a dead process's runs are found and released at once (the partial index covers
/// running runs only).
/// Old webhook tokens and signing secrets an automation keeps after a rotation, each
/// valid until `expires_at` (`fronta_automation::rotation`). A webhook lookup by an old
/// token goes through `automation_retired_value`; an automation's rows are read with it
/// (the primary key) and go with it.
const RETIRED_V24: &str = r#"
CREATE TABLE automation_retired (
    automation  uuid        NOT NULL REFERENCES automations (id) ON DELETE CASCADE,
    tenant      uuid        NOT NULL,
    kind        text        NOT NULL,
    value       text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (automation, kind, value)
);
CREATE INDEX automation_retired_value ON automation_retired (value);
"#;

const PROCESSES_V22: &str = r#"
CREATE TABLE processes (
    id            uuid        PRIMARY KEY,
    host          text        NOT NULL,
    pid           bigint      NOT NULL,
    started       text        NOT NULL,
    beat_at       timestamptz NOT NULL,
    registered_at timestamptz NOT NULL
);
ALTER TABLE runs ADD COLUMN locked_proc uuid;
CREATE INDEX runs_held ON runs (locked_proc) WHERE status = 1;
"#;

/// Apply the migrations this database lacks. Returns the versions applied now.
pub async fn migrate(pool: &PgPool) -> Result<Vec<i64>, sqlx::Error> {
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version    bigint      PRIMARY KEY,
                name       text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .execute(&mut *tx)
        .await?;
        let present: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)",
        )
        .bind(version)
        .fetch_one(&mut *tx)
        .await?;
        if !present {
            sqlx::raw_sql(*sql).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
                .bind(version)
                .bind(*name)
                .execute(&mut *tx)
                .await?;
            applied.push(*version);
        }
        tx.commit().await?;
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenant_lock_class_in_the_sql_matches_the_constant() {
        assert!(
            RUNS_V1.contains(&format!(
                "pg_advisory_xact_lock_shared({TENANT_LOCK_CLASS},"
            )),
            "fronta_note_pending must lock the class the claim's forget uses"
        );
        assert!(
            SENDER_V11.contains(&format!(
                "pg_advisory_xact_lock_shared({TENANT_LOCK_CLASS},"
            )),
            "the replaced fronta_note_pending must keep the lock"
        );
        assert!(
            SENDER_V11.contains(&format!(
                "current_setting('{}', true)",
                crate::SENDER_SETTING
            )),
            "the payload is the setting the store sets on its connections"
        );
    }

    #[test]
    fn migrations_are_numbered_in_increasing_order_from_one() {
        assert_eq!(MIGRATIONS[0].0, 1, "the first migration is 1");
        for pair in MIGRATIONS.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "migration {} comes before {}: versions only increase",
                pair[0].0,
                pair[1].0
            );
        }
    }
}
