// The JSON API of API.md, as the page calls it: every call carries
// `Authorization: Bearer <token>` (never a token in a URL), answers its JSON or throws an
// `ApiFailure` that says what failed in words a person can act on.
//
// The token lives in `sessionStorage`: it is gone when the tab closes, and other tabs
// do not share it.

const TOKEN_KEY = "fronta.token";
const KIND_KEY = "fronta.kind";

/** The signed-in session: the token and whether it is a tenant's or the admin's. */
export const session = {
  get token() {
    return sessionStorage.getItem(TOKEN_KEY);
  },
  /** `"tenant"` or `"admin"`. */
  get kind() {
    return sessionStorage.getItem(KIND_KEY);
  },
  save(token, kind) {
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(KIND_KEY, kind);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(KIND_KEY);
  },
};

/** A call that did not succeed: the HTTP status (0: no answer), the API's error code and message. */
export class ApiFailure extends Error {
  constructor(method, path, status, code, message, retryAfter, error = {}) {
    super(message);
    this.method = method;
    this.path = path;
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
    /** A 403 `forbidden`: the role the call needs and the token's own. */
    this.needed = error?.needed;
    this.role = error?.role;
  }

  /**
   * "GET /api/runs failed: 503 unavailable — the database did not answer"; a refusal for
   * the token's role says which role it needs ("Not allowed: … needs an editor token").
   */
  describe() {
    const path = this.path.split("?")[0];
    if (this.code === "forbidden") return forbiddenText(this.needed, this.role, `${this.method} ${path}`);
    const what = this.status === 0 ? "no answer" : `${this.status} ${this.code}`;
    const wait = this.retryAfter ? ` (retry after ${this.retryAfter} s)` : "";
    return `${this.method} ${path} failed: ${what} — ${this.message}${wait}`;
  }
}

/** What a 403 `forbidden` says to a person: what was refused, the role it needs, the token's. */
export function forbiddenText(needed, role, what = "This") {
  const article = (name) => (/^[aeiou]/.test(name ?? "") ? "an" : "a");
  if (!needed) return `${what} was refused (403): this token's role does not allow it.`;
  return `Not allowed: ${what} needs ${article(needed)} ${needed} token (or higher); you are signed in with ${article(role)} ${role ?? "other"} token. Ask an admin of the tenant for a token with that role.`;
}

/** Listeners told about every 401 (the token was refused: the page signs out). */
const unauthorizedListeners = [];
export function onUnauthorized(listener) {
  unauthorizedListeners.push(listener);
}

/**
 * Call the API. `token` defaults to the session's (sign-in passes the one it checks).
 * Resolves to the answer's JSON (`null` for an empty body).
 */
export async function api(method, path, body, { token = session.token, quiet401 = false } = {}) {
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiFailure(method, path, 0, "network", `the server did not answer (${error.message})`);
  }
  const text = await response.text();
  let answer = null;
  try {
    answer = text ? JSON.parse(text) : null;
  } catch {
    answer = null;
  }
  if (!response.ok) {
    const error = answer?.error;
    const failure = new ApiFailure(
      method,
      path,
      response.status,
      error?.code ?? `http_${response.status}`,
      error?.message ?? (text.slice(0, 200) || response.statusText),
      response.headers.get("Retry-After"),
      error,
    );
    if (response.status === 401 && !quiet401) unauthorizedListeners.forEach((listener) => listener(failure));
    throw failure;
  }
  return answer;
}

/** `path` with `params` added to its query (empty values left out). */
export function withQuery(path, params) {
  const [base, query] = path.split("?");
  const search = new URLSearchParams(query ?? "");
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, value);
  }
  const text = search.toString();
  return text ? `${base}?${text}` : base;
}

/**
 * Every item of a paged list (docs/api-notes.md: follow `nextCursor` until `null`), at
 * most `max`. Resolves to `{items, truncated}`: `truncated` says more were left unread.
 */
export async function listAll(path, { max = 5000, pageSize = 500 } = {}) {
  const items = [];
  let cursor = null;
  for (;;) {
    const page = await api("GET", withQuery(path, { limit: pageSize, cursor }));
    items.push(...page.items);
    cursor = page.nextCursor;
    if (!cursor) return { items, truncated: false };
    if (items.length >= max) return { items: items.slice(0, max), truncated: true };
  }
}
