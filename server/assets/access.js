// The pages of a tenant's `admin` tokens (docs/api-notes.md, "Tokens and the audit log"):
//
// - Tokens (`#/tokens`): the tenant's named tokens with their role, expiry and last use
//   (`GET /api/tokens`, never a secret); a form makes one (`POST /api/tokens`) and its
//   secret is shown this once in a box to copy — it lives only in that box (no storage,
//   no URL, no log) and is gone when the box is hidden or the page is left; Revoke asks
//   first, then `DELETE /api/tokens/{id}` (409 for the tenant's last admin token: its
//   sentence is shown in the row). A refused form says the API's sentence beside it and
//   marks the field it names (`name: …`, `role: …`, `expiresAt: …`).
// - Audit (`#/audit?from=&to=&actor=&object=`): the tenant's audit log, newest first
//   (`GET /api/audit`), filtered by day (from/to: whole days of this browser's time
//   zone), actor (a token's name or id) and object (a kind, an id, or `kind:id`; an
//   entry's object is a link filtering by it), 50 entries a page with "Load older
//   entries" following `nextCursor`.
//
// Both are built only for `ctx.may("admin")` (views.js); the API refuses other roles all
// the same (403).

import { h, replace, when, badge } from "./dom.js";
import { api, listAll, withQuery } from "./api.js";
import { described, failed, table } from "./views.js";

/** Audit entries read per page. */
const AUDIT_PAGE = 50;
const ROLES = ["viewer", "editor", "admin"];
/** What each role may do, beside the role picker. */
const ROLE_HINTS = {
  viewer: "reads everything, changes nothing (a wall display)",
  editor: "automations, setup, tickets and runs' actions; not tokens or the audit log",
  admin: "everything, tokens and the audit log included",
};

function heading(text) {
  return h("h1", { tabindex: "-1" }, text);
}

/** A role as a badge (`role-viewer` …). */
export function roleBadge(role) {
  return h("span", { class: `badge role role-${String(role).replace(/[^a-z]/g, "")}` }, role);
}

/** A sentence of the API naming a field (`"name: …"`): that field's input name, else null. */
function namedField(message, names) {
  const match = /^([A-Za-z]+):/.exec(message ?? "");
  return match && names.includes(match[1]) ? match[1] : null;
}

// ---- tokens ----

export function tokensView(ctx) {
  let list;
  let tokens = null;
  let error = null;
  /** The box of a new token's secret (the only place it is). */
  const secretSlot = h("div", { id: "token-secret-slot" });
  const said = h("p", { class: "status", role: "status", id: "tokens-status" });

  async function load() {
    try {
      tokens = (await listAll("/api/tokens")).items;
      error = null;
    } catch (failure) {
      error = failure;
    }
    draw();
  }

  function draw() {
    if (!tokens && !error) {
      replace(list, h("p", { class: "muted" }, "Loading…"));
      return;
    }
    replace(list,
      error ? failed(error) : null,
      tokens && tokens.length === 0 ? h("p", { class: "muted" }, "No tokens.") : null,
      tokens && tokens.length > 0
        ? table(["Name", "Role", "Made", "Expires", "Last used", ""], tokens.map(tokenRow), "The tenant's tokens (their secrets are never shown again)")
        : null);
  }

  function tokenRow(token) {
    const mine = token.id === ctx.me?.token?.id;
    const expired = token.expiresAt && Date.parse(token.expiresAt) <= Date.now();
    const status = h("span", { class: "status", role: "status" });
    const cell = h("td", { class: "token-actions" });
    function idle() {
      replace(cell, h("button", {
        type: "button", class: "danger", dataset: { revoke: token.name }, "aria-label": `Revoke ${token.name}`,
        onclick: confirm,
      }, "Revoke"), " ", status);
    }
    function confirm() {
      const go = h("button", { type: "button", class: "danger", dataset: { revokeGo: token.name }, onclick: revoke }, `Revoke ${token.name}`);
      replace(cell,
        h("div", { class: "confirm", role: "alertdialog", "aria-label": `Revoke ${token.name}?` },
          h("p", {}, h("strong", {}, `Revoke “${token.name}”?`), " Every request with it is refused from now on, and its open streams close.",
            mine ? " It is the token you are signed in with: this page signs out." : ""),
          go, " ", h("button", { type: "button", dataset: { revokeBack: token.name }, onclick: idle }, "Keep it")),
        status);
      go.focus();
    }
    async function revoke(event) {
      event.target.disabled = true;
      status.className = "status";
      status.textContent = "Revoking…";
      try {
        await api("DELETE", `/api/tokens/${encodeURIComponent(token.id)}`);
        said.className = "status";
        said.textContent = `${token.name} was revoked.`;
        await load();
      } catch (failure) {
        idle();
        status.className = "status error";
        // 409: the tenant's last admin token — the API's sentence says what to do.
        status.textContent = failure.status === 409 ? `Not revoked: ${failure.message}` : described(failure);
      }
    }
    idle();
    return h("tr", { dataset: { token: token.name, role: token.role } },
      h("td", {}, h("strong", {}, token.name), mine ? h("span", { class: "muted" }, " (this token)") : null),
      h("td", {}, roleBadge(token.role)),
      h("td", {}, when(token.createdAt)),
      h("td", {}, token.expiresAt ? [when(token.expiresAt), expired ? [" ", badge("expired", "failed")] : null] : h("span", { class: "muted" }, "never")),
      h("td", {}, token.lastUsedAt ? when(token.lastUsedAt) : h("span", { class: "muted" }, "not yet")),
      cell);
  }

  /** The secret of a new token, shown this once, with a copy button and how to lose it. */
  function showSecret(made) {
    const input = h("input", { id: "new-token-secret", class: "url secret", type: "text", readonly: true, value: made.token, size: 50, spellcheck: "false", autocomplete: "off", "aria-label": `The secret of ${made.name}` });
    const status = h("span", { class: "status", role: "status", id: "new-token-copied" });
    const copy = h("button", { type: "button", id: "new-token-copy", onclick: () => copySecret(input, status) }, "Copy");
    const hide = h("button", { type: "button", id: "new-token-hide", onclick: forgetSecret }, "I copied it — hide the token");
    replace(secretSlot,
      h("section", { class: "secret-box", id: "new-token", role: "region", "aria-labelledby": "new-token-title" },
        h("h2", { id: "new-token-title" }, `Token “${made.name}” made: `, roleBadge(made.role)),
        h("p", { class: "once" }, h("strong", {}, "Copy it now: this secret is shown only once."),
          " The server keeps only its hash and this page does not store it; when you hide this box or leave the page it is gone. If it is lost, revoke the token and make another."),
        h("p", { class: "copy" }, h("label", { for: "new-token-secret" }, h("strong", {}, "Token:")), input, copy, status),
        h("p", {}, hide)));
    input.focus();
    input.select();
  }

  function forgetSecret() {
    const input = secretSlot.querySelector("input");
    if (input) input.value = "";
    secretSlot.replaceChildren();
  }

  async function copySecret(input, status) {
    status.className = "status";
    try {
      await navigator.clipboard.writeText(input.value);
      status.textContent = "Copied.";
    } catch (error) {
      input.focus();
      input.select();
      if (document.execCommand && document.execCommand("copy")) {
        status.textContent = "Copied.";
      } else {
        status.className = "status error";
        status.textContent = `The browser refused the clipboard (${error.message}); the token is selected: press Ctrl+C.`;
      }
    }
  }

  function createForm() {
    const name = h("input", { id: "token-name", name: "name", required: true, maxlength: 100, autocomplete: "off", placeholder: "e.g. night shift" });
    const role = h("select", { id: "token-role", name: "role" },
      ROLES.map((value) => h("option", { value, selected: value === "viewer" }, value)));
    const expires = h("input", { id: "token-expires", name: "expiresAt", type: "datetime-local" });
    const inputs = { name, role, expiresAt: expires };
    const status = h("p", { class: "status", role: "status", id: "token-form-status" });
    const button = h("button", { type: "submit", id: "token-make" }, "Make token");
    const form = h("form", { class: "small-form token-form", id: "new-token-form", "aria-describedby": "token-form-status" },
      h("label", { class: "field", for: "token-name" }, h("span", {}, "Name"), name),
      h("label", { class: "field", for: "token-role" }, h("span", {}, "Role"), role),
      h("label", { class: "field", for: "token-expires" }, h("span", {}, "Expires (optional, this browser's time)"), expires),
      button,
      h("p", { class: "role-hint muted" }, "A ", h("strong", {}, "viewer"), " ", ROLE_HINTS.viewer, "; an ", h("strong", {}, "editor"), " ", ROLE_HINTS.editor, "; an ", h("strong", {}, "admin"), " ", ROLE_HINTS.admin, "."),
      status);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      for (const input of Object.values(inputs)) {
        input.classList.remove("invalid");
        input.removeAttribute("aria-invalid");
      }
      const body = { name: name.value.trim(), role: role.value };
      if (expires.value) {
        const at = new Date(expires.value);
        if (Number.isNaN(at.getTime())) {
          status.className = "status error";
          status.textContent = "Expires: not a date and time.";
          expires.classList.add("invalid");
          expires.setAttribute("aria-invalid", "true");
          return;
        }
        body.expiresAt = at.toISOString();
      }
      button.disabled = true;
      status.className = "status";
      status.textContent = "Making the token…";
      try {
        const made = await api("POST", "/api/tokens", body);
        form.reset();
        status.textContent = `Made ${made.name} (${made.role}).`;
        showSecret(made);
        load();
      } catch (failure) {
        status.className = "status error";
        // 400/409: the API's sentence names the field ("name: a token called … already exists").
        status.textContent = failure.status === 400 || failure.status === 409
          ? `Not made — ${failure.message}`
          : described(failure);
        const named = namedField(failure.message, Object.keys(inputs));
        if (named) {
          inputs[named].classList.add("invalid");
          inputs[named].setAttribute("aria-invalid", "true");
          inputs[named].focus();
        }
      } finally {
        button.disabled = false;
      }
    });
    return h("section", { "aria-labelledby": "token-form-title" }, h("h2", { id: "token-form-title" }, "Make a token"), form);
  }

  return {
    title: "Tokens",
    mount(main) {
      list = h("div", { id: "tokens" });
      main.append(heading("Tokens"),
        h("p", { class: "muted" }, "Named tokens of this tenant, each with a role. Give each screen, script or person its own, so it can be revoked alone and the audit log says who did what."),
        createForm(), secretSlot, said, list);
      draw();
      load();
    },
    update() {},
    unmount() {
      forgetSecret();
    },
  };
}

// ---- audit ----

/** The RFC 3339 instant of the local midnight starting `date` (`YYYY-MM-DD`) plus `days`. */
function localMidnight(date, days = 0) {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(date ?? "");
  if (!match) return date;
  return new Date(Number(match[1]), Number(match[2]) - 1, Number(match[3]) + days).toISOString();
}

export function auditView(ctx, query) {
  const filter = {
    from: query.get("from") ?? "",
    to: query.get("to") ?? "",
    actor: query.get("actor") ?? "",
    object: query.get("object") ?? "",
  };
  const items = [];
  let cursor = null;
  let error = null;
  let done = false;
  let list;

  function setFilter(name, value) {
    location.hash = withQuery("#/audit", { ...filter, [name]: value });
  }

  async function load(more) {
    try {
      const page = await api("GET", withQuery("/api/audit", {
        from: filter.from ? localMidnight(filter.from) : "",
        // "To" is the whole day: the API's `to` is "before", so the next day's midnight.
        to: filter.to ? localMidnight(filter.to, 1) : "",
        actor: filter.actor,
        object: filter.object,
        limit: AUDIT_PAGE,
        cursor: more ? cursor : null,
      }));
      items.push(...page.items);
      cursor = page.nextCursor;
      error = null;
    } catch (failure) {
      error = failure;
    }
    done = true;
    draw();
  }

  function actorCell(actor) {
    const kind = actor?.kind ?? "token";
    return h("td", { class: "actor", dataset: { label: "Who" } },
      h("strong", {}, actor?.name ?? "—"), " ",
      actor?.role ? roleBadge(actor.role) : null,
      kind !== "token" && !actor?.role ? [" ", h("span", { class: "badge" }, kind === "cli" ? "command line" : kind)] : null);
  }

  function objectCell(object) {
    if (!object?.kind) return h("td", { dataset: { label: "Object" } }, "—");
    const key = object.id ? `${object.kind}:${object.id}` : object.kind;
    return h("td", { class: "object", dataset: { label: "Object" } },
      h("a", { href: withQuery("#/audit", { ...filter, object: key }), title: `Only entries about ${key}`, dataset: { object: key } },
        // Ids are long (and UUIDv7 ones share their start): the end tells them apart; the whole one on hover.
        h("span", { class: "kind" }, object.kind), object.id ? [" ", h("code", { title: object.id }, object.id.length > 12 ? `…${object.id.slice(-8)}` : object.id)] : null));
  }

  function entryRow(entry) {
    return h("tr", { dataset: { entry: entry.id, object: entry.object?.kind ?? "" } },
      h("td", { class: "at", dataset: { label: "When" } }, h("time", { datetime: entry.at, title: entry.at }, new Date(entry.at).toLocaleString()),
        h("div", { class: "muted" }, when(entry.at))),
      actorCell(entry.actor),
      h("td", { class: "client", dataset: { label: "From" } }, entry.client ? h("code", {}, entry.client) : h("span", { class: "muted" }, entry.actor?.kind === "cli" ? "this host" : "—")),
      h("td", { class: "what", dataset: { label: "What" } }, h("div", {}, entry.summary),
        h("div", { class: "muted" }, h("code", {}, `${entry.method} ${entry.route}`))),
      objectCell(entry.object));
  }

  function draw() {
    if (!done) {
      replace(list, h("p", { class: "muted" }, "Loading…"));
      return;
    }
    const filtered = Object.values(filter).some(Boolean);
    replace(list,
      error ? failed(error) : null,
      items.length === 0 && !error ? h("p", { class: "muted" }, filtered ? "No entry matches these filters." : "No entries yet.") : null,
      items.length > 0 ? table(["When", "Who", "From", "What", "Object"], items.map(entryRow)) : null,
      h("p", { class: "muted", id: "audit-count" }, items.length ? `${items.length} ${items.length === 1 ? "entry" : "entries"} shown, newest first.` : "",
        cursor ? [" ", h("button", { type: "button", id: "audit-more", onclick: () => load(true) }, "Load older entries")] : null));
  }

  function textFilter(label, name, type, placeholder = "") {
    const id = `audit-${name}`;
    return h("label", { for: id }, `${label} `,
      h("input", { id, name, type, value: filter[name], placeholder, dataset: { key: id },
        onchange: (event) => setFilter(name, event.target.value.trim()) }));
  }

  return {
    title: "Audit",
    mount(main) {
      list = h("div", { id: "audit", "aria-live": "polite" });
      const filtered = Object.values(filter).some(Boolean);
      const filters = h("form", { class: "filters", role: "search", id: "audit-filters", onsubmit: (event) => event.preventDefault() },
        textFilter("From", "from", "date"),
        textFilter("To", "to", "date"),
        textFilter("Actor", "actor", "search", "token name or id"),
        textFilter("Object", "object", "search", "automation, an id, or kind:id"),
        filtered ? h("a", { href: "#/audit", id: "audit-clear" }, "Clear the filters") : null);
      main.append(heading("Audit"),
        h("p", { class: "muted" }, "Every change made through the API or the command line: when, by which token (and its role), from which address, what and to which object. Newest first; days are this browser's."),
        filters, list);
      draw();
      load(false);
    },
    update() {},
  };
}
