// The dashboard's shell: sign-in, the data it keeps, the stream, the router.
//
// Sign-in takes a token and asks the API who it is: a tenant token answers `GET /api/me`
// (its tenant, its name and role, and `may`: the roles its role includes), the admin
// token `GET /api/admin/tenants`. Nothing of a tenant is shown before that answer; a 401
// later (token revoked) signs out and says why.
//
// Roles: the page shows what the signed-in role may do and hides the rest (not only
// disables it). `ctx.may("editor")` guards every control that writes (create, edit,
// delete, pause, resume, retry, cancel, bulk, test, resolve, reload a widget: the
// `.editor()` routes of the route table); `ctx.may("admin")` the Tokens and Audit pages
// (`.tenant_admin()`). The header names the token and its role. `/api/me` is asked again
// when the page is reloaded (the role is not kept in the tab's storage); should a call be
// refused all the same, its 403 `forbidden` reads as which role it needs (api.js).
//
// Tenant session:
//   1. open `GET /api/stream` (see stream.js); when it is live,
//   2. read the data the views share — the newest runs, every open ticket, incidents,
//      automations, ticket types, groups and their members —
//   3. then every stream event updates that data and the current view redraws at once.
//   On every reconnect step 2 runs again: the stream does not replay what was missed.
// Admin session: tenants and every tenant's incidents with their detail; no stream (the
// stream is per tenant), a Reload button instead.
//
// Routes are hashes (`#/runs?status=failed`, `#/runs/<id>`), so the server serves one
// page at `/` and the browser's back button works. Every failed request is said on the
// page: in the view where its data would be and in the error list under the header.

import { api, session, onUnauthorized, listAll, ApiFailure } from "./api.js";
import { openStream } from "./stream.js";
import { h, replace, tickTimes } from "./dom.js";
import { navFor, viewFor } from "./views.js";

/** The newest runs read at start; the run tiles count over them and every later event. */
const RUNS_WINDOW = 500;
/** Open tickets read at start (board, group load); more are counted as "at least". */
const OPEN_TICKETS_MAX = 5000;
const INCIDENTS_MAX = 1000;
/** Failed requests listed under the header at once (older ones drop off). */
const ERRORS_SHOWN = 4;
/** Redraws after stream events are batched this long. */
const REDRAW_DELAY_MS = 50;

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const live = document.getElementById("live");
const errors = document.getElementById("errors");
const signOutButton = document.getElementById("signout");
const who = document.getElementById("who");

function emptyData() {
  return {
    loaded: false,
    loadedAt: null,
    runsWindow: RUNS_WINDOW,
    runs: new Map(),
    tickets: new Map(),
    incidents: new Map(),
    automations: new Map(),
    ticketTypes: [],
    groups: [],
    truncated: { tickets: false, closed: false },
    closedLoaded: false,
    /** When the stream last told about an id (a list read before that is older). */
    eventAt: new Map(),
  };
}

const ctx = {
  kind: null,
  /** A tenant token's `GET /api/me` (null until it answers). */
  me: null,
  data: emptyData(),
  /** Whether the signed-in tenant token's role includes `role` (`viewer`, `editor`, `admin`). */
  may(role) {
    return ctx.kind === "tenant" && Boolean(ctx.me?.may?.includes(role));
  },
  /** Read the shared data again (after a write of the page) and redraw the view. */
  reload() {
    return load();
  },
  /** Say on the page that a request failed. */
  report(error) {
    const text = error.describe ? error.describe() : String(error);
    console.warn(text);
    const item = h("li", {}, h("span", {}, text), " ",
      h("button", { type: "button", class: "link", onclick: () => item.remove(), "aria-label": "Dismiss this error" }, "dismiss"));
    let list = errors.querySelector("ul");
    if (!list) {
      list = h("ul", {});
      errors.append(list);
    }
    list.prepend(item);
    while (list.children.length > ERRORS_SHOWN) list.lastElementChild.remove();
  },
  /** A change made here (an action's answer): redraw as for a stream event. */
  changed(kind, item) {
    queueChange({ kind, name: `${kind}.local`, item });
  },
};

let view = null;
let stream = null;
let pending = [];
let redraw = null;

function queueChange(change) {
  pending.push(change);
  if (redraw) return;
  redraw = setTimeout(() => {
    const changes = pending;
    pending = [];
    redraw = null;
    view?.update?.(changes);
  }, REDRAW_DELAY_MS);
}

// ---- the stream ----

function onEvent(name, item) {
  const kind = name.split(".")[0];
  const maps = { run: ctx.data.runs, ticket: ctx.data.tickets, incident: ctx.data.incidents };
  const map = maps[kind];
  if (!map || !item?.id) return;
  map.set(item.id, item);
  ctx.data.eventAt.set(item.id, Date.now());
  queueChange({ kind, name, item });
}

function onStreamState(state) {
  live.className = `live live-${state.state}`;
  switch (state.state) {
    case "connecting":
      live.textContent = "connecting…";
      live.title = "Opening the event stream";
      break;
    case "live":
      live.textContent = "● live";
      live.title = state.note ?? "Receiving events";
      if (state.lagged) ctx.report(new Error(`The stream skipped events (${state.note}); reloading.`));
      if (!state.note || state.lagged) load();
      break;
    case "waiting": {
      const seconds = Math.round((state.retryAt - Date.now()) / 1000);
      live.textContent = `○ offline, retrying in ${seconds} s`;
      live.title = state.error;
      ctx.report(new Error(`The event stream failed: ${state.error}. Retrying in ${seconds} s; the page may be out of date until then.`));
      break;
    }
    case "stopped":
      live.textContent = "○ stopped";
      live.title = state.error ?? "";
      if (state.unauthorized) signOut(`The server refused the token (${state.error}). Sign in again.`);
      break;
    default:
      break;
  }
}

// ---- data ----

let loadGeneration = 0;

/** Read the data the views share; each part that fails is said, the others still show. */
async function load() {
  if (ctx.kind !== "tenant") return;
  const generation = ++loadGeneration;
  const started = Date.now();
  const parts = await Promise.allSettled([
    api("GET", `/api/runs?limit=${RUNS_WINDOW}`),
    listAll("/api/tickets?closed=false", { max: OPEN_TICKETS_MAX }),
    listAll("/api/incidents", { max: INCIDENTS_MAX }),
    listAll("/api/automations"),
    listAll("/api/ticket-types"),
    loadGroups(),
  ]);
  if (generation !== loadGeneration || ctx.kind !== "tenant") return;
  const [runs, tickets, incidents, automations, types, groups] = parts;
  const data = ctx.data;
  const fresher = (item) => (data.eventAt.get(item.id) ?? 0) > started;
  if (runs.status === "fulfilled") {
    const next = new Map(runs.value.items.map((run) => [run.id, run]));
    for (const [id, run] of data.runs) if (fresher(run) || !next.has(id)) next.set(id, run);
    data.runs = next;
  }
  if (tickets.status === "fulfilled") {
    const next = new Map(tickets.value.items.map((ticket) => [ticket.id, ticket]));
    for (const [id, ticket] of data.tickets) if (fresher(ticket) || (ticket.closed && data.closedLoaded)) next.set(id, ticket);
    data.tickets = next;
    data.truncated.tickets = tickets.value.truncated;
  }
  if (incidents.status === "fulfilled") {
    const next = new Map(incidents.value.items.map((incident) => [incident.id, incident]));
    for (const [id, incident] of data.incidents) if (fresher(incident)) next.set(id, incident);
    data.incidents = next;
  }
  if (automations.status === "fulfilled") {
    data.automations = new Map(automations.value.items.map((automation) => [automation.id, automation]));
  }
  if (types.status === "fulfilled") data.ticketTypes = types.value.items;
  if (groups.status === "fulfilled") data.groups = groups.value;
  for (const part of parts) if (part.status === "rejected") ctx.report(part.reason);
  data.loaded = true;
  data.loadedAt = new Date(started).toISOString();
  view?.update?.(undefined);
}

async function loadGroups() {
  const { items } = await listAll("/api/groups");
  return Promise.all(items.map(async (group) => {
    const members = await listAll(`/api/groups/${encodeURIComponent(group.id)}/members`);
    return { ...group, members: members.items };
  }));
}

// ---- router ----

function route() {
  const hash = location.hash || "#/";
  // Other fragments (the skip link) are not routes.
  if (!hash.startsWith("#/")) return;
  // A filter changed by keyboard re-routes: give focus back to the same control.
  const focusedId = main.contains(document.activeElement) ? document.activeElement.id : "";
  view?.unmount?.();
  main.replaceChildren();
  if (!session.token) {
    view = signInView();
  } else if (ctx.kind === "tenant" && !ctx.me) {
    view = whoAmIView();
  } else {
    const [path, query] = hash.slice(1).split("?");
    view = viewFor(ctx, path, new URLSearchParams(query ?? ""));
  }
  document.title = `${view.title} · fronta`;
  const section = `#/${hash.slice(1).split("?")[0].split("/")[1] ?? ""}`;
  for (const link of nav.querySelectorAll("a")) {
    if (link.getAttribute("href") === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  view.mount(main);
  const again = focusedId ? document.getElementById(focusedId) : null;
  const title = main.querySelector("h1");
  if (again && main.contains(again)) again.focus();
  else if (title && routed) title.focus();
  routed = true;
}
let routed = false;

// ---- session ----

function signInView() {
  return {
    title: "Sign in",
    mount(target) {
      const message = h("p", { class: "status", role: "status", id: "signin-status" });
      const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", spellcheck: "false", required: true });
      const form = h("form", { class: "signin", id: "signin" },
        h("h1", { tabindex: "-1" }, "Sign in"),
        h("p", {}, "Sign in with a tenant token to see its runs, tickets, incidents, automations and groups, or with the admin token for tenants and incident detail. The token stays in this tab only."),
        h("p", {}, h("label", { for: "token" }, "Token"), " ", input),
        h("p", {}, h("button", { type: "submit" }, "Sign in"), " ", message));
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const token = input.value.trim();
        if (!token) return;
        message.className = "status";
        message.textContent = "Checking the token…";
        try {
          const { kind, me } = await whoIs(token);
          input.value = "";
          session.save(token, kind);
          start(me);
          if (location.hash === "#/") route();
          else location.hash = "#/";
        } catch (error) {
          message.className = "status error";
          message.textContent = error.status === 401
            ? "The server refused this token (401): it is neither a tenant's token nor the admin token."
            : (error.describe ? error.describe() : String(error));
        }
      });
      target.append(form);
      input.focus();
    },
  };
}

/**
 * `{kind: "tenant", me}` (`me`: the answer of `GET /api/me`) or `{kind: "admin"}` for a
 * token the server accepts; throws the refusal otherwise.
 */
async function whoIs(token) {
  try {
    const me = await api("GET", "/api/me", undefined, { token, quiet401: true });
    return { kind: "tenant", me };
  } catch (error) {
    if (error.status !== 401) throw error;
  }
  await api("GET", "/api/admin/tenants?limit=1", undefined, { token, quiet401: true });
  return { kind: "admin" };
}

/** The page while a reloaded tab asks `GET /api/me` again (or after that failed). */
function whoAmIView() {
  return {
    title: "Signing in",
    mount(target) {
      target.append(h("h1", { tabindex: "-1" }, "Signing in"),
        meError
          ? [h("p", { class: "error", role: "alert" }, meError.describe ? meError.describe() : String(meError)),
            h("p", {}, h("button", { type: "button", id: "me-again", onclick: askWhoAmI }, "Try again"), " ",
              h("button", { type: "button", class: "link", onclick: () => signOut() }, "Sign in with another token"))]
          : h("p", { class: "muted" }, "Asking the server what this token may do…"));
    },
  };
}

let meError = null;

/** Ask `GET /api/me` for the session's token (a reloaded tab), then draw the page for its role. */
async function askWhoAmI() {
  meError = null;
  route();
  try {
    const me = await api("GET", "/api/me");
    if (ctx.kind !== "tenant") return;
    showWho(me);
  } catch (error) {
    if (!session.token) return;
    meError = error instanceof ApiFailure || error instanceof Error ? error : new Error(String(error));
  }
  route();
}

/** The token's name and role in the header, its sections in the navigation. */
function showWho(me) {
  ctx.me = me;
  replace(nav, navFor(ctx.kind, ctx).map(([href, label]) => h("a", { href }, label)));
  if (!me) {
    who.replaceChildren();
    who.hidden = true;
    return;
  }
  const role = me.token?.role ?? "viewer";
  replace(who,
    h("span", { class: "tenant-name" }, me.tenant?.name ?? ""), " ",
    h("span", { class: "token-name", id: "who-token" }, me.token?.name ?? ""), " ",
    h("span", { class: `badge role role-${role.replace(/[^a-z]/g, "")}`, id: "who-role" }, role));
  who.title = `Signed in to ${me.tenant?.name} with the token “${me.token?.name}”, role ${role}: ${ROLE_NOTES[role] ?? ""}`;
  who.hidden = false;
}

/** What each role may do, as the header's hint says it. */
const ROLE_NOTES = {
  viewer: "reads everything, changes nothing.",
  editor: "reads and changes automations, setup, tickets and runs; not tokens or the audit log.",
  admin: "everything of the tenant, tokens and the audit log included.",
};

function start(me) {
  stream?.stop();
  stream = null;
  ctx.kind = session.kind;
  ctx.data = emptyData();
  errors.replaceChildren();
  meError = null;
  showWho(ctx.kind === "tenant" ? me ?? null : null);
  signOutButton.hidden = false;
  signOutButton.textContent = ctx.kind === "admin" ? "Sign out (admin)" : "Sign out";
  if (ctx.kind === "tenant") {
    if (!me) askWhoAmI();
    stream = openStream(session.token, onEvent, onStreamState);
  } else {
    live.className = "live";
    live.textContent = "admin";
    live.title = "The admin view does not stream; use Reload";
  }
}

function signOut(reason) {
  stream?.stop();
  stream = null;
  session.clear();
  ctx.kind = null;
  ctx.me = null;
  meError = null;
  ctx.data = emptyData();
  nav.replaceChildren();
  who.replaceChildren();
  who.hidden = true;
  live.textContent = "";
  signOutButton.hidden = true;
  if (location.hash === "#/" || location.hash === "") route();
  else location.hash = "#/";
  if (reason) {
    const status = document.getElementById("signin-status");
    if (status) {
      status.className = "status error";
      status.textContent = reason;
    }
  }
}

onUnauthorized((failure) => {
  if (session.token) signOut(`The server refused the token (${failure.describe()}). Sign in again.`);
});

signOutButton.addEventListener("click", () => signOut());
document.getElementById("skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
setInterval(tickTimes, 1000);

if (session.token && (session.kind === "tenant" || session.kind === "admin")) start();
else session.clear();
route();
