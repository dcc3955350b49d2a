// `GET /api/stream` read with `fetch()` and a `ReadableStream`: an `EventSource` cannot
// send `Authorization`, and the token must not go into a URL (it would reach logs).
//
// States of a connection:
//
//   connecting ──(200, headers)──► live ──(stream ends / network error)──► waiting
//       ▲                                                                    │
//       └──────────────────── after the backoff (1 s, 2 s, … 30 s) ──────────┘
//   any ──(401)──► stopped (the token was refused)        any ──stop()──► stopped
//
// The server records what exists when a stream opens and tells only what changes after
// (no replay): the page reloads its data each time the connection becomes live, so
// nothing that happened while it was away is missed.

/** The first wait before reconnecting, doubled per failure up to `RECONNECT_MAX_MS`. */
export const RECONNECT_BASE_MS = 1000;
export const RECONNECT_MAX_MS = 30000;

/**
 * An incremental Server-Sent Events parser (the WHATWG event-stream format): feed it
 * text chunks as they arrive, split anywhere; it calls `onEvent({event, data})` per
 * complete event and `onComment(text)` per comment line.
 */
export class SseParser {
  constructor(onEvent, onComment = () => {}) {
    this.onEvent = onEvent;
    this.onComment = onComment;
    this.buffer = "";
    this.event = "";
    this.data = [];
  }

  push(chunk) {
    this.buffer += chunk;
    for (;;) {
      const end = this.buffer.search(/\r\n|\r|\n/);
      if (end < 0) return;
      // A lone "\r" at the end may be the first half of "\r\n": wait for the next chunk.
      if (this.buffer[end] === "\r" && end === this.buffer.length - 1) return;
      const width = this.buffer.startsWith("\r\n", end) ? 2 : 1;
      const line = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + width);
      this.line(line);
    }
  }

  line(line) {
    if (line === "") {
      if (this.data.length > 0) {
        this.onEvent({ event: this.event || "message", data: this.data.join("\n") });
      }
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) {
      this.onComment(line.slice(1).trim());
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    // `id` and `retry` are not used by this server; unknown fields are ignored.
  }
}

/**
 * Keep a stream open with `token` until `stop()`. `onEvent(name, data)` gets each event
 * with its JSON parsed; `onState({state, error, retryAt, note})` each change of state.
 */
export function openStream(token, onEvent, onState) {
  let stopped = false;
  let controller = null;
  let failures = 0;

  async function connect() {
    while (!stopped) {
      controller = new AbortController();
      onState({ state: "connecting" });
      try {
        const response = await fetch("/api/stream", {
          headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" },
          cache: "no-store",
          credentials: "omit",
          signal: controller.signal,
        });
        if (!response.ok) {
          const answer = await response.json().catch(() => null);
          const message = answer?.error?.message ?? response.statusText;
          if (response.status === 401) {
            stopped = true;
            onState({ state: "stopped", error: `401 ${answer?.error?.code ?? "unauthorized"} — ${message}`, unauthorized: true });
            return;
          }
          throw new Error(`${response.status} ${answer?.error?.code ?? ""} — ${message}`);
        }
        failures = 0;
        onState({ state: "live" });
        const parser = new SseParser(
          ({ event, data }) => {
            let parsed;
            try {
              parsed = JSON.parse(data);
            } catch {
              onState({ state: "live", note: `an event that is not JSON was skipped (${event})` });
              return;
            }
            onEvent(event, parsed);
          },
          (comment) => {
            if (comment.startsWith("lagged")) onState({ state: "live", note: comment, lagged: true });
          },
        );
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          parser.push(value);
        }
        throw new Error("the server ended the stream");
      } catch (error) {
        if (stopped) return;
        const wait = Math.min(RECONNECT_MAX_MS, RECONNECT_BASE_MS * 2 ** failures);
        failures += 1;
        onState({ state: "waiting", error: error.message, retryAt: Date.now() + wait });
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  connect();
  return {
    stop() {
      stopped = true;
      controller?.abort();
    },
  };
}
