// DOM helpers: elements are built with `h()` from text nodes and attributes, never from
// HTML strings, so data from webhooks (ticket titles, messages) can never become markup.
// Also the page's formatting of times, durations and JSON.

/** An element: `h("a", {href: "#/"}, "text", child, [more])`. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name === "class") {
      element.className = value;
    } else if (name === "dataset") {
      Object.assign(element.dataset, value);
    } else if (name === "value") {
      element.value = value;
    } else if (value === true) {
      element.setAttribute(name, "");
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

/** Append children: nodes, text, arrays of either; `null`/`false` are skipped. */
export function append(element, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/**
 * Replace the children of `element`, keeping keyboard focus on the element with the
 * same `data-key` when the focused one is replaced (live updates must not throw a
 * keyboard user back to the top of the page).
 */
export function replace(element, ...children) {
  const focused = document.activeElement;
  const key = focused && element.contains(focused) ? focused.dataset.key : undefined;
  element.replaceChildren();
  append(element, children);
  if (key !== undefined) {
    const again = element.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (again) again.focus();
  }
}

/** "3 s", "4 min", "2 h", "5 d" for a span in milliseconds. */
export function span(ms) {
  const seconds = Math.round(Math.abs(ms) / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h`;
  return `${Math.round(hours / 24)} d`;
}

/** "4 min ago" or "in 30 s" for an RFC 3339 time. */
export function relative(iso, now = Date.now()) {
  if (!iso) return "—";
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const difference = at - now;
  if (Math.abs(difference) < 1000) return "now";
  return difference < 0 ? `${span(difference)} ago` : `in ${span(difference)}`;
}

/** A `<time>` showing the relative time, the exact one on hover and to screen readers. */
export function when(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const local = new Date(iso).toLocaleString();
  return h("time", { datetime: iso, title: `${local} (${iso})`, dataset: { relative: iso } }, relative(iso));
}

/** Refresh every `<time data-relative>` on the page (called once a second). */
export function tickTimes() {
  const now = Date.now();
  for (const time of document.querySelectorAll("time[data-relative]")) {
    time.textContent = relative(time.dataset.relative, now);
  }
}

/** The time between two RFC 3339 times, or "—". */
export function between(from, to) {
  if (!from || !to) return "—";
  const ms = Date.parse(to) - Date.parse(from);
  if (Number.isNaN(ms)) return "—";
  return ms < 1000 ? `${ms} ms` : span(ms);
}

/** Pretty JSON in a `<pre>`. */
export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

/** A status badge: `<span class="badge status-failed">failed</span>`. */
export function badge(text, kind = text) {
  return h("span", { class: `badge status-${String(kind).replace(/[^a-z-]/gi, "")}` }, text);
}

/** A `<label>` with a `<select>` of `options` (`[value, text]`); `""` is "any". */
export function select(label, name, value, options, onChange) {
  const id = `filter-${name}`;
  return h("label", { for: id }, `${label} `,
    h("select", { id, name, dataset: { key: id }, onchange: (event) => onChange(event.target.value) },
      options.map(([optionValue, text]) =>
        h("option", { value: optionValue, selected: optionValue === value }, text))));
}
