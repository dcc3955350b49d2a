// The automation editor (`#/automations/<id>`, `#/automations/new`): the definition as a
// form and as JSON, kept in step both ways, checked as it is typed, saved as a new version.
//
// One object, `model`, is the definition. A form control edits the part of `model` it
// was built for and writes the JSON again; an edit of the JSON that parses replaces
// `model` and redraws the form (one that does not parse leaves the form as it was and
// says so). Every form control carries `data-path`, the path the validator speaks in
// (`steps[1].then[0].input.group`, `trigger.params[0].path`, `trigger.cron`), so a problem
// of `POST /api/automations/validate` is marked at its control by one lookup.
//
// What the form leaves to the JSON: a webhook's `signingSecret`, a mail poll's mailbox, a
// rule's `step`. Those keys are kept as they are when the form edits the rest.
//
// This module imports the shared pieces of `views.js`, which imports this one for its
// router: a cycle ES modules allow, since neither uses the other before both are loaded.

import { h, replace, when } from "./dom.js";
import { api } from "./api.js";
import { described, failed, table, writeButton } from "./views.js";
import { testPanel } from "./testpanel.js";

/** The fields of an automation's answer that are not part of its definition. */
const READ_ONLY = ["id", "webhookUrl", "previousWebhooks", "signed", "previousSigningSecrets", "currentVersion", "inFlight", "createdAt", "updatedAt", "warnings"];
/** How long typing may pause before the definition is checked. */
const CHECK_DELAY_MS = 400;
const DRAFT_KEY = "fronta.draft.";
const LAYOUT_KEY = "fronta.editor.layout";
/** Inputs whose value is a list or an object: typed as JSON text in their field. */
const JSON_INPUTS = new Set(["tags", "fields", "headers", "query", "body", "arguments", "request"]);
/** Inputs whose value is a number when it is typed as one. */
const NUMBER_INPUTS = new Set(["seconds", "timeoutSec"]);
/** The layouts of the editor: the form, the JSON, or both side by side. */
const LAYOUTS = [["form", "Form"], ["json", "JSON"], ["both", "Side by side"]];
/** The kinds of step the outline adds. */
const STEP_KINDS = [["action", "Action"], ["condition", "Condition"], ["forEach", "For each"]];
/** What a webhook parameter's example value is, by its type (as the webhook help's `exampleBody`). */
const SAMPLES = { number: 42, boolean: true, date: "2026-01-31T09:30:00Z", object: {}, array: [] };
/** The biggest array index an example body spells out. */
const MAX_EXAMPLE_INDEX = 20;

/** Inputs whose value names one of the tenant's groups, ticket types or statuses: the field offers those names. */
const SUGGESTED = { group: "editor-groups", type: "editor-types", status: "editor-statuses" };

/** A new automation to start from. */
function starterDefinition() {
  return {
    name: "New automation",
    trigger: { type: "webhook", params: [{ name: "orderId", path: "data.order.id", type: "string", required: true }] },
    steps: [{ name: "note", op: "flow/log", input: { message: "order {{orderId}}" } }],
  };
}

/** An automation's answer without the fields the server keeps. */
function definitionOf(automation) {
  const definition = { ...automation };
  for (const key of READ_ONLY) delete definition[key];
  return definition;
}

/** `base.key`, or `key` at the root (the validator's `field_path`). */
function fieldPath(base, key) {
  return base ? `${base}.${key}` : key;
}

/** `base[index]` (the validator's `index_path`). */
function indexPath(base, index) {
  return `${base}[${index}]`;
}

/** The path one level up: `steps[0].input.tags` → `steps[0].input` → `steps[0]` → `steps`. */
function parentPath(path) {
  const cut = Math.max(path.lastIndexOf("."), path.lastIndexOf("["));
  return cut > 0 ? path.slice(0, cut) : "";
}

/**
 * An example body for webhook `params`: nested objects by dotted path, arrays for number
 * segments, a placeholder by type (a string parameter's is its name).
 */
export function exampleBody(params) {
  let body = null;
  for (const param of params ?? []) {
    const segments = String(param.path ?? "").split(".");
    if (segments.some((segment) => segment === "")) continue;
    const sample = param.type && param.type !== "string" ? SAMPLES[param.type] ?? param.name : param.name;
    body = placeSample(body, segments, structuredClone(sample ?? ""));
  }
  return body ?? {};
}

/** `node` with `sample` placed at `segments` (a value already there is kept). */
function placeSample(node, segments, sample) {
  if (segments.length === 0) return node ?? sample;
  const [first, ...rest] = segments;
  const index = /^\d+$/.test(first) ? Number(first) : null;
  if (index !== null && index > MAX_EXAMPLE_INDEX) return node;
  if (node === null || node === undefined) node = index === null ? {} : [];
  if (index === null && (typeof node !== "object" || Array.isArray(node))) return node;
  if (index !== null && !Array.isArray(node)) return node;
  if (index !== null) {
    while (node.length <= index) node.push(null);
    node[index] = placeSample(node[index], rest, sample);
  } else {
    node[first] = placeSample(node[first], rest, sample);
  }
  return node;
}

/** How a value shows in a text field: text as it is, anything else as JSON. */
function shown(value) {
  if (value === undefined || value === null) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/**
 * What typed `text` means for a value that was `previous`: `{value}` (undefined: leave the
 * key out) or `{error}`. `kind` is `"json"` (a list or an object may be typed as JSON;
 * other text, such as one `{{template}}`, stays text), `"number"` or `"text"`.
 */
export function readValue(text, kind, previous) {
  if (text.trim() === "") return { value: undefined };
  const trimmed = text.trim();
  const looksJson = trimmed.startsWith("[") || trimmed.startsWith("{");
  if (kind === "json" && looksJson) {
    try {
      return { value: JSON.parse(trimmed) };
    } catch (error) {
      return { error: `not valid JSON (${error.message}); the JSON keeps the last value that parsed` };
    }
  }
  if (kind === "number" && /^-?\d+(\.\d+)?$/.test(trimmed)) return { value: Number(trimmed) };
  // A value that was a number, a boolean or a list stays one when the text still reads as one.
  if (kind !== "number" && previous !== undefined && previous !== null && typeof previous !== "string") {
    try {
      return { value: JSON.parse(trimmed) };
    } catch {
      return { value: text };
    }
  }
  return { value: text };
}

/** The kind of a step: `action`, `condition` or `forEach`. */
function stepKind(step) {
  if (step?.type === "condition") return "condition";
  if (step?.type === "forEach") return "forEach";
  return "action";
}

/** Every step name in `steps`, nested blocks included. */
function stepNames(steps, names = new Set()) {
  for (const step of steps ?? []) {
    if (step?.name) names.add(step.name);
    stepNames(step?.then, names);
    stepNames(step?.else, names);
    stepNames(step?.steps, names);
  }
  return names;
}

/** A new step of `kind`, named so no other step of `model` has its name. */
function newStep(kind, model) {
  const names = stepNames(model.steps);
  const stem = kind === "action" ? "step" : kind === "condition" ? "check" : "each";
  let number = 1;
  while (names.has(`${stem}${number}`)) number += 1;
  const name = `${stem}${number}`;
  if (kind === "condition") return { name, type: "condition", match: "all", rules: [{ field: "", operator: "eq", value: "" }], then: [], else: [] };
  if (kind === "forEach") return { name, type: "forEach", items: "", as: "item", steps: [] };
  return { name, op: "flow/log", input: { message: "" } };
}

/** A trigger of `type` to start from. */
function newTrigger(type, catalogue) {
  switch (type) {
    case "webhook": return { type, params: [] };
    case "event": return { type, event: catalogue.events?.[0] ?? "ticket.created" };
    case "poll": return { type, source: catalogue.pollSources?.[0] ?? "http", intervalSec: 60 };
    case "schedule": return { type, cron: "0 7 * * MON-FRI", timezone: "UTC" };
    default: return { type };
  }
}

/** Move item `index` of `list` by `delta` (−1 up, +1 down); whether it moved. */
function moveItem(list, index, delta) {
  const to = index + delta;
  if (to < 0 || to >= list.length) return false;
  const [item] = list.splice(index, 1);
  list.splice(to, 0, item);
  return true;
}

let controlCounter = 0;

/** A fresh element id for a control. */
function controlId() {
  controlCounter += 1;
  return `editor-control-${controlCounter}`;
}

/** A labelled control in a `.form-field` (the place its problem is said); `extra` (a button) beside the label. */
function labelled(label, control, extra = null, attributes = {}) {
  if (!control.id) control.id = controlId();
  const name = h("label", { for: control.id }, label);
  return h("div", { class: "form-field", ...attributes }, extra ? h("div", { class: "field-label" }, name, extra) : name, control);
}

/** A text input for `path` showing `value`; `onText(text)` on every keystroke. */
function textInput(path, value, onText, attributes = {}) {
  return h("input", {
    type: "text", value: shown(value), spellcheck: "false", autocomplete: "off",
    dataset: { path, key: path }, oninput: (event) => onText(event.target.value), ...attributes,
  });
}

/** A `<select>` for `path` with `options` (`[value, text]`). */
function selectInput(path, value, options, onChange, attributes = {}) {
  const known = options.some(([optionValue]) => optionValue === value);
  const all = known || value === undefined ? options : [...options, [value, `${value} (unknown)`]];
  return h("select", { dataset: { path, key: path }, onchange: (event) => onChange(event.target.value), ...attributes },
    all.map(([optionValue, text]) => h("option", { value: optionValue, selected: optionValue === value }, text)));
}

/** A small button; `key` keeps the keyboard focus on it across redraws. */
function smallButton(text, label, key, onClick, disabled = false) {
  return h("button", { type: "button", class: "small", "aria-label": label, dataset: { key }, disabled, onclick: onClick }, text);
}

/** Up, down and remove buttons for item `index` of `list` at `path`, named after `what`. */
function itemButtons(editor, list, index, path, what) {
  const listPath = path.slice(0, path.lastIndexOf("["));
  const moved = (delta) => () => {
    if (!moveItem(list, index, delta)) return;
    editor.structure(`${indexPath(listPath, index + delta)}#${delta < 0 ? "up" : "down"}`);
  };
  return h("span", { class: "item-buttons" },
    smallButton("↑", `Move ${what} up`, `${path}#up`, moved(-1), index === 0),
    smallButton("↓", `Move ${what} down`, `${path}#down`, moved(1), index === list.length - 1),
    smallButton("Remove", `Remove ${what}`, `${path}#remove`, () => {
      list.splice(index, 1);
      editor.structure(`${listPath}#add`);
    }));
}

// ---- the trigger ----

/** The trigger section: its type and that type's fields. */
function triggerForm(editor) {
  const { model, catalogue } = editor;
  const trigger = model.trigger && typeof model.trigger === "object" ? model.trigger : (model.trigger = { type: "manual" });
  const type = selectInput("trigger.type", trigger.type, (catalogue.triggers ?? []).map((name) => [name, name]), (next) => {
    editor.remembered[trigger.type] = trigger;
    model.trigger = editor.remembered[next] ?? newTrigger(next, catalogue);
    editor.structure("trigger.type");
  });
  return h("section", { class: "form-section", dataset: { path: "trigger" } },
    h("h2", {}, "Trigger"), h("div", { class: "problem-slot" }),
    h("div", { class: "fields" }, labelled("Trigger type", type)),
    triggerFields(editor, trigger));
}

/** The fields of `trigger`'s type. */
function triggerFields(editor, trigger) {
  switch (trigger.type) {
    case "webhook": return webhookForm(editor, trigger);
    case "event": return h("div", { class: "fields" }, labelled("Event",
      selectInput("trigger.event", trigger.event, (editor.catalogue.events ?? []).map((name) => [name, name]), (next) => {
        trigger.event = next;
        editor.changedForm();
      })));
    case "poll": return pollForm(editor, trigger);
    case "schedule": return scheduleForm(editor, trigger);
    case "manual": return h("p", { class: "muted" }, "Started by hand, or through POST /api/automations/{id}/runs.");
    default: return h("p", { class: "muted" }, `A ${trigger.type} trigger is edited in the JSON.`);
  }
}

/** A text field of `object[key]` at `path`; empty text leaves the key out. */
function keyField(editor, label, object, key, path, kind = "text", attributes = {}) {
  const input = textInput(path, object[key], (text) => editor.setValue(object, key, text, kind, path), attributes);
  return labelled(label, input);
}

/** The webhook's parameters as a table, with the example body they make beside it. */
function webhookForm(editor, trigger) {
  const params = Array.isArray(trigger.params) ? trigger.params : (trigger.params = []);
  const types = (editor.catalogue.paramTypes ?? ["string"]).map((name) => [name, name]);
  const rows = params.map((param, index) => {
    const path = indexPath("trigger.params", index);
    const what = `parameter ${param.name || index + 1}`;
    return h("tr", { dataset: { path } },
      h("td", { "data-label": "Name" }, h("div", { class: "problem-slot" }), textInput(fieldPath(path, "name"), param.name, (text) => {
        param.name = text;
        editor.changedForm();
      }, { "aria-label": `Name of parameter ${index + 1}` })),
      h("td", { "data-label": "Path" }, textInput(fieldPath(path, "path"), param.path, (text) => {
        param.path = text;
        editor.changedForm();
      }, { "aria-label": `Path of parameter ${index + 1}`, placeholder: "data.order.id" })),
      h("td", { "data-label": "Type" }, selectInput(fieldPath(path, "type"), param.type ?? "string", types, (next) => {
        param.type = next;
        editor.changedForm();
      }, { "aria-label": `Type of parameter ${index + 1}` })),
      h("td", { "data-label": "Required" }, h("input", {
        type: "checkbox", checked: param.required === true, "aria-label": `Parameter ${index + 1} is required`,
        dataset: { path: fieldPath(path, "required"), key: fieldPath(path, "required") },
        onchange: (event) => {
          param.required = event.target.checked;
          editor.changedForm();
        },
      })),
      h("td", { class: "row-buttons" }, itemButtons(editor, params, index, path, what)));
  });
  editor.example = h("pre", { class: "json", id: "example-body", "aria-label": "Example body" }, JSON.stringify(exampleBody(params), null, 2));
  const add = smallButton("Add parameter", "Add a webhook parameter", "trigger.params#add", () => {
    params.push({ name: "", path: "", type: "string", required: true });
    editor.structure(`${indexPath("trigger.params", params.length - 1)}.name`);
  });
  return h("div", { class: "webhook-form" },
    h("div", { class: "params", dataset: { path: "trigger.params" } },
      h("div", { class: "problem-slot" }),
      params.length === 0 ? h("p", { class: "muted" }, "No parameters: any JSON body is taken.") :
        h("div", { class: "stack-table" }, table(["Name", "Path", "Type", "Required", ""], rows, "Webhook parameters")),
      h("p", {}, add)),
    h("div", { class: "example" }, h("h3", {}, "Example body"), editor.example));
}

/** A poll: its source and interval; the source's request, items and cursor. */
function pollForm(editor, trigger) {
  const sources = (editor.catalogue.pollSources ?? []).map((name) => [name, name]);
  const request = trigger.request;
  return h("div", {},
    h("div", { class: "fields" },
      labelled("Source", selectInput("trigger.source", trigger.source, sources, (next) => {
        trigger.source = next;
        editor.structure("trigger.source");
      })),
      keyField(editor, "Interval (seconds)", trigger, "intervalSec", "trigger.intervalSec", "number", { inputmode: "numeric" }),
      keyField(editor, "Service", trigger, "service", "trigger.service")),
    trigger.source === "mail"
      ? h("p", { class: "muted" }, "A mail poll's mailbox (host, user, password, folder) is edited in the JSON.")
      : h("div", { class: "fields" },
        labelled("Request (JSON object: method, url, headers…)", textInput("trigger.request", request, (text) =>
          editor.setValue(trigger, "request", text, "json", "trigger.request"), { class: "code" })),
        keyField(editor, "Items (path in the answer)", trigger, "items", "trigger.items", "text", { placeholder: "body.items" }),
        keyField(editor, "Cursor (path in an item)", trigger, "cursor", "trigger.cursor", "text", { placeholder: "id" })));
}

/** A schedule: cron and time zone, with what the validator says of them beside. */
function scheduleForm(editor, trigger) {
  editor.scheduleBeside = h("div", { class: "schedule-beside", id: "schedule-beside", "aria-live": "polite" });
  editor.showSchedule();
  return h("div", { class: "schedule-form" },
    h("div", { class: "fields" },
      keyField(editor, "Cron (minute hour day month weekday)", trigger, "cron", "trigger.cron", "text", { placeholder: "0 7 * * MON-FRI" }),
      keyField(editor, "Time zone (empty: UTC)", trigger, "timezone", "trigger.timezone", "text", { placeholder: "Europe/Prague" })),
    editor.scheduleBeside);
}

// ---- the steps ----

/** The steps of `parent[key]` at `path` as an outline, with the bar that adds one. */
function blockForm(editor, parent, key, path, where) {
  const steps = Array.isArray(parent[key]) ? parent[key] : [];
  const kind = h("select", { "aria-label": `Kind of step to add to ${where}`, dataset: { key: `${path}#kind` } },
    STEP_KINDS.map(([value, text]) => h("option", { value }, text)));
  const add = smallButton("Add step", `Add a step to ${where}`, `${path}#add`, () => {
    if (!Array.isArray(parent[key])) parent[key] = [];
    parent[key].push(newStep(kind.value, editor.model));
    editor.structure(`${indexPath(path, parent[key].length - 1)}.name`);
  });
  return h("div", { class: "block", dataset: { path } },
    h("div", { class: "problem-slot" }),
    steps.length === 0 ? h("p", { class: "muted empty" }, "No steps.") :
      h("ol", { class: "outline" }, steps.map((step, index) => stepForm(editor, steps, index, indexPath(path, index)))),
    h("p", { class: "add-step" }, kind, " ", add));
}

/** One step: its name, its kind's fields, and its buttons. */
function stepForm(editor, steps, index, path) {
  const step = steps[index];
  const kind = stepKind(step);
  const label = STEP_KINDS.find(([value]) => value === kind)[1];
  const name = textInput(fieldPath(path, "name"), step.name, (text) => {
    step.name = text;
    editor.changedForm();
  });
  const body = kind === "condition" ? conditionForm(editor, step, path)
    : kind === "forEach" ? forEachForm(editor, step, path) : actionForm(editor, step, path);
  return h("li", { class: `step-item kind-${kind}`, dataset: { path } },
    h("fieldset", {},
      h("legend", {}, `${index + 1}. ${label}`, kind === "action" && step.op ? h("span", { class: "legend-op" }, ` · ${step.op}`) : null),
      h("div", { class: "problem-slot" }),
      h("div", { class: "step-head" }, labelled("Step name", name), itemButtons(editor, steps, index, path, `step ${step.name || index + 1}`)),
      body));
}

/** The catalogue's entry of `op`, or null. */
function opOf(catalogue, op) {
  return (catalogue.ops ?? []).find((entry) => entry.op === op) ?? null;
}

/** An action: its op, its service (connector ops), its inputs. */
function actionForm(editor, step, path) {
  const { catalogue } = editor;
  if (!step.input || typeof step.input !== "object" || Array.isArray(step.input)) step.input = {};
  const entry = opOf(catalogue, step.op);
  const op = selectInput(fieldPath(path, "op"), step.op, (catalogue.ops ?? []).map((item) => [item.op, item.op]), (next) => {
    switchOp(step, opOf(catalogue, next), next);
    editor.structure(fieldPath(path, "op"));
  });
  const fields = [labelled("Op", op, null, { class: "form-field op-field" })];
  if (entry?.connector || step.service !== undefined) {
    fields.push(keyField(editor, "Service", step, "service", fieldPath(path, "service"), "text", { placeholder: "the service's name" }));
  }
  return h("div", {}, h("div", { class: "fields" }, fields), inputsForm(editor, step, entry, fieldPath(path, "input")));
}

/** `step` with op `next`: inputs the new op takes are kept, the others dropped. */
function switchOp(step, entry, next) {
  step.op = next;
  if (!entry) return;
  const takes = new Set([...entry.required, ...entry.optional]);
  for (const key of Object.keys(step.input)) if (!takes.has(key)) delete step.input[key];
  if (!entry.connector) delete step.service;
}

/** The kind of value input `key` takes. */
function inputKind(key) {
  if (JSON_INPUTS.has(key)) return "json";
  if (NUMBER_INPUTS.has(key)) return "number";
  return "text";
}

/** An action's inputs: the required ones always, the optional ones present, an adder for the rest. */
function inputsForm(editor, step, entry, path) {
  const input = step.input;
  const required = entry?.required ?? [];
  const optional = entry?.optional ?? [];
  const keys = [...required, ...Object.keys(input).filter((key) => !required.includes(key))];
  const fields = keys.map((key) => {
    const keyPath = fieldPath(path, key);
    const kind = inputKind(key);
    const hint = kind === "json" ? (key === "tags" ? "a JSON list: [\"a\", \"b\"]" : "a JSON object: {\"a\": 1}") : "";
    const control = textInput(keyPath, input[key], (text) => editor.setValue(input, key, text, kind, keyPath),
      { placeholder: hint || (required.includes(key) ? "required" : ""), class: kind === "json" ? "code" : null, list: SUGGESTED[key] });
    const remove = required.includes(key) ? null : smallButton("Remove", `Remove input ${key}`, `${keyPath}#remove`, () => {
      delete input[key];
      editor.structure(`${path}#add`);
    });
    return labelled(required.includes(key) ? `${key} (required)` : key, control, remove);
  });
  const addable = optional.filter((key) => !(key in input));
  let adder = null;
  if (addable.length > 0) {
    const which = h("select", { "aria-label": `Input to add to step ${step.name}`, dataset: { key: `${path}#which` } },
      addable.map((key) => h("option", { value: key }, key)));
    adder = h("p", { class: "add-input" }, which, " ", smallButton("Add input", `Add an input to step ${step.name}`, `${path}#add`, () => {
      input[which.value] = "";
      editor.structure(fieldPath(path, which.value));
    }));
  }
  return h("div", { class: "inputs", dataset: { path } },
    h("div", { class: "problem-slot" }),
    fields.length ? h("div", { class: "fields" }, fields) : h("p", { class: "muted" }, "No inputs."),
    adder);
}

/** A condition: all/any, its rules, its then and else blocks. */
function conditionForm(editor, step, path) {
  const operators = editor.catalogue.operators ?? [];
  const rules = Array.isArray(step.rules) ? step.rules : (step.rules = []);
  const match = selectInput(fieldPath(path, "match"), step.match ?? "all",
    (editor.catalogue.matches ?? ["all", "any"]).map((name) => [name, name === "all" ? "all rules hold" : "any rule holds"]), (next) => {
      step.match = next;
      editor.changedForm();
    });
  const rulesPath = fieldPath(path, "rules");
  const rows = rules.map((rule, index) => ruleForm(editor, rules, index, indexPath(rulesPath, index), operators));
  const add = smallButton("Add rule", `Add a rule to ${step.name}`, `${rulesPath}#add`, () => {
    rules.push({ field: "", operator: "eq", value: "" });
    editor.structure(`${indexPath(rulesPath, rules.length - 1)}.field`);
  });
  return h("div", {},
    h("div", { class: "fields" }, labelled("Match", match)),
    h("div", { class: "rules", dataset: { path: rulesPath } }, h("div", { class: "problem-slot" }), rows, h("p", {}, add)),
    h("div", { class: "branch" }, h("h3", {}, "Then"), blockForm(editor, step, "then", fieldPath(path, "then"), `then of ${step.name}`)),
    h("div", { class: "branch" }, h("h3", {}, "Else"), blockForm(editor, step, "else", fieldPath(path, "else"), `else of ${step.name}`)));
}

/** One rule: field, operator, value (hidden when the operator takes none). */
function ruleForm(editor, rules, index, path, operators) {
  const rule = rules[index];
  const fieldKey = rule.field === undefined && rule.fieldId !== undefined ? "fieldId" : "field";
  const takesValue = operators.find((entry) => entry.operator === rule.operator)?.takesValue ?? true;
  const operator = selectInput(fieldPath(path, "operator"), rule.operator, operators.map((entry) => [entry.operator, entry.operator]), (next) => {
    rule.operator = next;
    const takes = operators.find((entry) => entry.operator === next)?.takesValue ?? true;
    if (!takes) delete rule.value;
    else if (rule.value === undefined) rule.value = "";
    editor.structure(fieldPath(path, "operator"));
  });
  const number = index + 1;
  return h("div", { class: "rule fields", dataset: { path } },
    h("div", { class: "problem-slot" }),
    keyField(editor, `Rule ${number}: field`, rule, fieldKey, fieldPath(path, fieldKey), "text", { placeholder: "ticket.type" }),
    labelled(`Rule ${number}: operator`, operator),
    takesValue ? keyField(editor, `Rule ${number}: value`, rule, "value", fieldPath(path, "value"), "json") : null,
    h("div", { class: "rule-buttons" }, itemButtons(editor, rules, index, path, `rule ${number}`)));
}

/** A forEach: its items, its variable, its body. */
function forEachForm(editor, step, path) {
  return h("div", {},
    h("div", { class: "fields" },
      keyField(editor, "Items (a list, or one {{name}})", step, "items", fieldPath(path, "items"), "json", { placeholder: "{{_body.lines}}" }),
      keyField(editor, "Variable (as)", step, "as", fieldPath(path, "as"), "text", { placeholder: "line" })),
    h("div", { class: "branch" }, h("h3", {}, "Each"), blockForm(editor, step, "steps", fieldPath(path, "steps"), `the body of ${step.name}`)));
}

// ---- problems at their fields ----

/** The element of `root` for `path`: its control, else the nearest enclosing part that has one. */
function targetOf(root, path) {
  for (let at = path; at; at = parentPath(at)) {
    const found = root.querySelector(`[data-path="${CSS.escape(at)}"]`);
    if (found) return found;
  }
  return null;
}

/** Say `problem` at its control in `root`: mark it and put the message under it. */
function markAt(root, problem) {
  const target = targetOf(root, problem.path);
  if (!target) return;
  const isControl = target.matches("input, select, textarea");
  const message = h("p", { class: problem.warning ? "field-problem warning" : "field-problem", id: controlId() },
    problem.path === target.dataset.path ? "" : h("code", {}, problem.path.slice(target.dataset.path.length).replace(/^\./, ""), " "),
    problem.warning ? `warning: ${problem.message}` : problem.message);
  if (!problem.warning) {
    target.classList.add("invalid");
    if (isControl) target.setAttribute("aria-invalid", "true");
  }
  if (isControl) {
    const described = [target.getAttribute("aria-describedby"), message.id].filter(Boolean).join(" ");
    target.setAttribute("aria-describedby", described);
    (target.closest(".form-field, td") ?? target.parentElement).append(message);
  } else {
    const slot = target.querySelector(":scope > .problem-slot, :scope > fieldset > .problem-slot, :scope > td > .problem-slot");
    (slot ?? target).append(message);
  }
}

/** Clear every mark of `root`. */
function clearMarks(root) {
  for (const message of root.querySelectorAll(".field-problem")) message.remove();
  for (const marked of root.querySelectorAll(".invalid, [aria-describedby]")) {
    marked.classList.remove("invalid");
    marked.removeAttribute("aria-invalid");
    marked.removeAttribute("aria-describedby");
  }
}

// ---- the editor ----

/** The editor view of automation `id` (`"new"` for a new one). */
export function automationEditor(ctx, id) {
  const isNew = id === "new";
  const draftKey = DRAFT_KEY + id;
  let text;
  let timer = null;
  let checkGeneration = 0;
  const problems = h("ul", { id: "problems", class: "problems" });
  const checked = h("p", { id: "check-status", class: "status", role: "status" });
  const scheduleInfo = h("div", { id: "schedule-next" });
  const status = h("p", { class: "status", role: "status", id: "save-status" });
  const versions = h("div", { id: "versions" });
  const diff = h("div", { id: "diff" });
  const title = h("h1", { tabindex: "-1" }, isNew ? "New automation" : "Edit automation");
  const formRoot = h("div", { id: "form", class: "automation-form" });
  const formNote = h("p", { id: "form-status", class: "status", role: "status" });
  const panes = h("div", { class: "editor-panes" });
  const tester = testPanel({
    definition: () => {
      try {
        const parsed = JSON.parse(text.value);
        return parsed && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : null;
      } catch {
        return null;
      }
    },
    example: exampleBody,
    automationId: isNew ? null : id,
  });

  /** What the form and the marks need; the form's builders call back through it. */
  const editor = {
    model: {},
    catalogue: null,
    /** The trigger of each type last left, so switching back restores it. */
    remembered: {},
    /** The answer's problems and warnings, and the fields whose text does not parse. */
    serverProblems: [],
    localProblems: new Map(),
    schedule: null,
    example: null,
    scheduleBeside: null,
    /** A value of the form changed: write the JSON again. */
    changedForm() {
      writeJson();
    },
    /** The shape changed (a step added, moved, an op switched): write the JSON, redraw, focus `focusKey`. */
    structure(focusKey) {
      // The redraw shows the model's values, so no field keeps text that did not parse.
      this.localProblems.clear();
      writeJson();
      renderForm(focusKey);
    },
    /** `object[key]` from typed `text` of `kind`; a value that does not parse is said at `path`. */
    setValue(object, key, typed, kind, path) {
      const read = readValue(typed, kind, object[key]);
      if (read.error) {
        this.localProblems.set(path, read.error);
        markAll();
        return;
      }
      const hadError = this.localProblems.delete(path);
      if (read.value === undefined) delete object[key];
      else object[key] = read.value;
      writeJson();
      if (hadError) markAll();
    },
    /** The schedule's describe text and next fire times, beside the cron fields. */
    showSchedule() {
      if (!this.scheduleBeside) return;
      replace(this.scheduleBeside, this.schedule ? scheduleText(this.schedule) : h("p", { class: "muted" }, "The next fire times show once the automation is valid."));
    },
  };

  function say(element, message, isError = false) {
    element.textContent = message;
    element.className = isError ? "status error" : "status";
  }

  /** The names the fields of `SUGGESTED` offer: the tenant's groups, ticket types and their statuses. */
  function suggestions() {
    const types = ctx.data.ticketTypes ?? [];
    const names = {
      group: (ctx.data.groups ?? []).map((group) => group.name),
      type: types.map((type) => type.name),
      status: [...new Set(types.flatMap((type) => type.statuses ?? []))],
    };
    return Object.entries(SUGGESTED).map(([key, listId]) =>
      h("datalist", { id: listId }, names[key].map((name) => h("option", { value: name }))));
  }

  function scheduleText(schedule) {
    return [
      h("p", {}, h("strong", {}, "Schedule: "), schedule.describe),
      h("p", { class: "muted" }, "Next, in this browser's time zone:"),
      h("ol", { class: "next-fires" }, schedule.next.map((at) => h("li", {}, h("time", { datetime: at }, new Date(at).toLocaleString())))),
    ];
  }

  /** The form of `editor.model`; the focus goes to the control keyed `focusKey` when given. */
  function renderForm(focusKey) {
    editor.example = null;
    editor.scheduleBeside = null;
    if (!editor.catalogue) return;
    const model = editor.model;
    if (!Array.isArray(model.steps)) model.steps = [];
    const name = textInput("name", model.name, (typed) => {
      model.name = typed;
      writeJson();
    });
    const enabled = h("input", {
      type: "checkbox", checked: model.enabled !== false, dataset: { path: "enabled", key: "enabled" },
      onchange: (event) => {
        model.enabled = event.target.checked;
        writeJson();
      },
    });
    replace(formRoot,
      h("section", { class: "form-section" },
        h("div", { class: "fields" }, labelled("Name", name), h("div", { class: "form-field checkbox" }, h("label", {}, enabled, " Enabled")))),
      triggerForm(editor),
      h("section", { class: "form-section steps-section" }, h("h2", {}, "Steps"), blockForm(editor, model, "steps", "steps", "the automation")),
      suggestions());
    markAll();
    if (focusKey) {
      const again = formRoot.querySelector(`[data-key="${CSS.escape(focusKey)}"]`);
      const usable = again && !again.disabled ? again : formRoot.querySelector(`[data-key="${CSS.escape(focusKey.replace(/#(up|down)$/, "#remove"))}"]`);
      usable?.focus();
    }
  }

  /** Mark every problem of the last answer and of the form's own parsing at its control. */
  function markAll() {
    clearMarks(formRoot);
    for (const problem of editor.serverProblems) markAt(formRoot, problem);
    for (const [path, message] of editor.localProblems) markAt(formRoot, { path, message });
  }

  /** The form changed: the JSON follows, the draft is kept, a check is due. */
  function writeJson() {
    text.value = JSON.stringify(editor.model, null, 2);
    if (editor.example && editor.model.trigger?.type === "webhook") {
      editor.example.textContent = JSON.stringify(exampleBody(editor.model.trigger.params), null, 2);
    }
    say(formNote, "");
    changed();
  }

  /** The JSON was typed: the form follows when it parses, else stays and says so. */
  function typedJson() {
    let parsed;
    try {
      parsed = JSON.parse(text.value);
    } catch (error) {
      say(formNote, `The JSON does not parse (${error.message}); the form shows the last JSON that did.`, true);
      changed();
      return;
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      say(formNote, "The JSON is not an object; the form shows the last JSON that was.", true);
    } else {
      say(formNote, "");
      editor.model = parsed;
      editor.localProblems.clear();
      renderForm();
    }
    changed();
  }

  /** Show the JSON's text in the form (after a load, a save, a rollback). */
  function load(definitionText) {
    text.value = definitionText;
    try {
      const parsed = JSON.parse(definitionText);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) editor.model = parsed;
      say(formNote, "");
    } catch (error) {
      say(formNote, `The JSON does not parse (${error.message}); the form waits for JSON that does.`, true);
    }
    editor.localProblems.clear();
    renderForm();
    tester.refresh();
  }

  async function check() {
    const generation = ++checkGeneration;
    let definition;
    try {
      definition = JSON.parse(text.value);
    } catch (error) {
      replace(problems, h("li", {}, h("code", {}, "(the JSON)"), " ", `does not parse: ${error.message}`));
      say(checked, "The JSON does not parse.", true);
      return null;
    }
    try {
      const answer = await api("POST", "/api/automations/validate", definition);
      if (generation !== checkGeneration) return null;
      replace(problems,
        answer.problems.map((problem) => h("li", { dataset: { path: problem.path } }, h("code", {}, problem.path || "(the automation)"), " ", problem.message)),
        answer.warnings.map((warning) => h("li", { class: "warning", dataset: { path: warning.path } }, h("code", {}, warning.path), " ", `warning: ${warning.message}`)));
      say(checked, answer.valid ? (answer.warnings.length ? "Valid, with warnings." : "Valid.") : `${answer.problems.length} problem(s).`, !answer.valid);
      replace(scheduleInfo, answer.schedule ? scheduleText(answer.schedule).slice(0, 1) : null);
      editor.schedule = answer.schedule ?? null;
      editor.showSchedule();
      editor.serverProblems = [...answer.problems, ...answer.warnings.map((warning) => ({ ...warning, warning: true }))];
      markAll();
      return definition;
    } catch (error) {
      say(checked, described(error), true);
      return null;
    }
  }

  function changed() {
    sessionStorage.setItem(draftKey, text.value);
    tester.refresh();
    clearTimeout(timer);
    timer = setTimeout(check, CHECK_DELAY_MS);
  }

  async function save() {
    let definition;
    try {
      definition = JSON.parse(text.value);
    } catch (error) {
      say(status, `Not saved: the JSON does not parse (${error.message}). Your draft is kept.`, true);
      return;
    }
    say(status, "Saving…");
    try {
      const saved = isNew
        ? await api("POST", "/api/automations", definition)
        : await api("PUT", `/api/automations/${encodeURIComponent(id)}`, definition);
      sessionStorage.removeItem(draftKey);
      ctx.data.automations.set(saved.id, saved);
      say(status, `Saved as version ${saved.currentVersion}.`);
      if (isNew) {
        location.hash = `#/automations/${encodeURIComponent(saved.id)}`;
      } else {
        keepFocus(() => load(JSON.stringify(definitionOf(saved), null, 2)));
        loadVersions();
      }
    } catch (error) {
      say(status, `Not saved — ${described(error)}. Your draft is kept.`, true);
      check();
    }
  }

  /** Run `redraw`, then give the focus back to the control with the same `data-key`. */
  function keepFocus(redraw) {
    const key = document.activeElement?.dataset?.key;
    redraw();
    if (key !== undefined) formRoot.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
  }

  async function showDiff(version, against) {
    try {
      const answer = await api("GET", `/api/automations/${encodeURIComponent(id)}/versions/${version}/diff?against=${against}`);
      replace(diff, h("h3", {}, `Version ${against} → ${version}`),
        answer.changes.length === 0 ? h("p", { class: "muted" }, "No change.") :
          h("ul", { class: "changes" }, answer.changes.map((change) => h("li", { dataset: { change: change.change } },
            h("code", {}, change.path), ` ${change.change}`,
            change.before !== undefined ? [" from ", h("code", {}, JSON.stringify(change.before))] : null,
            change.after !== undefined ? [" to ", h("code", {}, JSON.stringify(change.after))] : null))));
    } catch (error) {
      replace(diff, failed(error));
    }
  }

  async function loadVersions() {
    if (isNew) return;
    try {
      const page = await api("GET", `/api/automations/${encodeURIComponent(id)}/versions`);
      const rowStatus = h("span", { class: "status", role: "status" });
      replace(versions, h("h2", {}, "Versions"),
        table(["Version", "Saved", "By", ""], page.items.map((item) => h("tr", { dataset: { version: item.version } },
          h("td", {}, String(item.version), item.current ? " (current)" : ""),
          h("td", {}, when(item.createdAt)),
          h("td", {}, item.createdBy),
          h("td", {},
            item.version > 1 ? h("button", { type: "button", onclick: () => showDiff(item.version, item.version - 1), dataset: { diff: item.version } }, "Diff with previous") : null, " ",
            item.current ? null : writeButton("Roll back to this", async () => {
              const saved = await api("POST", `/api/automations/${encodeURIComponent(id)}/rollback`, { version: item.version });
              load(JSON.stringify(definitionOf(saved), null, 2));
              sessionStorage.removeItem(draftKey);
              check();
              loadVersions();
              const message = `Rolled back: version ${item.version}'s definition is now version ${saved.currentVersion}.`;
              say(status, message);
              return message;
            }, rowStatus, { "data-rollback": item.version })))), " "),
        page.items.length > 1 ? versionPicker(page.items) : null,
        rowStatus);
    } catch (error) {
      replace(versions, failed(error));
    }
  }

  /** Any two versions compared: "from" one "to" another (newest and the one before at first). */
  function versionPicker(items) {
    const numbers = items.map((item) => item.version);
    const choice = (id, label, chosen) => {
      const control = h("select", { id, "aria-label": label },
        numbers.map((number) => h("option", { value: String(number) }, `version ${number}`)));
      control.value = String(chosen);
      return control;
    };
    const from = choice("diff-from", "Compare from version", numbers[1]);
    const to = choice("diff-to", "Compare to version", numbers[0]);
    const show = h("button", { type: "button", id: "diff-show", onclick: () => showDiff(Number(to.value), Number(from.value)) }, "Show the diff");
    return h("p", { class: "actions" }, h("label", { for: "diff-from" }, "Compare "), from, h("label", { for: "diff-to" }, " with "), to, " ", show);
  }

  /** The layout switch: Form, JSON, or both side by side (the default on a wide window). */
  function layoutSwitch() {
    const wide = window.matchMedia("(min-width: 72rem)").matches;
    let layout = sessionStorage.getItem(LAYOUT_KEY) ?? (wide ? "both" : "form");
    const buttons = LAYOUTS.map(([value, label]) => h("button", {
      type: "button", class: "tab", dataset: { layout: value }, "aria-pressed": String(value === layout),
      onclick: () => choose(value),
    }, label));
    function choose(value) {
      layout = value;
      sessionStorage.setItem(LAYOUT_KEY, value);
      panes.className = `editor-panes layout-${value}`;
      for (const button of buttons) button.setAttribute("aria-pressed", String(button.dataset.layout === value));
    }
    panes.className = `editor-panes layout-${layout}`;
    return h("div", { class: "layout-switch", role: "group", "aria-label": "Show the definition as" }, buttons);
  }

  async function loadCatalogue() {
    try {
      editor.catalogue = await api("GET", "/api/catalogue");
      renderForm();
    } catch (error) {
      replace(formRoot, failed(error), h("p", { class: "muted" }, "The form needs the catalogue; the JSON can still be edited."));
    }
  }

  return {
    title: isNew ? "New automation" : "Edit automation",
    async mount(main) {
      text = h("textarea", { id: "definition", class: "definition", rows: 24, spellcheck: "false", "aria-label": "The automation as JSON", oninput: typedJson });
      const saveButton = h("button", { type: "button", id: "save", onclick: save }, "Save");
      replace(formRoot, h("p", { class: "muted" }, "Loading the catalogue of steps…"));
      panes.append(
        h("div", { class: "form-pane" }, formNote, formRoot),
        h("div", { class: "json-pane" }, h("h2", {}, "JSON"), text));
      const root = h("div", { id: "editor" },
        h("p", {}, h("a", { href: "#/automations" }, "← Automations")), title,
        h("p", { class: "muted" }, "Edit the automation as a form or as JSON (API.md): each follows the other. It is checked as you type, problems show at their fields; Ctrl+S saves from any field. A draft stays in this tab until it is saved."),
        layoutSwitch(), checked, problems, scheduleInfo, panes,
        h("p", { class: "actions" }, saveButton, " ", status), tester.element, versions, diff);
      root.addEventListener("keydown", (event) => {
        if ((event.ctrlKey || event.metaKey) && event.key === "s") {
          event.preventDefault();
          save();
        }
      });
      main.append(root);
      const catalogue = loadCatalogue();
      const draft = sessionStorage.getItem(draftKey);
      if (draft !== null) {
        load(draft);
        say(status, "Your unsaved draft is restored.");
      } else if (isNew) {
        load(JSON.stringify(starterDefinition(), null, 2));
      } else {
        try {
          const automation = await api("GET", `/api/automations/${encodeURIComponent(id)}`);
          title.textContent = `Edit automation ${automation.name}`;
          load(JSON.stringify(definitionOf(automation), null, 2));
        } catch (error) {
          say(status, described(error), true);
        }
      }
      await catalogue;
      check();
      loadVersions();
    },
    update() {},
    unmount() {
      clearTimeout(timer);
    },
  };
}

/**
 * An automation as a token without the editor role sees it (`#/automations/<id>`): the
 * definition as JSON and its versions with their diffs, nothing that writes (no form, no
 * check as typed, no save, no test, no roll back, no draft).
 */
export function automationReader(ctx, id) {
  const title = h("h1", { tabindex: "-1" }, "Automation");
  const body = h("div", { id: "automation-read" }, h("p", { class: "muted" }, "Loading…"));
  const versions = h("section", { id: "versions" });
  const diff = h("section", { id: "diff", "aria-live": "polite" });

  async function showDiff(version, against) {
    try {
      const answer = await api("GET", `/api/automations/${encodeURIComponent(id)}/versions/${version}/diff?against=${against}`);
      replace(diff, h("h3", {}, `Version ${against} → ${version}`),
        answer.changes.length === 0 ? h("p", { class: "muted" }, "No change.") :
          h("ul", { class: "changes" }, answer.changes.map((change) => h("li", { dataset: { change: change.change } },
            h("code", {}, change.path), ` ${change.change}`,
            change.before !== undefined ? [" from ", h("code", {}, JSON.stringify(change.before))] : null,
            change.after !== undefined ? [" to ", h("code", {}, JSON.stringify(change.after))] : null))));
    } catch (error) {
      replace(diff, failed(error));
    }
  }

  async function load() {
    try {
      const automation = await api("GET", `/api/automations/${encodeURIComponent(id)}`);
      title.textContent = `Automation ${automation.name}`;
      document.title = `${automation.name} · fronta`;
      replace(body, h("pre", { class: "json definition-read", id: "definition", tabindex: "0", "aria-label": `The definition of ${automation.name} as JSON` },
        JSON.stringify(definitionOf(automation), null, 2)));
    } catch (error) {
      replace(body, failed(error));
    }
    try {
      const page = await api("GET", `/api/automations/${encodeURIComponent(id)}/versions`);
      replace(versions, h("h2", {}, "Versions"),
        table(["Version", "Saved", "By", ""], page.items.map((item) => h("tr", { dataset: { version: item.version } },
          h("td", {}, String(item.version), item.current ? " (current)" : ""),
          h("td", {}, when(item.createdAt)),
          h("td", {}, item.createdBy),
          h("td", {}, item.version > 1
            ? h("button", { type: "button", onclick: () => showDiff(item.version, item.version - 1), dataset: { diff: item.version } }, "Diff with previous")
            : null)))));
    } catch (error) {
      replace(versions, failed(error));
    }
  }

  return {
    title: "Automation",
    mount(main) {
      const role = ctx.me?.token?.role ?? "viewer";
      main.append(h("div", { id: "reader" },
        h("p", {}, h("a", { href: "#/automations" }, "← Automations")), title,
        h("p", { class: "muted", id: "read-only-note" }, `Read only: you are signed in with a ${role} token; changing an automation needs an editor token.`),
        body, versions, diff));
      load();
    },
    update() {},
  };
}
