// The public HTTP API, with the bearer token. The token lives in this tab's
// sessionStorage only and goes out in the Authorization header only: never
// in a URL, which would leak it into logs and history.

const TOKEN_KEY = 'svc.token';

// base is the API root: the page lives at <root>/dashboard/.
export const base = location.pathname.replace(/dashboard\/.*$/, '');

export function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }
export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
}

// APIError carries the HTTP status and the problem+json detail.
export class APIError extends Error {
  constructor(status, problem, path) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
    this.path = path;
  }
}

const listeners = new Set();
// onUnauthorized(fn): fn(err) runs whenever a call is answered 401.
export function onUnauthorized(fn) { listeners.add(fn); }

function headers(extra) {
  const h = { Accept: 'application/json', ...extra };
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function problemOf(res) {
  try { return await res.json(); } catch { return null; }
}

// call fetches path (relative to the API root) and returns the parsed JSON
// body, or null for an empty answer; a non-2xx status throws an APIError.
export async function call(path, { method = 'GET', body, signal } = {}) {
  const init = { method, headers: headers(body !== undefined ? { 'Content-Type': 'application/json' } : {}), signal, cache: 'no-store' };
  if (body !== undefined) init.body = JSON.stringify(body);
  const res = await fetch(base + path.replace(/^\//, ''), init);
  if (!res.ok) {
    const err = new APIError(res.status, await problemOf(res), path);
    if (res.status === 401) listeners.forEach((fn) => fn(err));
    throw err;
  }
  if (res.status === 204) return null;
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

// stream reads a text/event-stream with fetch, so that the Authorization
// header can be sent (EventSource cannot send one). It reconnects with
// backoff, resuming after the last id it saw, until signal aborts or
// onEvent returns 'stop'. handlers: onEvent({id, event, data}),
// onState('connected' | 'reconnecting' | 'unauthorized' | 'ended', err).
// With once, it does not reconnect after the server ends the stream (run
// streams end after their terminal event).
export async function stream(path, { signal, onEvent, onState = () => {}, once = false }) {
  let lastID = '';
  let delay = 500;
  while (!signal.aborted) {
    try {
      const h = headers({ Accept: 'text/event-stream' });
      if (lastID) h['Last-Event-ID'] = lastID;
      const res = await fetch(base + path.replace(/^\//, ''), { headers: h, signal, cache: 'no-store' });
      if (res.status === 401) {
        const err = new APIError(401, await problemOf(res), path);
        listeners.forEach((fn) => fn(err));
        onState('unauthorized', err);
        return;
      }
      if (!res.ok) throw new APIError(res.status, await problemOf(res), path);
      onState('connected');
      delay = 500;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      let frame = { id: '', event: 'message', data: [] };
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') {
            if (frame.data.length) {
              if (frame.id) lastID = frame.id;
              let data;
              try { data = JSON.parse(frame.data.join('\n')); } catch { data = frame.data.join('\n'); }
              if (onEvent({ id: frame.id, event: frame.event, data }) === 'stop') { reader.cancel(); return; }
            }
            frame = { id: '', event: 'message', data: [] };
            continue;
          }
          if (line.startsWith(':')) continue; // heartbeat
          const c = line.indexOf(':');
          const field = c < 0 ? line : line.slice(0, c);
          let val = c < 0 ? '' : line.slice(c + 1);
          if (val.startsWith(' ')) val = val.slice(1);
          if (field === 'data') frame.data.push(val);
          else if (field === 'id') frame.id = val;
          else if (field === 'event') frame.event = val;
        }
      }
      if (once) { onState('ended'); return; }
    } catch (err) {
      if (signal.aborted) return;
      if (once && err instanceof APIError && err.status < 500) { onState('ended', err); return; }
      onState('reconnecting', err);
    }
    if (signal.aborted) return;
    onState('reconnecting');
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 10000);
  }
}
