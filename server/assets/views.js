// The dashboard's views. Each is `{title, mount(main), update(changes), unmount()}`:
// `mount` builds the frame once, `update` redraws the parts that show data (after the
// first load, after a reload, and on every stream event), `unmount` stops its timers.
// Views read the data the shell keeps (`ctx.data`, filled by `app.js` and the stream)
// and fetch what only they need (a run's step log, a ticket's log, webhook help).
// The automation editor is its own module, `editor.js`, which shares the helpers exported here;
// the admin's Tokens and Audit pages are `access.js`.
//
// Roles: a control that writes is built only when `ctx.may("editor")` (a viewer's page
// has no such button, form or link at all); the Tokens and Audit pages only for
// `ctx.may("admin")`. The server refuses all the same (403), and such a refusal reads as
// the role it needs.

import { h, append, replace, when, between, json, badge, select } from "./dom.js";
import { api, listAll, withQuery } from "./api.js";
import { automationEditor, automationReader } from "./editor.js";
import { tokensView, auditView } from "./access.js";

export const RUN_STATUSES = ["scheduled", "queued", "running", "completed", "failed", "cancelled", "suppressed"];
export const TRIGGERS = ["webhook", "event", "poll", "schedule", "manual", "api"];
/** How often the overview asks for connector widgets again (their cache decides freshness). */
export const WIDGET_POLL_MS = 60000;
/** Runs shown per page of the runs list. */
export const RUNS_PAGE = 100;
/** Closed tickets read when the board is asked to show them. */
export const CLOSED_TICKETS_MAX = 1000;
/** How long a detail page waits after a stream event before reading the item again. */
const REFETCH_DELAY_MS = 150;

/** The sections of the navigation for a kind of session (a tenant's: for its role). */
export function navFor(kind, ctx) {
  if (kind === "admin") {
    return [["#/", "Tenants"], ["#/incidents", "Incidents"]];
  }
  return [
    ["#/", "Overview"],
    ["#/runs", "Runs"],
    ["#/tickets", "Tickets"],
    ["#/incidents", "Incidents"],
    ["#/automations", "Automations"],
    ["#/groups", "Groups"],
    ["#/ticket-types", "Ticket types"],
    ...(ctx?.may("admin") ? [["#/tokens", "Tokens"], ["#/audit", "Audit"]] : []),
  ];
}

/** The view of `path` (`/runs/ID`) with `query` (URLSearchParams). */
export function viewFor(ctx, path, query) {
  const parts = path.split("/").filter(Boolean);
  if (ctx.kind === "admin") {
    if (parts[0] === "incidents") return adminIncidentsView(ctx);
    return tenantsView(ctx);
  }
  switch (parts[0]) {
    case undefined:
      return overviewView(ctx);
    case "runs":
      return parts[1] ? runView(ctx, decodeURIComponent(parts[1])) : runsView(ctx, query);
    case "tickets":
      return parts[1] ? ticketView(ctx, decodeURIComponent(parts[1])) : ticketsView(ctx, query);
    case "incidents":
      return incidentsView(ctx);
    case "automations":
      if (!parts[1]) return automationsView(ctx);
      if (ctx.may("editor")) return automationEditor(ctx, decodeURIComponent(parts[1]));
      if (parts[1] === "new") return needsRoleView(ctx, "editor", "New automation", "Writing an automation");
      return automationReader(ctx, decodeURIComponent(parts[1]));
    case "groups":
      return groupsView(ctx);
    case "ticket-types":
      return ticketTypesView(ctx);
    case "tokens":
      return ctx.may("admin") ? tokensView(ctx) : needsRoleView(ctx, "admin", "Tokens", "Managing the tenant's tokens");
    case "audit":
      return ctx.may("admin") ? auditView(ctx, query) : needsRoleView(ctx, "admin", "Audit", "Reading the audit log");
    default:
      return notFoundView(path);
  }
}

// ---- shared pieces ----

function heading(text) {
  return h("h1", { tabindex: "-1" }, text);
}

function loading() {
  return h("p", { class: "muted" }, "Loading…");
}

/** A failed request, said on the page where its data would be. */
export function failed(error) {
  return h("p", { class: "error", role: "alert" }, described(error));
}

function automationName(ctx, id) {
  if (!id) return "—";
  return ctx.data.automations.get(id)?.name ?? `automation ${id.slice(0, 8)}…`;
}

function runLink(run, text) {
  return h("a", { href: `#/runs/${encodeURIComponent(run.id)}`, dataset: { key: `run-${run.id}` } }, text);
}

/** "retry 2 of 5 in 30 s" for a run waiting for its next attempt, else null. */
function nextAttempt(run) {
  if (!(run.status === "scheduled" || run.status === "queued") || run.attempts === 0) return null;
  return h("span", { class: "retry" }, `retry ${run.attempts} of ${run.maxRetries} `, when(run.runAt));
}

function byNewest(a, b) {
  return (b.createdAt ?? "").localeCompare(a.createdAt ?? "") || (b.id ?? "").localeCompare(a.id ?? "");
}

/** A failed request as the page says it: what was called and what it answered. */
export function described(error) {
  return error.describe ? error.describe() : String(error);
}

/**
 * Run `action` with `button` disabled, saying on `status` that it runs, then what it
 * answered (or, failing, `describe(error)`). Resolves to whether it succeeded.
 */
export async function busy(button, status, label, action, describe) {
  button.disabled = true;
  status.textContent = `${label}…`;
  status.className = "status";
  try {
    status.textContent = (await action()) ?? "Done.";
    return true;
  } catch (error) {
    status.textContent = describe(error);
    status.className = "status error";
    return false;
  } finally {
    button.disabled = false;
  }
}

/**
 * A button that runs `action` once at a time and says on the page how it went; a
 * failure reads as `describe` says (by default the call and its answer).
 */
export function actionButton(label, action, status, { attributes = {}, describe = described } = {}) {
  const button = h("button", { type: "button", ...attributes }, label);
  button.addEventListener("click", () => busy(button, status, label, action, describe));
  return button;
}

export function table(headers, rows, caption) {
  return h("div", { class: "scroll" },
    h("table", {},
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, headers.map((text) => h("th", { scope: "col" }, text)))),
      h("tbody", {}, rows)));
}

/** A page the signed-in role may not see (an old link, a typed address): what it needs. */
function needsRoleView(ctx, role, title, what) {
  const mine = ctx.me?.token?.role ?? "other";
  return {
    title,
    mount(main) {
      main.append(heading(title),
        h("p", { class: "error", id: "needs-role" },
          `${what} needs ${role === "admin" ? "an admin" : "an editor"} token; you are signed in with ${mine === "admin" || mine === "editor" ? "an" : "a"} ${mine} token. `,
          "Ask an admin of the tenant for a token with that role."),
        h("p", {}, h("a", { href: "#/" }, "Back to the overview")));
    },
  };
}

function notFoundView(path) {
  return {
    title: "Not found",
    mount(main) {
      main.append(heading("Not found"), h("p", {}, `Nothing is at ${path}. `, h("a", { href: "#/" }, "Back to the overview")));
    },
  };
}

// ---- overview: tiles over our own data, connector widgets ----

function overviewView(ctx) {
  let tiles;
  let recent;
  let widgets;
  let widgetState = { state: "loading" };
  let timer;

  async function loadWidgets() {
    try {
      const answer = await api("GET", "/api/widgets");
      widgetState = { state: "ok", items: answer?.items ?? [], at: Date.now() };
    } catch (error) {
      // No widget route on this server: the section stays hidden.
      widgetState = error.status === 404 ? { state: "absent" } : { state: "error", error };
    }
    drawWidgets();
  }

  function drawWidgets() {
    widgets.hidden = widgetState.state === "absent" || widgetState.state === "loading";
    if (widgetState.state === "error") {
      replace(widgets.querySelector(".widget-list"), failed(widgetState.error));
      return;
    }
    if (widgetState.state !== "ok") return;
    const items = widgetState.items;
    replace(widgets.querySelector(".widget-list"),
      items.length === 0 ? h("p", { class: "muted" }, "No widgets are set up.") : items.map(widgetTile));
  }

  function widgetTile(widget) {
    const status = h("span", { class: "status", role: "status" });
    const fetchedAt = widget.fetchedAt
      ?? (Number.isFinite(widget.ageSec) ? new Date(widgetState.at - widget.ageSec * 1000).toISOString() : null);
    // Calling the connector now is a write (editor): a viewer reads the cache.
    const reload = ctx.may("editor") ? actionButton("Reload", async () => {
      await api("POST", `/api/widgets/${encodeURIComponent(widget.id)}/refresh`);
      await loadWidgets();
      return "Reloaded.";
    }, status) : null;
    reload?.setAttribute("aria-label", `Reload ${widget.name}`);
    // The server answers its cache: the data's age, whether it is older than ttlSec
    // (the last call failed or is running elsewhere), and the last call's error.
    const notes = [];
    if (widget.stale && fetchedAt) notes.push("older than its ttlSec");
    if (widget.refreshing) notes.push("being refreshed");
    return h("article", { class: "tile widget", dataset: { key: `widget-${widget.id}`, stale: String(Boolean(widget.stale)) } },
      h("h3", {}, widget.name ?? widget.id),
      widget.data === null && !fetchedAt ? h("p", { class: "muted" }, "No data yet.") : widgetData(widget.data),
      h("p", { class: "muted age" }, "fetched ", when(fetchedAt), notes.length ? ` (${notes.join(", ")})` : ""),
      widget.error ? h("p", { class: "widget-error error", role: "status" }, `Last call failed: ${widget.error}`) : null,
      reload ? h("p", {}, reload, " ", status) : null);
  }

  function tile(key, count, label, href, tone = "") {
    return h("a", { class: `tile ${tone}`, href, dataset: { key } },
      h("span", { class: "count" }, String(count)),
      h("span", { class: "label" }, label));
  }

  return {
    title: "Overview",
    mount(main) {
      tiles = h("div", { class: "tiles", id: "tiles" });
      recent = h("div", { id: "recent-runs" });
      widgets = h("section", { class: "widgets", hidden: true, "aria-labelledby": "widgets-title" },
        h("h2", { id: "widgets-title" }, "Connector data"),
        h("div", { class: "tiles widget-list" }));
      main.append(heading("Overview"),
        h("section", { "aria-label": "Counts" }, tiles, h("p", { class: "muted note", id: "tiles-note" })),
        widgets,
        h("section", { "aria-labelledby": "recent-title" }, h("h2", { id: "recent-title" }, "Newest runs"), recent));
      this.update();
      loadWidgets();
      timer = setInterval(loadWidgets, WIDGET_POLL_MS);
    },
    update() {
      const data = ctx.data;
      if (!data.loaded) {
        replace(tiles, loading());
        return;
      }
      const runs = [...data.runs.values()];
      const count = (test) => runs.filter(test).length;
      const open = [...data.tickets.values()].filter((ticket) => !ticket.closed);
      const incidents = [...data.incidents.values()].filter((incident) => incident.status === "open");
      const more = (truncated) => (truncated ? "+" : "");
      replace(tiles,
        tile("running", count((run) => run.status === "running"), "runs running", "#/runs?status=running"),
        tile("waiting", count((run) => run.status === "queued" || run.status === "scheduled"), "runs waiting", "#/runs?status=queued"),
        tile("retrying", count((run) => (run.status === "queued" || run.status === "scheduled") && run.attempts > 0), "waiting to retry", "#/runs?status=scheduled"),
        tile("failed", count((run) => run.status === "failed"), "runs failed", "#/runs?status=failed", "bad"),
        tile("completed", count((run) => run.status === "completed"), "runs completed", "#/runs?status=completed", "good"),
        tile("open-tickets", `${open.length}${more(data.truncated.tickets)}`, "open tickets", "#/tickets"),
        tile("unassigned", `${open.filter((ticket) => !ticket.assignee).length}${more(data.truncated.tickets)}`, "open, unassigned", "#/tickets?assignee=none"),
        tile("incidents", incidents.length, "open incidents", "#/incidents", incidents.length > 0 ? "bad" : ""));
      replace(document.getElementById("tiles-note"),
        `Run counts cover the newest ${data.runsWindow} runs read `, when(data.loadedAt),
        " and every change the stream told since.");
      const newest = runs.sort(byNewest).slice(0, 10);
      replace(recent, newest.length === 0
        ? h("p", { class: "muted" }, "No runs yet.")
        : runsTable(ctx, newest));
    },
    unmount() {
      clearInterval(timer);
    },
  };
}

/** A widget's data: a number or text big, a list of rows as a table, anything else as JSON. */
function widgetData(data) {
  if (typeof data === "number" || typeof data === "string") return h("p", { class: "count" }, String(data));
  if (Array.isArray(data) && data.every((row) => row && typeof row === "object" && !Array.isArray(row))) {
    const columns = [...new Set(data.flatMap((row) => Object.keys(row)))].slice(0, 5);
    return table(columns, data.slice(0, 10).map((row) =>
      h("tr", {}, columns.map((column) => h("td", {}, typeof row[column] === "object" ? JSON.stringify(row[column]) : String(row[column] ?? ""))))));
  }
  return json(data);
}

// ---- runs ----

function runsTable(ctx, runs) {
  return table(["Run", "Status", "Automation", "Trigger", "Took", "Attempts", "Error"], runs.map((run) =>
    h("tr", { dataset: { run: run.id, status: run.status } },
      h("td", {}, runLink(run, [h("code", {}, run.id.slice(-8)), " ", when(run.createdAt)])),
      h("td", {}, badge(run.status), run.cancelRequested ? h("span", { class: "muted" }, " cancel requested") : null, " ", nextAttempt(run)),
      h("td", {}, run.automationId ? h("a", { href: `#/runs?automation=${encodeURIComponent(run.automationId)}` }, automationName(ctx, run.automationId)) : run.kind),
      h("td", {}, run.trigger),
      h("td", {}, between(run.startedAt, run.finishedAt)),
      h("td", {}, `${run.attempts} / ${run.maxRetries}`),
      h("td", { class: "message" }, run.lastError ?? ""))));
}

function runsView(ctx, query) {
  const filter = {
    status: query.get("status") ?? "",
    automation: query.get("automation") ?? "",
    trigger: query.get("trigger") ?? "",
    ticket: query.get("ticket") ?? "",
    from: query.get("from") ?? "",
    to: query.get("to") ?? "",
    q: query.get("q") ?? "",
  };
  // Filters only the server can judge (the run's record, its creation time): a live
  // change adds no run to the list, it only updates the runs the search found.
  const searched = () => Boolean(filter.ticket || filter.from || filter.to || filter.q);
  const items = new Map();
  let list;
  let cursor = null;
  let error = null;
  let fetchedAt = 0;
  let done = false;

  const matches = (run) =>
    (!filter.status || filter.status.split(",").includes(run.status))
    && (!filter.automation || run.automationId === filter.automation)
    && (!filter.trigger || run.trigger === filter.trigger)
    && (!searched() || items.has(run.id));

  function setFilter(name, value) {
    const next = { ...filter, [name]: value };
    location.hash = withQuery("#/runs", next);
  }

  async function load(more) {
    try {
      const started = Date.now();
      const page = await api("GET", withQuery("/api/runs", { ...filter, limit: RUNS_PAGE, cursor: more ? cursor : null }));
      for (const run of page.items) {
        // A stream event newer than this read wins over the list's copy.
        if (!((ctx.data.eventAt.get(run.id) ?? 0) > started)) items.set(run.id, run);
      }
      cursor = page.nextCursor;
      fetchedAt = started;
      error = null;
    } catch (failure) {
      error = failure;
      ctx.report(failure);
    }
    done = true;
    draw();
  }

  function draw() {
    if (!done) {
      replace(list, loading());
      return;
    }
    const runs = [...items.values()].filter(matches).sort(byNewest);
    replace(list,
      error ? failed(error) : null,
      runs.length === 0 ? h("p", { class: "muted" }, "No runs match.") : runsTable(ctx, runs),
      cursor ? h("p", {}, h("button", { type: "button", onclick: () => load(true) }, "Load older runs")) : null);
  }

  let filters;
  function drawFilters() {
    const automations = [...ctx.data.automations.values()].map((automation) => [automation.id, automation.name]);
    if (filter.automation && !ctx.data.automations.has(filter.automation)) automations.push([filter.automation, filter.automation]);
    replace(filters,
      select("Status", "status", filter.status, [["", "any"], ...RUN_STATUSES.map((status) => [status, status])], (value) => setFilter("status", value)),
      select("Automation", "automation", filter.automation, [["", "any"], ...automations], (value) => setFilter("automation", value)),
      select("Trigger", "trigger", filter.trigger, [["", "any"], ...TRIGGERS.map((trigger) => [trigger, trigger])], (value) => setFilter("trigger", value)),
      textFilter("Ticket", "ticket", filter.ticket, "text", "TK-12"),
      textFilter("From", "from", filter.from, "date"),
      textFilter("To", "to", filter.to, "date"),
      textFilter("Text", "q", filter.q, "search", "in errors and step messages"));
  }

  /** A filter typed rather than chosen: applied when it changes (Enter or leaving it). */
  function textFilter(label, name, value, type, placeholder = "") {
    const id = `filter-${name}`;
    return h("label", { for: id }, `${label} `,
      h("input", { id, name, type, value, placeholder, dataset: { key: id },
        onchange: (event) => setFilter(name, event.target.value.trim()) }));
  }

  const bulk = ctx.may("editor") ? bulkPanel(filter, () => load(false)) : null;

  return {
    title: "Runs",
    mount(main) {
      list = h("div", { id: "runs-list", "aria-live": "polite" });
      filters = h("form", { class: "filters", role: "search", onsubmit: (event) => event.preventDefault() });
      append(main, [heading("Runs"), filters, bulk?.element, list]);
      drawFilters();
      draw();
      load(false);
    },
    update(changes) {
      for (const change of changes ?? []) {
        if (change.kind !== "run") continue;
        if (matches(change.item)) items.set(change.item.id, change.item);
        else items.delete(change.item.id);
      }
      if (changes === undefined) {
        // The shared data was read again (sign-in, reconnect): the names and the list too.
        drawFilters();
        if (fetchedAt) load(false);
        else draw();
      } else {
        draw();
      }
    },
    unmount() {
      bulk?.unmount();
    },
  };
}

/** How often a bulk action's progress is read while it goes. */
const BULK_POLL_MS = 500;

/**
 * "Retry all matching" and "Cancel all matching" for the runs page's filter: each first
 * counts the matches (a preview) and asks to confirm with that count; confirmed, the bulk
 * action runs on the server and its progress shows here until it ends, when `reload`
 * reads the list again. Every run matching the filter is acted on, not only the page.
 */
function bulkPanel(filter, reload) {
  const element = h("section", { id: "bulk", class: "bulk", "aria-label": "Act on every matching run" });
  const status = h("p", { id: "bulk-status", class: "status", role: "status" });
  const VERBS = { retry: ["Retry", "retried", "Retrying"], cancel: ["Cancel", "cancelled", "Cancelling"] };
  let timer = null;
  const given = () => Object.fromEntries(Object.entries(filter).filter(([, value]) => value));

  function idle() {
    clearTimeout(timer);
    replace(element,
      h("button", { type: "button", id: "bulk-retry", onclick: () => preview("retry") }, "Retry all matching"), " ",
      h("button", { type: "button", id: "bulk-cancel", onclick: () => preview("cancel") }, "Cancel all matching"),
      status);
  }

  async function preview(action) {
    status.textContent = "Counting the matching runs…";
    status.className = "status";
    try {
      const answer = await api("POST", "/api/runs/bulk", { action, filter: given(), preview: true });
      const [verb] = VERBS[action];
      if (answer.exact && answer.matching === 0) {
        replace(element,
          h("p", { id: "bulk-question" }, `No run matches this search: nothing to ${action}. `,
            h("button", { type: "button", id: "bulk-back", onclick: idle }, "Close")),
          status);
        status.textContent = "";
        return;
      }
      const count = `${answer.exact ? "" : "at least "}${answer.matching} matching run${answer.matching === 1 ? "" : "s"}`;
      const note = action === "retry"
        ? "Failed and suppressed runs among them are queued again from their checkpoint; others are skipped."
        : "Runs still waiting are cancelled at once, running ones are asked to stop; finished ones are skipped.";
      replace(element,
        h("div", { id: "bulk-confirm", class: "confirm", role: "alertdialog", "aria-labelledby": "bulk-question" },
          h("p", { id: "bulk-question" }, h("strong", {}, `${verb} ${count}?`), " ", note),
          h("button", { type: "button", id: "bulk-go", class: "danger", onclick: () => start(action) }, `${verb} ${count}`), " ",
          h("button", { type: "button", id: "bulk-back", onclick: idle }, "Not now")),
        status);
      status.textContent = "";
    } catch (failure) {
      status.textContent = described(failure);
      status.className = "status error";
    }
  }

  async function start(action) {
    try {
      const answer = await api("POST", "/api/runs/bulk", { action, filter: given() });
      follow(answer.id);
    } catch (failure) {
      idle();
      status.textContent = described(failure);
      status.className = "status error";
    }
  }

  async function follow(id) {
    let job;
    try {
      job = await api("GET", `/api/runs/bulk/${encodeURIComponent(id)}`);
    } catch (failure) {
      status.textContent = described(failure);
      status.className = "status error";
      timer = setTimeout(() => follow(id), BULK_POLL_MS * 4);
      return;
    }
    const [, done, going] = VERBS[job.action];
    const counts = `${job.acted} ${done}, ${job.skipped} skipped${job.errors ? `, ${job.errors} refused` : ""}`;
    const finished = !["queued", "scheduled", "running"].includes(job.status);
    const runs = `matching run${job.total === 1 ? "" : "s"}`;
    const said = finished
      ? `${job.status === "completed" ? "Done" : `The bulk action ${job.status}`}: ${job.matched} of ${job.total} ${runs} met — ${counts}.`
      : job.phase === "counting"
        ? `${going}: counting the matching runs…`
        : `${going}: ${job.matched} of ${job.total} ${runs} — ${counts}.`;
    replace(element,
      h("div", { id: "bulk-progress", dataset: { status: job.status, phase: job.phase } },
        h("progress", { max: 100, value: job.percent, "aria-label": "bulk action progress" }), " ",
        h("span", { id: "bulk-said" }, said),
        job.skips.length ? h("ul", { class: "muted" }, job.skips.map((skip) => h("li", {}, `${skip.count} × ${skip.reason}`))) : null,
        job.lastError ? h("p", { class: "status error" }, job.lastError) : null,
        finished
          ? h("button", { type: "button", id: "bulk-close", onclick: idle }, "Close")
          : h("button", { type: "button", id: "bulk-stop", onclick: () => stop(id) }, "Stop")),
      status);
    if (finished) {
      reload();
    } else {
      timer = setTimeout(() => follow(id), BULK_POLL_MS);
    }
  }

  async function stop(id) {
    try {
      await api("POST", `/api/runs/bulk/${encodeURIComponent(id)}/cancel`);
    } catch (failure) {
      status.textContent = described(failure);
      status.className = "status error";
    }
  }

  idle();
  return { element, unmount: () => clearTimeout(timer) };
}

/** A condition's message: one line per rule, the compared values apart. */
function stepMessage(step) {
  if (!step.message) return null;
  const lines = step.message.split("\n");
  if (step.op !== "condition") return h("div", { class: "message" }, lines.map((line) => h("div", {}, line)));
  return h("ul", { class: "conditions" }, lines.map((line) => {
    const bar = line.indexOf(" | ");
    if (bar < 0) return h("li", {}, line);
    return h("li", {}, h("span", { class: "rule" }, line.slice(0, bar)), " ",
      h("span", { class: "compared" }, line.slice(bar + 3)));
  }));
}

/** One entry of a run's timeline: a step as the step log shows it, or what happened to the run. */
export function timelineEntry(entry, steps) {
  if (entry.kind !== "step") {
    const tone = entry.kind === "ended" ? String(entry.status) : "lifecycle";
    return h("li", { class: `step step-event step-${tone.replace(/\s+/g, "-")}` },
      h("div", { class: "step-head" },
        badge(entry.kind, entry.kind === "ended" ? String(entry.status) : "event"),
        h("span", { class: "muted" }, " ", when(entry.at))),
      h("div", { class: "message" }, entry.message));
  }
  const step = steps.find((line) => line.startedAt === entry.at && line.name === entry.name && line.status === entry.status) ?? entry;
  return h("li", { class: `step step-${String(step.status).replace(/\s+/g, "-")}` },
    h("div", { class: "step-head" },
      h("strong", {}, step.name), " ", h("code", {}, step.op), " ", badge(step.status, String(step.status).replace(/\s+/g, "-")),
      h("span", { class: "muted" }, " ", when(step.startedAt ?? entry.at), ", took ", between(step.startedAt ?? entry.at, step.finishedAt ?? entry.at))),
    stepMessage(step),
    step.outputs ? h("details", {}, h("summary", {}, "Outputs"), json(step.outputs)) : null);
}

function runView(ctx, id) {
  let body;
  let run = null;
  let error = null;
  let refetch = null;
  const status = h("span", { class: "status", role: "status" });

  async function load() {
    try {
      run = await api("GET", `/api/runs/${encodeURIComponent(id)}`);
      error = null;
    } catch (failure) {
      error = failure;
    }
    draw();
  }

  function draw() {
    if (!run && !error) {
      replace(body, loading());
      return;
    }
    if (!run) {
      replace(body, failed(error));
      return;
    }
    const steps = run.steps ?? [];
    // One timeline: what happened to the run (enqueued, started, waiting, ended) with
    // the steps it ran; a server without `timeline` gives the steps alone.
    const timeline = run.timeline ?? steps.map((step) => ({ ...step, kind: "step", at: step.startedAt }));
    const live = ["scheduled", "queued", "running"].includes(run.status);
    const buttons = [];
    // Cancel, retry and start again are writes (editor): a viewer sees none of them.
    const mayAct = ctx.may("editor");
    if (mayAct && live && !run.cancelRequested) {
      buttons.push(actionButton("Cancel run", async () => {
        const answer = await api("POST", `/api/runs/${encodeURIComponent(id)}/cancel`);
        await load();
        return answer.cancel === "requested"
          ? "Cancel requested: the worker stops the run at its next heartbeat."
          : "Cancelled.";
      }, status));
    }
    if (mayAct && run.status === "failed") {
      buttons.push(actionButton("Retry run", async () => {
        const answer = await api("POST", `/api/runs/${encodeURIComponent(id)}/retry`);
        await load();
        return `Queued again (${answer.status}); it resumes from its checkpoint.`;
      }, status));
    }
    const finished = ["completed", "failed", "cancelled", "suppressed"].includes(run.status);
    if (mayAct && finished && run.kind === "automation") {
      buttons.push(actionButton("Run again from the start", () => startAgain({ fromStart: true }), status, { attributes: { id: "run-again" } }));
    }
    if (mayAct && run.status === "suppressed") {
      buttons.push(actionButton("Start it anyway", async () => {
        const answer = await api("POST", `/api/runs/${encodeURIComponent(id)}/retry`);
        await load();
        return `Queued (${answer.status}); the loop guard does not stop a run started by hand.`;
      }, status));
    }
    replace(body,
      error ? failed(error) : null,
      h("dl", { class: "facts" },
        h("dt", {}, "Status"), h("dd", { id: "run-status" }, badge(run.status), run.cancelRequested ? " (cancel requested)" : ""),
        h("dt", {}, "Automation"), h("dd", {}, run.automationId ? h("a", { href: `#/runs?automation=${encodeURIComponent(run.automationId)}` }, automationName(ctx, run.automationId)) : run.kind),
        h("dt", {}, "Trigger"), h("dd", {}, run.trigger),
        h("dt", {}, "Retries"), h("dd", {}, `${run.attempts} of ${run.maxRetries}`, run.reclaims ? `, ${run.reclaims} reclaims` : "", run.parks ? `, ${run.parks} parks` : ""),
        nextAttempt(run) ? [h("dt", {}, "Next attempt"), h("dd", { id: "next-attempt" }, when(run.runAt), ` (${new Date(run.runAt).toLocaleString()})`)] : null,
        h("dt", {}, "Created"), h("dd", {}, when(run.createdAt)),
        h("dt", {}, "Started"), h("dd", {}, when(run.startedAt)),
        h("dt", {}, "Finished"), h("dd", {}, when(run.finishedAt), run.finishedAt ? ` (took ${between(run.startedAt, run.finishedAt)})` : ""),
        run.lastError ? [h("dt", {}, "Last error"), h("dd", { class: "error" }, run.lastError)] : null),
      buttons.length ? h("p", { class: "actions" }, buttons, " ", status) : h("p", {}, status),
      h("h2", {}, "Timeline"),
      steps.length === 0 && live ? h("p", { class: "muted" }, "No step has run yet.") : null,
      h("ol", { class: "steps", id: "step-log" }, timeline.map((entry) => {
        const item = timelineEntry(entry, steps);
        // A finished automation run starts again from any of its steps (a new run on its
        // version; the steps before it reused).
        if (mayAct && finished && run.kind === "automation" && entry.kind === "step" && !["run", "poll"].includes(entry.name)) {
          item.append(h("p", { class: "actions" }, actionButton("Retry from here", () => startAgain({ fromStep: entry.name }), status,
            { attributes: { "data-from-step": entry.name, "aria-label": `Retry from step ${entry.name}` } })));
        }
        return item;
      })));
  }

  /** A new run of this one's version from `from` (a step or its start); opens it. */
  async function startAgain(from) {
    const answer = await api("POST", `/api/runs/${encodeURIComponent(id)}/retry`, from);
    location.hash = `#/runs/${encodeURIComponent(answer.runId)}`;
    return from.fromStep ? `Started again from step ${from.fromStep} as a new run.` : "Started again from the start as a new run.";
  }

  return {
    title: "Run",
    mount(main) {
      body = h("div", { id: "run" });
      main.append(h("p", {}, h("a", { href: "#/runs" }, "← Runs")), heading(`Run ${id}`), body);
      draw();
      load();
    },
    update(changes) {
      const mine = changes === undefined || changes.some((change) => change.kind === "run" && change.item.id === id);
      if (!mine) return;
      clearTimeout(refetch);
      refetch = setTimeout(load, REFETCH_DELAY_MS);
    },
    unmount() {
      clearTimeout(refetch);
    },
  };
}

// ---- tickets ----

/** The board's columns: the types' statuses in order, then any other, then none. */
function statusColumns(ctx, tickets) {
  const order = [];
  for (const type of ctx.data.ticketTypes) {
    for (const status of type.statuses) if (!order.includes(status)) order.push(status);
  }
  for (const ticket of tickets) {
    if (ticket.status && !order.includes(ticket.status)) order.push(ticket.status);
  }
  const columns = order.map((status) => [status, tickets.filter((ticket) => ticket.status === status)]);
  const none = tickets.filter((ticket) => !ticket.status);
  if (none.length) columns.push([null, none]);
  return columns.filter(([, items]) => items.length > 0);
}

function ticketCard(ticket) {
  return h("li", {},
    h("a", { class: "card", href: `#/tickets/${encodeURIComponent(ticket.id)}`, dataset: { key: `ticket-${ticket.id}`, ticket: ticket.number } },
      h("span", { class: "number" }, ticket.number), " ", h("span", { class: "title" }, ticket.title),
      h("span", { class: "meta" },
        ticket.type ? h("span", {}, ticket.type) : null,
        h("span", { class: ticket.assignee ? "assignee" : "assignee muted", title: "assignee" }, ticket.assignee ? `→ ${ticket.assignee.name}` : "unassigned"),
        ticket.closed ? badge("closed") : null),
      ticket.tags.length ? h("span", { class: "tags" }, ticket.tags.map((tag) => h("span", { class: "tag" }, tag))) : null));
}

function ticketsView(ctx, query) {
  const filter = {
    type: query.get("type") ?? "",
    assignee: query.get("assignee") ?? "",
    tag: query.get("tag") ?? "",
    closed: query.get("closed") ?? "",
  };
  let board;
  let closedError = null;

  function setFilter(name, value) {
    location.hash = withQuery("#/tickets", { ...filter, [name]: value });
  }

  async function loadClosed() {
    if (ctx.data.closedLoaded) return;
    try {
      const { items, truncated } = await listAll("/api/tickets?closed=true", { max: CLOSED_TICKETS_MAX });
      for (const ticket of items) if (!ctx.data.tickets.has(ticket.id)) ctx.data.tickets.set(ticket.id, ticket);
      ctx.data.closedLoaded = true;
      ctx.data.truncated.closed = truncated;
    } catch (failure) {
      closedError = failure;
      ctx.report(failure);
    }
    draw();
  }

  function draw() {
    if (!ctx.data.loaded) {
      replace(board, loading());
      return;
    }
    const tickets = [...ctx.data.tickets.values()].filter((ticket) =>
      (filter.closed === "yes" || !ticket.closed)
      && (!filter.type || ticket.type === filter.type)
      && (!filter.assignee || (filter.assignee === "none" ? !ticket.assignee : ticket.assignee?.id === filter.assignee))
      && (!filter.tag || ticket.tags.includes(filter.tag)));
    tickets.sort((a, b) => b.updatedAt.localeCompare(a.updatedAt));
    const columns = statusColumns(ctx, tickets);
    replace(board,
      closedError ? failed(closedError) : null,
      ctx.data.truncated.tickets ? h("p", { class: "muted" }, "Only the first open tickets were read; the board is not complete.") : null,
      columns.length === 0
        ? h("p", { class: "muted" }, "No tickets match.")
        : h("div", { class: "board" }, columns.map(([status, items]) =>
          h("section", { class: "column", "aria-label": `${status ?? "no status"}: ${items.length}`, dataset: { status: status ?? "" } },
            h("h2", {}, status ?? "no status", " ", h("span", { class: "muted" }, `(${items.length})`)),
            h("ul", { class: "cards" }, items.map(ticketCard))))));
  }

  let filters;
  function drawFilters() {
    const members = ctx.data.groups.flatMap((group) => group.members.map((member) => [member.id, `${member.name} (${group.name})`]));
    const tags = [...new Set([...ctx.data.tickets.values()].flatMap((ticket) => ticket.tags))].sort();
    if (filter.tag && !tags.includes(filter.tag)) tags.push(filter.tag);
    replace(filters,
      select("Type", "type", filter.type, [["", "any"], ...ctx.data.ticketTypes.map((type) => [type.name, type.name])], (value) => setFilter("type", value)),
      select("Assignee", "assignee", filter.assignee, [["", "anyone"], ["none", "unassigned"], ...members], (value) => setFilter("assignee", value)),
      select("Tag", "tag", filter.tag, [["", "any"], ...tags.map((tag) => [tag, tag])], (value) => setFilter("tag", value)),
      select("Closed", "closed", filter.closed, [["", "hide"], ["yes", "show"]], (value) => setFilter("closed", value)));
  }

  return {
    title: "Tickets",
    mount(main) {
      board = h("div", { id: "board" });
      filters = h("form", { class: "filters", role: "search", onsubmit: (event) => event.preventDefault() });
      main.append(heading("Tickets"), filters, board);
      drawFilters();
      draw();
      if (filter.closed === "yes") loadClosed();
    },
    update(changes) {
      if (changes === undefined) drawFilters();
      draw();
    },
  };
}

function ticketView(ctx, id) {
  let body;
  let ticket = null;
  let error = null;
  let refetch = null;

  async function load() {
    try {
      ticket = await api("GET", `/api/tickets/${encodeURIComponent(id)}`);
      error = null;
    } catch (failure) {
      error = failure;
    }
    draw();
  }

  function draw() {
    if (!ticket) {
      replace(body, error ? failed(error) : loading());
      return;
    }
    document.title = `${ticket.number} · fronta`;
    const fields = Object.entries(ticket.fields ?? {});
    replace(body,
      error ? failed(error) : null,
      h("h1", { tabindex: "-1", id: "ticket-title" }, `${ticket.number} ${ticket.title}`),
      h("dl", { class: "facts" },
        h("dt", {}, "Status"), h("dd", {}, ticket.status ?? "—", ticket.closed ? [" ", badge("closed")] : ""),
        h("dt", {}, "Type"), h("dd", {}, ticket.type ?? "—"),
        h("dt", {}, "Assignee"), h("dd", {}, ticket.assignee?.name ?? "unassigned"),
        h("dt", {}, "Group"), h("dd", {}, ticket.group ?? "—"),
        h("dt", {}, "Tags"), h("dd", {}, ticket.tags.length ? ticket.tags.map((tag) => h("span", { class: "tag" }, tag)) : "—"),
        h("dt", {}, "External id"), h("dd", {}, ticket.externalId ?? "—"),
        h("dt", {}, "Created"), h("dd", {}, when(ticket.createdAt)),
        h("dt", {}, "Updated"), h("dd", {}, when(ticket.updatedAt))),
      fields.length ? [h("h2", {}, "Fields"), table(["Field", "Value"], fields.map(([name, value]) =>
        h("tr", {}, h("th", { scope: "row" }, name), h("td", {}, typeof value === "object" ? JSON.stringify(value) : String(value)))))] : null,
      h("h2", {}, "Log"),
      (ticket.log ?? []).length === 0 ? h("p", { class: "muted" }, "No log lines.")
        : table(["When", "Kind", "Message", "Run"], ticket.log.map((entry) =>
          h("tr", {},
            h("td", {}, when(entry.at)),
            h("td", {}, entry.kind),
            h("td", { class: "message" }, entry.message),
            h("td", {}, entry.runId ? runLink({ id: entry.runId }, "run") : "")))));
  }

  return {
    title: "Ticket",
    mount(main) {
      body = h("div", { id: "ticket" });
      main.append(h("p", {}, h("a", { href: "#/tickets" }, "← Tickets")), body);
      draw();
      load();
    },
    update(changes) {
      const mine = changes === undefined || changes.some((change) => change.kind === "ticket" && change.item.id === id);
      if (!mine) return;
      clearTimeout(refetch);
      refetch = setTimeout(load, REFETCH_DELAY_MS);
    },
    unmount() {
      clearTimeout(refetch);
    },
  };
}

// ---- incidents ----

function incidentsView(ctx) {
  let list;
  return {
    title: "Incidents",
    mount(main) {
      list = h("div", { id: "incidents" });
      main.append(heading("Incidents"), list);
      this.update();
    },
    update() {
      if (!ctx.data.loaded) {
        replace(list, loading());
        return;
      }
      const incidents = [...ctx.data.incidents.values()].sort(byNewest);
      replace(list, incidents.length === 0 ? h("p", { class: "muted" }, "No incidents.") :
        table(["Title", "Impact", "Count", "Status", "Opened", "Updated", ""], incidents.map((incident) => {
          const status = h("span", { class: "status", role: "status" });
          return h("tr", { dataset: { incident: incident.id } },
            h("td", {}, incident.title, incident.ticket ? [" ", h("a", { href: `#/tickets/${encodeURIComponent(incident.ticket)}` }, "ticket")] : null),
            h("td", {}, incident.impact),
            h("td", {}, String(incident.count)),
            h("td", {}, badge(incident.status)),
            h("td", {}, when(incident.createdAt)),
            h("td", {}, when(incident.updatedAt)),
            h("td", {}, incident.status === "open" && ctx.may("editor") ? [actionButton("Resolve", async () => {
              const answer = await api("POST", `/api/incidents/${encodeURIComponent(incident.id)}/resolve`);
              ctx.data.incidents.set(answer.id, answer);
              ctx.changed("incident", answer);
              return "Resolved.";
            }, status), " ", status] : null));
        })));
    },
  };
}

function adminIncidentsView(ctx) {
  let list;
  async function load() {
    replace(list, loading());
    try {
      const [incidents, tenants] = await Promise.all([
        listAll("/api/admin/incidents", { max: 1000 }),
        listAll("/api/admin/tenants", { max: 10000 }),
      ]);
      const names = new Map(tenants.items.map((tenant) => [tenant.id, tenant.name]));
      replace(list,
        h("p", {}, h("button", { type: "button", onclick: load }, "Reload"), " ", h("span", { class: "muted" }, "The admin view does not stream: the stream is per tenant.")),
        incidents.truncated ? h("p", { class: "muted" }, "Only the newest 1,000 incidents are shown.") : null,
        incidents.items.length === 0 ? h("p", { class: "muted" }, "No incidents.") :
          incidents.items.map((incident) => h("article", { class: "incident", dataset: { incident: incident.id } },
            h("h2", {}, incident.title, " ", badge(incident.status)),
            h("dl", { class: "facts" },
              h("dt", {}, "Tenant"), h("dd", {}, names.get(incident.tenant) ?? incident.tenant),
              h("dt", {}, "Impact"), h("dd", {}, incident.impact),
              h("dt", {}, "Count"), h("dd", {}, String(incident.count)),
              h("dt", {}, "Cause"), h("dd", {}, h("code", {}, incident.cause ?? "—")),
              h("dt", {}, "Opened"), h("dd", {}, when(incident.createdAt)),
              h("dt", {}, "Updated"), h("dd", {}, when(incident.updatedAt))),
            h("details", {}, h("summary", {}, "Detail"), json(incident.detail)))));
    } catch (failure) {
      ctx.report(failure);
      replace(list, failed(failure), h("button", { type: "button", onclick: load }, "Try again"));
    }
  }
  return {
    title: "Incidents (admin)",
    mount(main) {
      list = h("div", { id: "incidents" });
      main.append(heading("Incidents of every tenant"), list);
      load();
    },
  };
}

function tenantsView(ctx) {
  let list;
  async function load() {
    replace(list, loading());
    try {
      const { items } = await listAll("/api/admin/tenants", { max: 10000 });
      replace(list, items.length === 0 ? h("p", { class: "muted" }, "No tenants yet (POST /api/admin/tenants).") :
        table(["Name", "Id", "Created"], items.map((tenant) =>
          h("tr", {}, h("td", {}, tenant.name), h("td", {}, h("code", {}, tenant.id)), h("td", {}, when(tenant.createdAt))))));
    } catch (failure) {
      ctx.report(failure);
      replace(list, failed(failure), h("button", { type: "button", onclick: load }, "Try again"));
    }
  }
  return {
    title: "Tenants",
    mount(main) {
      list = h("div", { id: "tenants" });
      main.append(heading("Tenants"),
        h("p", { class: "muted" }, "Signed in with the admin token: tenants and every tenant's incidents with their detail. Sign in with a tenant's token to see its runs and tickets."),
        list);
      load();
    },
  };
}

// ---- automations ----

function triggerText(trigger) {
  switch (trigger?.type) {
    case "webhook": return "Webhook";
    case "event": return `On ${trigger.event}`;
    case "poll": return `Polls ${trigger.source}${trigger.intervalSec ? ` every ${trigger.intervalSec} s` : ""}`;
    case "schedule": return `Schedule ${trigger.cron}${trigger.timezone ? ` (${trigger.timezone})` : ""}`;
    case "manual": return "Started by hand";
    default: return trigger?.type ?? "—";
  }
}

/** Copy `text`; `input` (which shows it) is selected when the clipboard is refused. */
async function copyText(text, input) {
  try {
    await navigator.clipboard.writeText(text);
    return "Copied the URL.";
  } catch (error) {
    input.focus();
    input.select();
    if (document.execCommand && document.execCommand("copy")) return "Copied the URL.";
    throw new Error(`The browser refused the clipboard (${error.message}); the URL is selected: press Ctrl+C.`);
  }
}

/** How long the old URL keeps working after "Rotate URL" (`graceSec`). */
const ROTATE_GRACES = [["0", "stops at once"], ["3600", "works 1 more hour"], ["86400", "works 1 more day"], ["604800", "works 7 more days"]];

function webhookBlock(automation, onRotated) {
  const id = `url-${automation.id}`;
  const input = h("input", { id, class: "url", type: "text", readonly: true, value: automation.webhookUrl, size: 60, "aria-label": `Webhook URL of ${automation.name}` });
  const status = h("span", { class: "status", role: "status" });
  const copy = actionButton("Copy URL", () => copyText(automation.webhookUrl, input), status);
  copy.setAttribute("data-copy", automation.id);
  // A leaked URL is replaced (editors: `onRotated` given): the old one keeps working for the
  // grace chosen, then answers 404.
  const grace = onRotated && h("select", { "aria-label": `After rotating, the old URL of ${automation.name}` },
    ROTATE_GRACES.map(([value, text]) => h("option", { value }, `old URL ${text}`)));
  const rotate = onRotated && actionButton("Rotate URL", async () => {
    const said = grace.selectedOptions[0]?.textContent ?? "";
    if (!window.confirm(`Give “${automation.name}” a new webhook URL? The ${said}.`)) return "Not rotated.";
    const answer = await api("POST", `/api/automations/${encodeURIComponent(automation.id)}/rotate-webhook`, { graceSec: Number(grace.value) });
    onRotated(answer);
    return "Rotated: send to the new URL.";
  }, status);
  rotate?.setAttribute("data-rotate", automation.id);
  const previous = (automation.previousWebhooks ?? []).map((old) =>
    h("li", {}, h("code", {}, old.url), ` works until ${new Date(old.expiresAt).toLocaleString()}`));
  const help = h("div", { class: "help" }, loading());
  // Same-origin path of the URL: the help is served by this server whatever host the URL names.
  let path = null;
  try {
    path = new URL(automation.webhookUrl).pathname;
  } catch {
    path = null;
  }
  if (path) {
    api("GET", path).then((answer) => replace(help, webhookHelp(answer)), (failure) => replace(help, failed(failure)));
  } else {
    replace(help, h("p", { class: "error" }, "The webhook URL cannot be read."));
  }
  return h("div", { class: "webhook" },
    h("p", {}, h("strong", {}, "Method: "), h("code", { class: "method" }, "POST")),
    h("p", { class: "copy" }, h("label", { for: id }, h("strong", {}, "URL:")), input, copy, status),
    rotate ? h("p", { class: "rotate" }, grace, " ", rotate) : null,
    previous.length ? h("div", {}, h("p", { class: "muted" }, "Old URLs still answering:"), h("ul", {}, previous)) : null,
    help);
}

function webhookHelp(help) {
  return [
    h("p", { class: "muted" }, `What GET on this URL answers: send ${help.method} with a JSON body`,
      help.enabled === false ? " — the automation is paused, calls answer 409" : "", "."),
    (help.parameters ?? []).length === 0 ? h("p", { class: "muted" }, "Any JSON body; no parameter is read.") :
      table(["Parameter", "Path", "Type", "Required"], help.parameters.map((parameter) =>
        h("tr", {}, h("td", {}, h("code", {}, parameter.name)), h("td", {}, h("code", {}, parameter.path)),
          h("td", {}, parameter.type), h("td", {}, parameter.required ? "yes" : "no")))),
    help.signature ? h("details", {}, h("summary", {}, "Signature"), json(help.signature)) : null,
    h("details", {}, h("summary", {}, "Example body"), json(help.exampleBody ?? {})),
  ];
}

function automationsView(ctx) {
  let list;
  function card(automation, said = "") {
    const status = h("span", { class: "status", role: "status" }, said);
    const mayEdit = ctx.may("editor");
    const toggle = mayEdit && actionButton(automation.enabled ? "Pause" : "Resume", async () => {
      const answer = await api("POST", `/api/automations/${encodeURIComponent(automation.id)}/${automation.enabled ? "pause" : "resume"}`);
      ctx.data.automations.set(answer.id, answer);
      // Only this card changes; the button keeps the keyboard focus.
      const next = card(answer, answer.enabled ? "Resumed." : "Paused.");
      article.replaceWith(next);
      next.querySelector("button[data-toggle]")?.focus();
      return answer.enabled ? "Resumed." : "Paused.";
    }, status);
    if (toggle) {
      toggle.setAttribute("aria-label", `${automation.enabled ? "Pause" : "Resume"} ${automation.name}`);
      toggle.setAttribute("data-toggle", automation.id);
    }
    const article = h("article", { class: "automation", dataset: { automation: automation.id } },
      h("h2", {}, automation.name, " ", badge(automation.enabled ? "enabled" : "paused")),
      h("p", {}, h("strong", {}, "Trigger: "), triggerText(automation.trigger), ` · ${automation.steps?.length ?? 0} ${automation.steps?.length === 1 ? "step" : "steps"}`,
        automation.signed ? " · signed webhooks" : "", " · ",
        h("a", { href: `#/runs?automation=${encodeURIComponent(automation.id)}` }, "its runs"), " · ",
        mayEdit
          ? h("a", { href: `#/automations/${encodeURIComponent(automation.id)}`, dataset: { edit: automation.name } }, "edit")
          : h("a", { href: `#/automations/${encodeURIComponent(automation.id)}`, dataset: { view: automation.name } }, "definition and versions")),
      automation.webhookUrl ? webhookBlock(automation, mayEdit ? (answer) => {
        ctx.data.automations.set(answer.id, answer);
        article.replaceWith(card(answer, "Rotated: send to the new URL."));
      } : null) : null,
      toggle ? h("p", { class: "actions" }, toggle, " ", status) : null);
    return article;
  }
  function draw() {
    if (!ctx.data.loaded) {
      replace(list, loading());
      return;
    }
    const automations = [...ctx.data.automations.values()];
    const none = ctx.may("editor")
      ? "No automations yet: write one with “New automation”, or send a setup to POST /api/apply."
      : "No automations yet.";
    replace(list, automations.length === 0 ? h("p", { class: "muted" }, none) : automations.map((automation) => card(automation)));
  }
  return {
    title: "Automations",
    mount(main) {
      list = h("div", { id: "automations" });
      append(main, [heading("Automations"),
        ctx.may("editor") ? h("p", {}, h("a", { href: "#/automations/new", id: "new-automation" }, "New automation")) : null,
        list]);
      draw();
    },
    update(changes) {
      // Stream events do not change automations; redraw only after a reload.
      if (changes === undefined) draw();
    },
  };
}

// ---- groups ----

/** What a refused write says, for a person: the API's own sentence (an `in_use` answer names what uses it). */
function refusal(error) {
  if (error?.code === "forbidden") return described(error);
  if (error && error.code && error.message) return `Not done: ${error.message}`;
  return described(error);
}

/** A labelled input. */
function field(label, attributes) {
  return h("label", { class: "field" }, h("span", {}, label), " ", h("input", attributes));
}

/**
 * A small form: `fields` (labelled inputs), a submit button, a status line; `submit` gets
 * the form's values by input name and answers what to say. A refusal keeps what was typed.
 */
export function smallForm(id, fields, buttonText, submit) {
  const status = h("span", { class: "status", role: "status" });
  const button = h("button", { type: "submit" }, buttonText);
  const form = h("form", { class: "small-form", id }, fields, " ", button, " ", status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(form).entries());
    if (await busy(button, status, buttonText, () => submit(values), refusal)) form.reset();
  });
  return form;
}

/** A button of a setup page: its refusal reads as a sentence (see `refusal`). */
export function writeButton(label, action, status, attributes = {}) {
  return actionButton(label, action, status, { attributes, describe: refusal });
}

/** After a write of a setup page: read the data again, then say `message` on `said`. */
function reloader(ctx, said) {
  return async (message) => {
    await ctx.reload();
    said.textContent = message;
    return message;
  };
}

function groupsView(ctx) {
  let list;
  // Every control of this page writes (editor): a viewer reads the groups and their load.
  const mayEdit = ctx.may("editor");
  const said = h("p", { class: "status", role: "status", id: "groups-status" });
  const reloaded = reloader(ctx, said);
  function memberRow(group, member, open) {
    const status = h("span", { class: "status", role: "status" });
    const count = open.get(member.id) ?? 0;
    const capacity = h("input", { type: "number", min: 1, value: member.capacity, name: "capacity", "aria-label": `Capacity of ${member.name}`, class: "narrow" });
    const base = `/api/groups/${encodeURIComponent(group.id)}/members/${encodeURIComponent(member.id)}`;
    return h("tr", { dataset: { member: member.id } },
      h("td", {}, h("a", { href: `#/tickets?assignee=${encodeURIComponent(member.id)}`, dataset: { key: `member-${member.id}` } }, member.name)),
      h("td", {}, member.email ?? "—"),
      h("td", { class: "availability" }, member.available === false ? "Away" : "Available"),
      h("td", { class: "load" }, `${count} / ${member.capacity}`),
      h("td", {}, h("meter", { min: 0, max: Math.max(member.capacity, 1), value: count, high: Math.max(member.capacity, 1) * 0.8, optimum: 0, "aria-label": `${member.name}: ${count} of ${member.capacity}` })),
      mayEdit && h("td", { class: "edit" }, capacity, " ",
        writeButton("Save capacity", async () => {
          await api("PATCH", base, { capacity: Number(capacity.value) });
          return reloaded(`${member.name} now takes up to ${capacity.value} open tickets.`);
        }, status, { "data-save-capacity": member.name }), " ",
        member.available === false
          ? writeButton("Mark available", async () => {
            await api("PATCH", base, { available: true });
            return reloaded(`${member.name} takes new tickets again; runs waiting for room in ${group.name} look again now.`);
          }, status, { "data-set-available": member.name })
          : writeButton("Mark away", async () => {
            await api("PATCH", base, { available: false });
            return reloaded(`${member.name} is away: no new tickets, and keeps their open ones.`);
          }, status, { "data-set-away": member.name }), " ",
        writeButton("Remove", async () => {
          await api("DELETE", base);
          return reloaded(`${member.name} was removed from ${group.name}.`);
        }, status, { "data-remove-member": member.name }), " ", status));
  }
  function groupSection(group, open) {
    const status = h("span", { class: "status", role: "status" });
    const name = h("input", { name: "name", value: group.name, "aria-label": `New name of ${group.name}` });
    const base = `/api/groups/${encodeURIComponent(group.id)}`;
    return h("section", { class: "group", dataset: { group: group.name } },
      h("h2", {}, group.name, " ", h("span", { class: "muted" }, `(${group.members.length} ${group.members.length === 1 ? "member" : "members"})`)),
      group.members.length === 0 ? h("p", { class: "muted" }, "No members.") :
        table(["Member", "Email", "Takes new work", "Open tickets / capacity", "", ...(mayEdit ? ["Change"] : [])], group.members.map((member) => memberRow(group, member, open))),
      mayEdit && smallForm(`add-member-${group.name}`, [
        field("Name", { name: "name", required: true }),
        field("Email", { name: "email", type: "email" }),
        field("Capacity", { name: "capacity", type: "number", min: 1, value: 5, class: "narrow" }),
      ], "Add member", async (values) => {
        const body = { name: values.name, capacity: Number(values.capacity) };
        if (values.email) body.email = values.email;
        await api("POST", `${base}/members`, body);
        return reloaded(`${values.name} joined ${group.name}.`);
      }),
      mayEdit && h("p", { class: "actions" }, name, " ",
        writeButton("Rename", async () => {
          await api("PATCH", base, { name: name.value });
          return reloaded(`${group.name} is now ${name.value}.`);
        }, status, { "data-rename": group.name }), " ",
        writeButton("Delete group", async () => {
          await api("DELETE", base);
          return reloaded(`${group.name} was deleted.`);
        }, status, { "data-delete-group": group.name }), " ", status));
  }
  return {
    title: "Groups",
    mount(main) {
      list = h("div", { id: "groups" });
      const create = mayEdit && smallForm("new-group", [field("Name", { name: "name", required: true })], "Create group", async (values) => {
        await api("POST", "/api/groups", { name: values.name });
        await ctx.reload();
        return `Group ${values.name} created.`;
      });
      append(main, [heading("Groups"), create, said, list]);
      this.update();
    },
    update() {
      if (!ctx.data.loaded) {
        replace(list, loading());
        return;
      }
      const open = new Map();
      for (const ticket of ctx.data.tickets.values()) {
        if (ticket.closed || !ticket.assignee) continue;
        open.set(ticket.assignee.id, (open.get(ticket.assignee.id) ?? 0) + 1);
      }
      replace(list,
        ctx.data.truncated.tickets ? h("p", { class: "muted" }, "Counted over the first open tickets only; the counts may be low.") : null,
        ctx.data.groups.length === 0 ? h("p", { class: "muted" }, "No groups yet.") :
          ctx.data.groups.map((group) => groupSection(group, open)));
    },
  };
}

// ---- ticket types ----

/** `"amount:number, note"` → `[{name: "amount", type: "number"}, {name: "note", type: "string"}]` (types: string, number, boolean, date). */
export function parseFields(text) {
  return text.split(",").map((part) => part.trim()).filter(Boolean).map((part) => {
    const [name, type] = part.split(":").map((piece) => piece.trim());
    return { name, type: type || "string" };
  });
}

function listText(items) {
  return items.join(", ");
}

function ticketTypesView(ctx) {
  let list;
  // Every control of this page writes (editor): a viewer reads the types as text.
  const mayEdit = ctx.may("editor");
  const said = h("p", { class: "status", role: "status", id: "types-status" });
  const reloaded = reloader(ctx, said);
  function typeSection(type) {
    const status = h("span", { class: "status", role: "status" });
    const statuses = h("input", { name: "statuses", value: listText(type.statuses ?? []), "aria-label": `Statuses of ${type.name}`, class: "wide" });
    const fields = h("input", { name: "fields", value: (type.fields ?? []).map((f) => `${f.name}:${f.type}`).join(", "), "aria-label": `Fields of ${type.name}`, class: "wide" });
    const base = `/api/ticket-types/${encodeURIComponent(type.id)}`;
    if (!mayEdit) {
      return h("section", { class: "ticket-type", dataset: { type: type.name } },
        h("h2", {}, type.name),
        h("dl", { class: "facts" },
          h("dt", {}, "Statuses"), h("dd", {}, listText(type.statuses ?? []) || "—"),
          h("dt", {}, "Fields"), h("dd", {}, (type.fields ?? []).map((f) => `${f.name} (${f.type})`).join(", ") || "—")));
    }
    return h("section", { class: "ticket-type", dataset: { type: type.name } },
      h("h2", {}, type.name),
      h("p", { class: "edit" },
        h("label", { class: "field" }, h("span", {}, "Statuses"), " ", statuses), " ",
        h("label", { class: "field" }, h("span", {}, "Fields"), " ", fields)),
      h("p", { class: "actions" },
        writeButton("Save", async () => {
          await api("PATCH", base, {
            statuses: statuses.value.split(",").map((item) => item.trim()).filter(Boolean),
            fields: parseFields(fields.value),
          });
          return reloaded(`${type.name} saved.`);
        }, status, { "data-save-type": type.name }), " ",
        writeButton("Delete type", async () => {
          await api("DELETE", base);
          return reloaded(`${type.name} was deleted.`);
        }, status, { "data-delete-type": type.name }), " ", status));
  }
  return {
    title: "Ticket types",
    mount(main) {
      list = h("div", { id: "ticket-types" });
      const create = mayEdit && smallForm("new-type", [
        field("Name", { name: "name", required: true }),
        field("Statuses (comma-separated)", { name: "statuses", class: "wide" }),
        field("Fields (name:type, …)", { name: "fields", class: "wide", placeholder: "amount:number, note:string" }),
      ], "Create ticket type", async (values) => {
        await api("POST", "/api/ticket-types", {
          name: values.name,
          statuses: (values.statuses ?? "").split(",").map((item) => item.trim()).filter(Boolean),
          fields: parseFields(values.fields ?? ""),
        });
        await ctx.reload();
        return `Ticket type ${values.name} created.`;
      });
      append(main, [heading("Ticket types"), create, said, list]);
      this.update();
    },
    update() {
      if (!ctx.data.loaded) {
        replace(list, loading());
        return;
      }
      replace(list, ctx.data.ticketTypes.length === 0 ? h("p", { class: "muted" }, "No ticket types yet.") : ctx.data.ticketTypes.map(typeSection));
    },
  };
}
