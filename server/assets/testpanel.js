// The editor's test panel: a dry run (`POST /api/automations/test`) of the definition as it
// stands in the editor, saved or not, on one sample input — the webhook's example body,
// a ticket for an event trigger, items for a poll, a recent run replayed — shown as the
// run page shows a run, with the "would" lines, the writes, the events and whom they would
// start, and the incident a failed run would open. A test writes nothing.

import { badge, h, replace, when } from "./dom.js";
import { api } from "./api.js";
import { described, timelineEntry } from "./views.js";

/** How many recent runs the replay list offers. */
const REPLAYS_SHOWN = 10;

/** `text` as JSON, or the sentence that says why not. */
function parsed(text, what) {
  if (text.trim() === "") return { value: undefined };
  try {
    return { value: JSON.parse(text) };
  } catch (error) {
    return { error: `${what} does not parse as JSON: ${error.message}` };
  }
}

function area(id, label, rows, value = "") {
  const control = h("textarea", { id, rows, spellcheck: "false", class: "definition", "aria-label": label });
  control.value = value;
  return control;
}

/**
 * The panel for the editor. `definition()` answers the definition being edited (or null
 * while it does not parse), `example(params)` a webhook's example body, `automationId`
 * the saved automation (null for a new one: no runs to replay).
 */
export function testPanel({ definition, example, automationId }) {
  const inputs = h("div", { id: "test-inputs" });
  const result = h("div", { id: "test-result", "aria-live": "polite" });
  const status = h("p", { id: "test-status", class: "status", role: "status" });
  const mocks = area("test-mocks", "Mocked outputs of connector steps, as JSON", 4);
  const live = h("input", { type: "checkbox", id: "test-live" });
  const fields = { body: null, ticket: null, change: null, items: null, run: null };
  let shownFor = null;
  let bodyTouched = false;

  /** The input fields the trigger takes; redrawn only when the trigger type changes. */
  function drawInputs(force = false) {
    const current = definition();
    const trigger = current?.trigger ?? {};
    const type = trigger.type ?? "manual";
    if (type === "webhook" && fields.body && !bodyTouched) {
      fields.body.value = JSON.stringify(example(trigger.params ?? []), null, 2);
    }
    // An error event (run.failed, incident.opened) starts from a sample context, not a ticket.
    const errorEvent = type === "event" && (trigger.event === "run.failed" || trigger.event === "incident.opened");
    const shape = errorEvent ? `event:${trigger.event}` : type;
    if (shape === shownFor && !force) return;
    shownFor = shape;
    const parts = [];
    fields.body = fields.ticket = fields.change = fields.items = null;
    if (type === "webhook" || type === "manual") {
      const start = type === "webhook" ? JSON.stringify(example(trigger.params ?? []), null, 2) : "";
      fields.body = area("test-body", type === "webhook" ? "The body the webhook receives" : "The body of a manual run (optional)", type === "webhook" ? 8 : 3, start);
      fields.body.addEventListener("input", () => { bodyTouched = true; });
      parts.push(h("label", { for: "test-body" }, type === "webhook" ? "Body (the webhook's example, edit it):" : "Body (optional):"), fields.body);
    } else if (errorEvent) {
      fields.body = area("test-body", `A sample context of ${trigger.event}, as JSON (optional)`, 6);
      parts.push(h("label", { for: "test-body" }, `Sample context of ${trigger.event} (optional; empty: an example — automation, run, step, message, ticket…):`), fields.body);
    } else if (type === "event") {
      fields.ticket = h("input", { id: "test-ticket", type: "text", placeholder: "TK-1", "aria-label": "The ticket of the event (TK-12, 12 or its id)" });
      fields.change = area("test-change", "The change the event carries, as JSON (optional)", 3);
      parts.push(h("label", { for: "test-ticket" }, "Ticket: "), fields.ticket,
        h("label", { for: "test-change" }, "Change (optional, {\"status\": {\"from\": …, \"to\": …}}):"), fields.change);
    } else if (type === "poll") {
      fields.items = area("test-items", "The items the poll would find, as a JSON list", 5, "[]");
      parts.push(h("label", { for: "test-items" }, "Items, as if polled:"), fields.items);
    } else {
      parts.push(h("p", { class: "muted" }, "A schedule takes no input: the test stands for its next tick."));
    }
    fields.run = h("select", { id: "test-run", "aria-label": "Or replay the input of a recent run" },
      h("option", { value: "" }, automationId ? "— or replay a recent run —" : "(save the automation to replay its runs)"));
    parts.push(h("p", {}, fields.run));
    replace(inputs, parts);
    loadRuns();
  }

  async function loadRuns() {
    if (!automationId || !fields.run) return;
    try {
      const page = await api("GET", `/api/runs?automation=${encodeURIComponent(automationId)}&limit=${REPLAYS_SHOWN}`);
      for (const run of page.items) {
        fields.run.append(h("option", { value: run.id }, `${when(run.createdAt)} — ${run.trigger}, ${run.status}`));
      }
    } catch {
      // Replays are a convenience: the other inputs still work.
    }
  }

  /** The request's body from the fields, or the sentence that says what does not fit. */
  function request() {
    const current = definition();
    if (!current) return { error: "The definition does not parse: fix the JSON first." };
    const body = { automation: current };
    if (fields.run?.value) {
      body.run = fields.run.value;
    } else if (fields.body) {
      const read = parsed(fields.body.value, "The body");
      if (read.error) return read;
      if (read.value !== undefined) body.body = read.value;
    } else if (fields.ticket) {
      if (fields.ticket.value.trim() === "") return { error: "Name the ticket the event is about (TK-1)." };
      body.ticket = fields.ticket.value.trim();
      const change = parsed(fields.change.value, "The change");
      if (change.error) return change;
      if (change.value !== undefined) body.change = change.value;
    } else if (fields.items) {
      const items = parsed(fields.items.value, "The items");
      if (items.error) return items;
      body.items = items.value ?? [];
    }
    const mocked = parsed(mocks.value, "The mocks");
    if (mocked.error) return mocked;
    if (mocked.value !== undefined) body.mocks = mocked.value;
    if (live.checked) body.connectors = "live";
    return { body };
  }

  async function test() {
    const asked = request();
    if (asked.error) {
      status.textContent = asked.error;
      status.className = "status error";
      return;
    }
    button.disabled = true;
    status.textContent = "Testing…";
    status.className = "status";
    try {
      const answer = await api("POST", "/api/automations/test", asked.body);
      show(answer);
      status.textContent = `Tested: ${answer.status}. Nothing was written.`;
      result.scrollIntoView({ block: "start" });
    } catch (error) {
      replace(result);
      status.textContent = `Not tested — ${described(error)}`;
      status.className = "status error";
    } finally {
      button.disabled = false;
    }
  }

  function show(answer) {
    const steps = answer.steps ?? [];
    const timeline = steps.map((step) => ({ ...step, kind: "step", at: step.startedAt }));
    replace(result,
      h("p", {}, badge(answer.status, String(answer.status).replace(/\s+/g, "-")),
        answer.error ? [" ", h("span", { class: "error" }, answer.error)] : null),
      answer.notes?.length ? h("ul", { class: "notes" }, answer.notes.map((note) => h("li", { class: "muted" }, note))) : null,
      h("h3", {}, "What the run would do"),
      h("ol", { class: "steps", id: "test-steps" }, timeline.map((entry) => timelineEntry(entry, steps))),
      answer.events?.length ? [h("h3", {}, "Events it would announce"),
        h("ul", { id: "test-events" }, answer.events.map((event) => h("li", {},
          h("code", {}, event.event), ` of ${event.ticket}`,
          event.wouldStart.length ? [" would start ", event.wouldStart.map((automation) => h("strong", {}, automation.name)).flatMap((name, at) => at ? [", ", name] : [name])] : " would start no automation",
          event.notStarted.map((automation) => h("div", { class: "muted" }, `${automation.name}: not started — ${automation.why}`)))))] : null,
      answer.incident ? [h("h3", {}, "The incident a failing run would open"),
        h("div", { id: "test-incident", class: "incident" }, h("strong", {}, answer.incident.title), h("p", {}, answer.incident.impact))] : null);
  }

  const button = h("button", { type: "button", id: "test" }, "Test");
  button.addEventListener("click", test);
  const element = h("section", { id: "test-panel", class: "test-panel", "aria-labelledby": "test-title" },
    h("h2", { id: "test-title" }, "Test"),
    h("p", { class: "muted" }, "A dry run of the definition as it stands here, saved or not: every step says what it would do with today's data; nothing is written, no connector is called unless you ask."),
    inputs,
    h("details", {}, h("summary", {}, "Connector steps"),
      h("label", { for: "test-mocks" }, "Mocked outputs, by step name ({\"lookup\": {\"status\": 200}}):"), mocks,
      h("p", {}, live, " ", h("label", { for: "test-live" }, "Call connectors for real (a live test counts against the service's limits)"))),
    h("p", { class: "actions" }, button, " ", status),
    result);
  return {
    element,
    /** The definition changed: follow its trigger. */
    refresh() {
      drawInputs();
    },
  };
}
