// Calls to the host's API with the console's key, and server-sent events read through fetch (EventSource
// cannot send an Authorization header).

const KEY_ITEM = "switchyard-console-key";

export class AuthError extends Error {}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export function storeKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

// The page's own location decides the API's: /ui/ sits at the host's root (or under a proxy's root path).
export function apiUrl(path) {
  return new URL(`..${path}`, document.baseURI.replace(/\/ui\/.*$/, "/ui/")).toString();
}

function headers(extra = {}) {
  const key = storedKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function failure(response) {
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    message = body?.error?.message || body?.detail || message;
  } catch {
    // not JSON: the status line says enough
  }
  if (response.status === 401) return new AuthError(message);
  return new ApiError(response.status, message);
}

export async function getJson(path, { auth = true } = {}) {
  const response = await fetch(apiUrl(path), { headers: auth ? headers() : {} });
  if (!response.ok) throw await failure(response);
  return response.json();
}

export async function postJson(path, body) {
  const response = await fetch(apiUrl(path), {
    method: "POST",
    headers: headers({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  return response.json();
}

// Each `data:` payload of an event stream, parsed as JSON, until the stream ends, `[DONE]` comes or `signal`
// aborts. `body` makes it a POST (the chat stream); without it a GET (the live snapshots).
export async function streamEvents(path, { body, signal, onEvent }) {
  const init = body === undefined
    ? { headers: headers({ Accept: "text/event-stream" }), signal }
    : {
        method: "POST",
        headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
        body: JSON.stringify(body),
        signal,
      };
  const response = await fetch(apiUrl(path), init);
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split("\n").filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      onEvent(JSON.parse(data));
    }
  }
}
