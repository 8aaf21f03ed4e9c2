// The dashboard: views over the public HTTP API, fed live by
// GET /events/stream. Memory stays bounded however busy the server is:
// at most MAX_EVENTS events, MAX_TRACES traces and MAX_RESULTS results.

import { call, stream, token, setToken, onUnauthorized, APIError } from './api.js';
import { bars, line, graph, fmtNum } from './svg.js';

const MAX_EVENTS = 2000;   // events kept for the feed and the trace index
const MAX_TRACES = 2000;   // traces kept (task → trace links, token sums)
const MAX_RESULTS = 1000;  // finished runs' results (tokens, cost, trace)
const FEED_ROWS = 100;     // events drawn in the feed
const LIVE_ROWS = 100;     // runs listed live (newest first)
const MAX_BURN = 120;      // burn-rate samples (10 minutes at 5 s)

// POLL_MS is how often the page fetches /runtime/stats and /runs besides
// the live stream: 5 s, or `?poll=SECONDS` in the page's address (0.5 to
// 60), for a server watched closely (the browser tests use 1 s rather than
// wait up to 5 s for each change). Anything else keeps 5 s.
const POLL_MS = (() => {
  const v = new URLSearchParams(location.search).get('poll');
  const s = v === null || v.trim() === '' ? NaN : Number(v);
  return Number.isFinite(s) && s >= 0.5 && s <= 60 ? Math.round(s * 1000) : 5000;
})();

const $ = (s) => document.querySelector(s);
const state = {
  events: [],            // ring of RuntimeEvents, oldest first
  traces: new Map(),     // trace_id → {name, start, end, tokens, failed}
  taskTrace: new Map(),  // task_id → trace_id
  runs: new Map(),       // run_id → RunSummary (newest page of GET /runs)
  results: new Map(),    // run_id → {tokens, cost, trace, target}
  burn: [],
  eventCount: 0,
  drawer: null,          // {id, abort}
};

// perf records how long drawing the live view takes, and how long an
// event waits from arrival until the frame that shows it: the browser
// test reads window.__svcPerf.
const perf = {
  renders: [], lags: [],
  pollMs: POLL_MS,
  // kept reports what the page holds, for the test of the bounded window.
  kept: () => ({ events: state.events.length, traces: state.traces.size, tasks: state.taskTrace.size, results: state.results.size, seen: state.eventCount }),
};
window.__svcPerf = perf;
function sample(list, v) { list.push(v); if (list.length > 1000) list.shift(); }

// ---------- helpers ----------

function h(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== undefined && k !== null) e.append(k instanceof Node ? k : String(k));
  return e;
}
function short(id) { return id ? String(id).slice(-8) : '–'; }
function ts(t) { return t ? new Date(t).toLocaleTimeString() : '–'; }
function dur(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return Math.floor(ms / 60000) + 'm ' + Math.round((ms % 60000) / 1000) + 's';
}
// fill puts rows in tbody. A row with a key (data-run, data-key) that is
// already there is kept, and only the cells that changed get the new
// content: the live tables refresh every second, and a row replaced
// between the press and the release of the mouse button would lose the
// click (the browser fires none when they land on different elements).
function fill(tbody, rows, empty, cols) {
  if (!rows.length) rows = [h('tr', {}, h('td', { colspan: cols, class: 'muted' }, empty))];
  const keyOf = (tr) => tr.dataset.run || tr.dataset.key || '';
  const old = new Map();
  for (const tr of tbody.children) if (keyOf(tr)) old.set(keyOf(tr), tr);
  const out = rows.map((tr) => {
    const have = keyOf(tr) && old.get(keyOf(tr));
    if (!have || have.cells.length !== tr.cells.length) return tr;
    old.delete(keyOf(tr)); // a key twice in rows: the second is new
    have.className = tr.className;
    const cells = [...tr.cells];
    cells.forEach((td, i) => {
      const was = have.cells[i];
      if (was.outerHTML === td.outerHTML) return;
      for (const a of [...was.attributes]) if (!td.hasAttribute(a.name)) was.removeAttribute(a.name);
      for (const a of td.attributes) was.setAttribute(a.name, a.value);
      was.replaceChildren(...td.childNodes);
    });
    return have;
  });
  // In order, moving only what is out of place; what is left is dropped.
  out.forEach((tr, i) => { if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null); });
  while (tbody.children.length > out.length) tbody.lastElementChild.remove();
}
function progressBar(p) {
  if (!p || !p.total) return h('span', { class: 'muted' }, '–');
  const bar = h('span', { class: 'progress', title: `${p.completed} completed, ${p.failed} failed, ${p.running} running of ${p.total}` });
  for (const [k, cls] of [['completed', 'ok'], ['failed', 'bad'], ['running', 'run']]) {
    const s = h('span', { class: cls });
    s.style.width = (100 * p[k]) / p.total + '%';
    bar.append(s);
  }
  return h('span', { class: 'progress-cell' }, bar, h('span', { class: 'progress-text' }, `${p.completed}✓ ${p.failed}✗ ${p.running}▸ /${p.total}`));
}
function stateBadge(s) { return h('span', { class: 'badge s-' + s }, s); }

// banner shows a message for the whole page until cleared.
function banner(msg, kind = 'error') {
  const b = $('#banner');
  if (!msg) { b.hidden = true; return; }
  b.textContent = msg;
  b.dataset.kind = kind;
  b.hidden = false;
}

// ---------- token ----------

let asking = null;
function askToken(why) {
  if (asking) return asking;
  const dlg = $('#token-dialog');
  $('#token-why').textContent = why;
  $('#token-input').value = '';
  asking = new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      asking = null;
      if (dlg.returnValue === 'ok' && $('#token-input').value.trim()) {
        setToken($('#token-input').value.trim());
        resolve(true);
      } else resolve(false);
    }, { once: true });
  });
  dlg.showModal();
  return asking;
}
let unauthorizedShown = false;
onUnauthorized((err) => {
  const wrong = token() !== '';
  const msg = wrong
    ? 'The bearer token was refused (401: ' + err.message + '). Enter the token the server was started with (--auth-token).'
    : 'This server needs a bearer token (401: ' + err.message + '). Enter it to continue.';
  banner(msg);
  $('#conn').dataset.state = 'unauthorized';
  $('#conn').textContent = wrong ? 'wrong token' : 'token needed';
  if (unauthorizedShown) return;
  unauthorizedShown = true;
  askToken(msg).then((ok) => { unauthorizedShown = false; if (ok) restart(); });
});

// ---------- live events ----------

// seed fills the feed with the newest stored events (GET /events), so the
// page does not open empty; the live stream follows. Without an event
// store (404) the feed starts with the stream.
let seeding = null;
function seed() {
  // One seed per page, asked again only after a failure (no token yet).
  seeding ||= call('events?limit=' + FEED_ROWS)
    .then((evs) => evs.reverse().forEach(ingest))
    .catch(() => { seeding = null; }); // no event store, or no token yet: the stream still comes
  return seeding;
}

let liveAbort = null;
async function connect() {
  await seed();
  if (liveAbort) liveAbort.abort();
  liveAbort = new AbortController();
  const conn = $('#conn');
  stream('events/stream', {
    signal: liveAbort.signal,
    onState: (s, err) => {
      if (s === 'unauthorized') return;
      conn.dataset.state = s;
      conn.textContent = s === 'connected' ? 'connected' : s === 'reconnecting' ? 'reconnecting…' : s;
      if (s === 'connected') banner('');
      if (s === 'reconnecting' && err instanceof APIError && err.status === 404) {
        banner('This server has no live event stream (GET /events/stream answered 404).', 'warn');
      }
    },
    onEvent: ({ data }) => { if (data && data.event_type) ingest(data); },
  });
}

let pendingSince = 0;
function ingest(ev) {
  const now = performance.now();
  if (!pendingSince) pendingSince = now;
  state.eventCount++;
  state.events.push(ev);
  if (state.events.length > MAX_EVENTS) state.events.splice(0, state.events.length - MAX_EVENTS);
  if (ev.trace_id) {
    let t = state.traces.get(ev.trace_id);
    if (!t) {
      t = { name: ev.agent_name, start: ev.timestamp, end: null, tokens: 0, failed: 0 };
      state.traces.set(ev.trace_id, t);
      if (state.traces.size > MAX_TRACES) state.traces.delete(state.traces.keys().next().value);
    }
    const p = ev.payload || {};
    if (ev.event_type === 'group_started') t.name = p.group_name || t.name;
    if (ev.event_type === 'agent_completed') t.tokens += p.tokens_used || 0;
    if (ev.event_type === 'agent_failed') t.failed++;
    t.end = ev.timestamp;
  }
  if (ev.task_id && ev.trace_id) {
    state.taskTrace.set(ev.task_id, ev.trace_id);
    if (state.taskTrace.size > MAX_TRACES * 4) state.taskTrace.delete(state.taskTrace.keys().next().value);
  }
  feedNew.push(ev);
  if (feedNew.length > FEED_ROWS) feedNew.shift();
  scheduleRender();
  scheduleRuns();
}

// Runs are re-read at most once a second while events flow, and every
// five seconds regardless: GET /runs is the truth about state and progress.
let runsTimer = null, runsBusy = false, lastRuns = 0;
function scheduleRuns() {
  if (runsTimer) return;
  runsTimer = setTimeout(() => { runsTimer = null; refreshRuns(); }, Math.max(0, 1000 - (Date.now() - lastRuns)));
}
async function refreshRuns() {
  if (runsBusy) return;
  runsBusy = true;
  lastRuns = Date.now();
  try {
    const page = await call(`runs?limit=${LIVE_ROWS}&type=submitted`);
    state.runs = new Map(page.runs.map((r) => [r.run_id, r]));
    fetchResults(page.runs);
    redraw('runs');
    refreshWaiting();
  } catch (err) {
    if (err instanceof APIError && err.status === 404) $('#live-table tbody').replaceChildren(h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'This server lists no submitted runs (GET /runs answered 404).')));
  } finally { runsBusy = false; }
}
// fetchResults reads the results of finished runs, a few at a time, for
// their tokens, cost and trace id.
let resultsInFlight = 0;
function fetchResults(runs) {
  for (const r of runs) {
    if (resultsInFlight >= 6) return;
    if (r.state !== 'completed' && r.state !== 'failed') continue;
    if (state.results.has(r.run_id)) continue;
    state.results.set(r.run_id, null);
    resultsInFlight++;
    call(`runs/${encodeURIComponent(r.run_id)}/result`).then((res) => {
      const m = (res && res.metadata) || {};
      state.results.set(r.run_id, { tokens: m.tokens_used, cost: m.cost_usd, trace: m.trace_id, target: r.target, model: m.model || (res && res.group ? 'several (group)' : 'unknown') });
      if (state.results.size > MAX_RESULTS) state.results.delete(state.results.keys().next().value);
      redraw('runs');
    }).catch(() => {}).finally(() => { resultsInFlight--; });
  }
}

// A frame redraws only what changed: the runs table when GET /runs or a
// result answered, and the feed by the events that arrived since the last
// frame; redraw(what) asks for a whole part to be drawn again.
const dirty = { runs: true, feed: true };
let feedNew = [];
function redraw(...what) { for (const w of what) dirty[w] = true; scheduleRender(); }

let frame = 0;
function scheduleRender() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    if (currentView() !== 'live') { pendingSince = 0; feedNew = []; dirty.runs = dirty.feed = true; return; }
    const t0 = performance.now();
    renderLive();
    const t1 = performance.now();
    sample(perf.renders, t1 - t0);
    if (pendingSince) { const since = pendingSince; pendingSince = 0; requestAnimationFrame(() => sample(perf.lags, performance.now() - since)); }
  });
}

function renderLive() {
  const runs = [...state.runs.values()];
  const fs = $('#live-state').value, fa = $('#live-agent').value.trim().toLowerCase();
  if (dirty.runs) { dirty.runs = false; renderRuns(runs, fs, fa); }
  const running = runs.filter((r) => r.state === 'running').length;
  const failed = runs.filter((r) => r.state === 'failed').length;
  $('#live-meters').replaceChildren(
    meter('Events seen', fmtNum(state.eventCount)),
    meter('Runs listed', runs.length),
    meter('Running', running),
    meter('Failed', failed, failed ? 'bad' : ''),
    meter('Traces in window', state.traces.size));
  renderFeed(fa);
}

function renderRuns(runs, fs, fa) {
  const now = Date.now();
  const rows = runs.filter((r) => (!fs || r.state === fs) && (!fa || r.target.toLowerCase().includes(fa))).map((r) => {
    const res = state.results.get(r.run_id);
    const terminal = ['completed', 'failed', 'cancelled'].includes(r.state);
    const ms = (terminal ? Date.parse(r.updated_at) : now) - Date.parse(r.created_at);
    return h('tr', { class: 'clickable', 'data-run': r.run_id, tabindex: 0, onclick: () => openRun(r.run_id), onkeydown: (e) => { if (e.key === 'Enter') openRun(r.run_id); } },
      h('td', { class: 'mono', title: r.run_id }, short(r.run_id)),
      h('td', {}, r.target, ' ', h('small', { class: 'muted' }, r.kind)),
      h('td', {}, stateBadge(r.state)),
      h('td', {}, progressBar(r.progress)),
      h('td', { class: 'num' }, dur(ms)),
      h('td', { class: 'num' }, res && res.tokens !== undefined ? fmtNum(res.tokens) : '–'),
      h('td', { class: 'num' }, res ? usd(res.cost) : '–'),
      h('td', {}, ts(r.created_at)));
  });
  fill($('#live-table tbody'), rows, state.runs.size ? 'No run matches the filter.' : 'No submitted runs yet: POST /submit, or `svc submit`.', 8);
}

// renderFeed adds the rows of the events that arrived since the last frame
// at the top and drops the oldest beyond FEED_ROWS; the whole feed is drawn
// again only when asked (a new filter, back to this view).
// Worker heartbeats (one per worker every few seconds, more while it
// works) are hidden unless asked for: they would push the runs' events out.
function renderFeed(fa) {
  const beats = $('#feed-heartbeats').checked;
  const match = (e) => (beats || e.event_type !== 'worker_heartbeat') && (!fa || (e.agent_name || '').toLowerCase().includes(fa));
  const tbody = $('#feed-table tbody');
  if (dirty.feed) {
    dirty.feed = false;
    feedNew = [];
    const evs = state.events.filter(match).slice(-FEED_ROWS).reverse();
    fill(tbody, evs.map(feedRow), 'Waiting for events…', 5);
  } else if (feedNew.length) {
    const evs = feedNew.filter(match);
    feedNew = [];
    if (evs.length) {
      if (tbody.querySelector('td[colspan]')) tbody.replaceChildren();
      tbody.prepend(...evs.reverse().map(feedRow));
      while (tbody.rows.length > FEED_ROWS) tbody.lastElementChild.remove();
    }
  }
  $('#feed-count').textContent = `(latest ${tbody.querySelector('td[colspan]') ? 0 : tbody.rows.length} of the ${state.events.length} kept)`;
}
function feedRow(e) {
  return h('tr', { class: e.event_type.includes('fail') || e.event_type.includes('exceeded') ? 'bad-row' : '' },
    h('td', {}, ts(e.timestamp)),
    h('td', {}, e.event_type),
    h('td', {}, e.agent_name || '–'),
    h('td', { class: 'mono' }, e.trace_id ? h('a', { href: '#tree/' + encodeURIComponent(e.trace_id) }, short(e.trace_id)) : '–'),
    h('td', { class: 'detail' }, detail(e)));
}
function detail(e) {
  const p = e.payload || {};
  return Object.entries(p).filter(([k]) => k !== 'trust_level').map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ');
}
function meter(label, value, cls = '') {
  return h('div', { class: 'meter ' + cls }, h('div', { class: 'meter-value' }, String(value)), h('div', { class: 'meter-label' }, label));
}

// ---------- waiting runs (human in the loop) ----------

// refreshWaiting lists the runs waiting for a person, each with what it
// waits for and the controls that answer it (POST /runs/{id}/resume).
let waitingBusy = false;
async function refreshWaiting() {
  if (waitingBusy) return;
  waitingBusy = true;
  try {
    const page = await call('runs?state=waiting&limit=25');
    const box = $('#waiting-box');
    box.hidden = page.runs.length === 0;
    $('#waiting-count').textContent = page.runs.length ? String(page.runs.length) + (page.next_cursor ? '+' : '') : '';
    // A card still open is kept as it is (what was typed into it, a
    // button being pressed), never detached: the cards of runs no longer
    // waiting are removed, new ones appended. A run's status is read once,
    // when it first appears (a run that resumes leaves the list, so a new
    // wait of it is read again).
    const list = $('#waiting-list');
    const waitingNow = new Set(page.runs.map((r) => r.run_id));
    for (const el of [...list.children]) {
      if (!waitingNow.has(el.dataset.run)) el.remove();
    }
    const shown = new Set([...list.children].map((el) => el.dataset.run));
    const open = [];
    for (const r of page.runs) {
      if (shown.has(r.run_id)) continue;
      const st = await call(`runs/${encodeURIComponent(r.run_id)}/status`).catch(() => null);
      if (!st || st.state !== 'waiting') continue;
      for (const req of st.waiting || []) open.push([r, req]);
    }
    const have = new Set([...list.children].map((el) => el.dataset.run + '/' + el.dataset.request));
    for (const [r, req] of open) {
      if (!have.has(r.run_id + '/' + req.id)) list.append(requestCard(r.run_id, r.target, req, refreshWaiting));
    }
  } catch { /* an older server: no waiting runs */ } finally { waitingBusy = false; }
}

// keepOrReplace redraws el with build() only when key (what it shows)
// changed: a request card being typed into or clicked is not replaced
// under the person's hands by a refresh that shows the same requests.
function keepOrReplace(el, key, build) {
  if (el.dataset.key === key) return;
  el.dataset.key = key;
  el.replaceChildren(...build());
}

// requestCard shows one wait request with its controls: Approve and Deny
// (with a reason) for an approval, the choices or a free answer for a
// question. done runs after the server took the answer.
function requestCard(runId, target, req, done) {
  const msg = h('div', { class: 'req-msg' });
  const send = async (body, btn) => {
    btn.disabled = true;
    try {
      await call(`runs/${encodeURIComponent(runId)}/resume`, { method: 'POST', body: { request_id: req.id, ...body } });
      msg.textContent = 'sent';
      done && done();
    } catch (err) { msg.textContent = err.message; msg.className = 'req-msg bad'; btn.disabled = false; }
  };
  const head = h('div', {}, h('b', {}, req.kind === 'question' ? 'Question' : 'Approve ' + req.tool + '?'),
    ' ', h('span', { class: 'muted' }, 'run ', h('a', { href: '#', class: 'mono', onclick: (e) => { e.preventDefault(); openRun(runId); } }, short(runId)),
      ' · ', target || '', ' · agent ', req.agent),
    req.deadline ? h('div', { class: 'muted small' }, 'times out (' + (req.on_timeout || 'deny') + ') at ' + new Date(req.deadline).toLocaleString()) : '');
  const controls = [];
  if (req.kind === 'question') {
    controls.push(h('p', { class: 'req-question' }, req.question || ''));
    if (req.choices && req.choices.length) {
      for (const c of req.choices) {
        const b = h('button', { type: 'button', class: 'req-choice', 'data-choice': c }, c);
        b.addEventListener('click', () => send({ answer: c }, b));
        controls.push(b);
      }
    } else {
      const input = h('input', { type: 'text', class: 'req-answer', placeholder: 'answer (text or JSON)' });
      const b = h('button', { type: 'button', class: 'req-send' }, 'Answer');
      b.addEventListener('click', () => {
        let v = input.value;
        try { v = JSON.parse(v); } catch { /* plain text: sent as a string */ }
        send({ answer: v }, b);
      });
      controls.push(input, b);
    }
  } else {
    controls.push(h('pre', { class: 'req-args' }, JSON.stringify(req.arguments ?? {}, null, 2)));
    const reason = h('input', { type: 'text', class: 'req-reason', placeholder: 'reason (optional, told to the model)' });
    const ok = h('button', { type: 'button', class: 'req-approve' }, 'Approve');
    const no = h('button', { type: 'button', class: 'req-deny danger' }, 'Deny');
    ok.addEventListener('click', () => send({ approve: true, ...(reason.value ? { reason: reason.value } : {}) }, ok));
    no.addEventListener('click', () => send({ approve: false, ...(reason.value ? { reason: reason.value } : {}) }, no));
    controls.push(reason, ok, no);
  }
  return h('div', { class: 'request', 'data-request': req.id, 'data-run': runId }, head, ...controls, msg);
}

// ---------- drawer ----------

async function openRun(id) {
  closeDrawer();
  const abort = new AbortController();
  // trace: the trace whose tree the drawer shows, from the run's status
  // (trace_id); guessed only for a server too old to give it.
  state.drawer = { id, abort, trace: null, known: false };
  $('#drawer').hidden = false;
  $('#drawer-title').textContent = 'Run ' + short(id);
  $('#drawer-title').title = id;
  $('#drawer-timeline').replaceChildren();
  $('#drawer-result').textContent = '…';
  $('#drawer-tree').replaceChildren(h('span', { class: 'muted' }, 'waiting for the run\'s first event…'));
  $('#drawer-live').replaceChildren();
  $('#drawer-live-box').hidden = true;
  await refreshDrawer();
  const tl = $('#drawer-timeline');
  // The text each invocation (by task id) has streamed so far, shown
  // until the run's result replaces it.
  const live = new Map();
  stream(`runs/${encodeURIComponent(id)}/stream?deltas=true`, {
    signal: abort.signal, once: true,
    onEvent: ({ event, data }) => {
      if (!data || !data.type) return;
      if (event === 'delta' || data.type === 'delta') {
        if (state.drawer && state.drawer.done) return;
        const key = data.task_id || '';
        let e = live.get(key);
        if (!e) {
          e = h('pre', { class: 'live-text', 'data-task': key });
          live.set(key, e);
          $('#drawer-live').append(h('div', {}, h('small', { class: 'muted' }, data.agent || ''), e));
        }
        e.textContent += data.text || '';
        $('#drawer-live-box').hidden = false;
        return;
      }
      if (data.type === 'run_resumed') {
        // A new process took the run over: what came before was done by
        // the previous one, and the new one replayed those steps from
        // the run's step log rather than run them again.
        for (const li of tl.children) {
          if (!li.classList.contains('replayed') && !li.classList.contains('ev-run_resumed')) {
            li.classList.add('replayed');
            li.append(' ', h('span', { class: 'tag', title: 'done before the resume; replayed from the step log, not run again' }, 'replayed'));
          }
        }
        tl.append(h('li', { class: 'ev-run_resumed' }, h('time', {}, ts(data.timestamp)), ' ', h('b', {}, 'run_resumed'),
          h('div', { class: 'muted' }, 'resumed by a new process: the steps above were replayed, the rest runs now')));
        refreshDrawerSoon();
        return;
      }
      tl.append(h('li', { class: 'ev-' + data.type },
        h('time', {}, ts(data.timestamp)), ' ', h('b', {}, data.type),
        data.agent ? ' ' + data.agent : '', data.error ? h('div', { class: 'bad' }, data.error) : ''));
      // Fallback for servers whose status has no trace_id: the trace the
      // live feed saw with the run's task id.
      if (data.task_id && !state.drawer.known && !state.drawer.trace) {
        const tr = state.taskTrace.get(data.task_id);
        if (tr) showDrawerTree(tr);
      }
      refreshDrawerSoon();
    },
    onState: (s) => { if (s === 'ended') refreshDrawer(); },
  });
}
let drawerTimer = null;
function refreshDrawerSoon() {
  if (drawerTimer) return;
  drawerTimer = setTimeout(() => { drawerTimer = null; refreshDrawer(); }, 300);
}
async function refreshDrawer() {
  const d = state.drawer;
  if (!d) return;
  try {
    const st = await call(`runs/${encodeURIComponent(d.id)}/status`);
    if (state.drawer !== d) return;
    const run = state.runs.get(d.id);
    $('#drawer-status').replaceChildren(h('dl', { class: 'kv' },
      h('dt', {}, 'State'), h('dd', {}, stateBadge(st.state), st.reason ? ' ' + st.reason : ''),
      h('dt', {}, 'Progress'), h('dd', {}, progressBar(st.progress)),
      st.resumed ? [h('dt', {}, 'Resumed'), h('dd', { id: 'drawer-resumed' }, st.resumed + (st.resumed === 1 ? ' time' : ' times') +
        ' (the process running it died); ' + (st.steps || 0) + ' steps recorded')] :
        st.steps ? [h('dt', {}, 'Steps'), h('dd', {}, st.steps + ' recorded (a resume would replay them)')] : [],
      st.current_step ? [h('dt', {}, 'Current step'), h('dd', { id: 'drawer-step', class: 'mono', title: 'the last step the run recorded, at ' + ts(st.current_step.at) },
        '#' + st.current_step.seq + ' ' + st.current_step.kind + ' ' + st.current_step.key)] : [],
      run ? [h('dt', {}, 'Target'), h('dd', {}, run.target + ' (' + run.kind + ')'), h('dt', {}, 'Created'), h('dd', {}, new Date(run.created_at).toLocaleString())] : [],
      h('dt', {}, 'Run id'), h('dd', { class: 'mono' }, d.id),
      st.trace_id ? [h('dt', {}, 'Trace id'), h('dd', { class: 'mono' }, h('a', { href: '#tree/' + encodeURIComponent(st.trace_id), id: 'drawer-trace' }, st.trace_id))] : []));
    const waits = st.state === 'waiting' && st.waiting ? st.waiting : [];
    keepOrReplace($('#drawer-wait'), d.id + ':' + waits.map((r) => r.id).join(' '), () => waits.length ? [h('h3', {}, 'Waiting for'),
      ...waits.map((req) => requestCard(d.id, run && run.target, req, () => { refreshDrawer(); refreshWaiting(); }))] : []);
    if (st.trace_id) { d.known = true; d.trace = st.trace_id; }
    const terminal = ['completed', 'failed', 'cancelled'].includes(st.state);
    $('#drawer-cancel').disabled = terminal;
    if (run && run.state !== st.state) { run.state = st.state; run.progress = st.progress; redraw('runs'); }
    if (terminal && st.state !== 'cancelled') {
      const res = await call(`runs/${encodeURIComponent(d.id)}/result`);
      if (state.drawer !== d) return;
      $('#drawer-result').textContent = JSON.stringify(res, null, 2);
      $('#drawer-result').classList.remove('muted');
      d.done = true; // the result replaces the text streamed so far
      $('#drawer-live-box').hidden = true;
      const tr = res && res.metadata && res.metadata.trace_id;
      if (tr && !d.known) showDrawerTree(tr); // fallback: an older server
    } else if (st.state === 'cancelled') {
      $('#drawer-result').textContent = 'Cancelled: no result.';
    } else {
      $('#drawer-result').textContent = 'Not finished yet.';
    }
    if (d.trace) showDrawerTree(d.trace, true);
  } catch (err) {
    $('#drawer-status').replaceChildren(h('p', { class: 'bad' }, err.message));
  }
}
// showDrawerTree draws the tree of trace in the open drawer; again draws
// it anew (the run went on), else a tree already shown is left alone.
async function showDrawerTree(trace, again) {
  const d = state.drawer;
  if (!d || (d.trace === trace && d.drawn && !again) || d.treeBusy) return;
  d.trace = trace;
  d.treeBusy = true;
  try {
    const tree = await call(`runs/${encodeURIComponent(trace)}/tree`);
    if (state.drawer === d) {
      d.drawn = true;
      const tr = drawTree(tree);
      tr.dataset.trace = tree.trace_id;
      $('#drawer-tree').replaceChildren(tr, h('a', { href: '#tree/' + encodeURIComponent(trace) }, 'open in Run tree'));
    }
  } catch (err) {
    if (state.drawer !== d) return;
    $('#drawer-tree').replaceChildren(h('span', { class: 'muted' }, err.status === 404 ? 'No events of this run stored yet (trace ' + short(trace) + ').' : err.message));
    // The event store writes in batches (up to a second late): a run that
    // just started or ended may have no stored events yet.
    if (err.status === 404 && (d.treeRetries = (d.treeRetries || 0) + 1) <= 10) setTimeout(() => showDrawerTree(trace, true), 1000);
  } finally { d.treeBusy = false; }
}
function closeDrawer() {
  if (state.drawer) state.drawer.abort.abort();
  state.drawer = null;
  $('#drawer').hidden = true;
}
$('#drawer-close').addEventListener('click', closeDrawer);
$('#drawer-cancel').addEventListener('click', async () => {
  const d = state.drawer;
  if (!d) return;
  $('#drawer-cancel').disabled = true;
  try {
    await call(`runs/${encodeURIComponent(d.id)}/cancel`, { method: 'POST' });
  } catch (err) {
    banner('Cancel failed: ' + err.message);
  }
  await refreshDrawer();
  refreshRuns();
});
document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('#drawer').hidden) closeDrawer(); });

// ---------- run tree ----------

// drawTree draws a tree with one row per node: name, kind, status,
// duration and a bar placed on the root's time span.
function drawTree(tree) {
  const root = tree.root;
  if (!root) return h('p', { class: 'muted' }, 'Empty tree.');
  const t0 = Date.parse(root.start);
  let t1 = t0;
  (function walk(n) { t1 = Math.max(t1, n.end ? Date.parse(n.end) : Date.now()); (n.children || []).forEach(walk); })(root);
  const span = Math.max(1, t1 - t0);
  const list = h('ul', { class: 'tree' });
  (function add(n, ul) {
    const end = n.end ? Date.parse(n.end) : Date.now();
    const start = Date.parse(n.start);
    const bar = h('span', { class: 'tbar st-' + n.status });
    bar.style.left = (100 * (start - t0)) / span + '%';
    bar.style.width = Math.max(0.5, (100 * (end - start)) / span) + '%';
    const errs = (n.events || []).filter((e) => e.payload && e.payload.error).map((e) => e.payload.error);
    const li = h('li', { class: 'tnode k-' + n.kind + ' st-' + n.status, 'data-kind': n.kind },
      h('div', { class: 'trow', title: errs.join('\n') || undefined },
        h('span', { class: 'tname' }, h('span', { class: 'kind' }, n.kind), ' ', n.name || '(unnamed)'),
        h('span', { class: 'tstatus' }, n.status === 'failed' ? '✗ failed' : n.status === 'running' ? '▸ running' : '✓'),
        h('span', { class: 'tdur' }, n.end ? dur(end - start) : dur(end - start) + '…'),
        h('span', { class: 'ttrack' }, bar)),
      errs.length ? h('div', { class: 'terr' }, errs[errs.length - 1]) : null);
    ul.append(li);
    if (n.children && n.children.length) {
      const sub = h('ul');
      n.children.forEach((c) => add(c, sub));
      li.append(sub);
    }
  })(root, list);
  return list;
}

async function showTree(id) {
  $('#tree-id').value = id || '';
  const out = $('#tree-out');
  if (!id) {
    const recent = [...state.traces.entries()].slice(-20).reverse();
    out.replaceChildren(h('p', { class: 'muted' }, 'Enter a trace id, or pick a recent trace:'),
      h('ul', { class: 'plain' }, recent.map(([tr, t]) => h('li', {}, h('a', { href: '#tree/' + encodeURIComponent(tr) }, t.name || '?'), ' ', h('span', { class: 'mono muted' }, tr)))));
    return;
  }
  out.replaceChildren(h('p', { class: 'muted' }, 'loading…'));
  // The event store writes in batches (up to a second late): a trace just
  // seen live may not be there yet, so a 404 is asked again a few times.
  for (let attempt = 0; ; attempt++) {
    try {
      const tree = await call(`runs/${encodeURIComponent(id)}/tree`);
      if (treeShown() === id) out.replaceChildren(drawTree(tree));
      return;
    } catch (err) {
      if (treeShown() !== id) return;
      if (err.status === 404 && attempt < 5) {
        out.replaceChildren(h('p', { class: 'muted' }, `No events stored for trace ${id} yet; asking again…`));
        await new Promise((r) => setTimeout(r, 1500));
        continue;
      }
      out.replaceChildren(h('p', { class: 'bad' }, err.status === 404 ? `No events for trace ${id}: ${err.message}` : err.message));
      return;
    }
  }
}
function treeShown() { return currentView() === 'tree' ? decodeURIComponent(location.hash.split('/').slice(1).join('/')) : null; }
$('#tree-form').addEventListener('submit', (e) => { e.preventDefault(); location.hash = '#tree/' + encodeURIComponent($('#tree-id').value.trim()); });

// ---------- history ----------

// History lists every top-level run (GET /runs): synchronous runs,
// gathers and group runs from the event store beside the submitted runs.
// A submitted run opens in the drawer; another opens its tree.
const hist = { cursors: [''], i: 0 };
// histSeq numbers the history's requests: an answer that comes back
// after a later request's (the filters changed meanwhile) is dropped, so
// the table always shows the filters the person chose last.
let histSeq = 0;
async function showHistory() {
  const seq = ++histSeq;
  const q = new URLSearchParams({ limit: '25' });
  for (const [k, el] of [['status', '#hist-state'], ['type', '#hist-type'], ['target', '#hist-target']]) {
    const v = $(el).value.trim();
    if (v) q.set(k, v);
  }
  const cur = hist.cursors[hist.i];
  if (cur) q.set('cursor', cur);
  try {
    const page = await call(`runs?${q}`);
    if (seq !== histSeq) return; // a later request's answer rules
    hist.cursors.length = hist.i + 1;
    if (page.next_cursor) hist.cursors.push(page.next_cursor);
    $('#hist-next').disabled = !page.next_cursor;
    $('#hist-first').disabled = hist.i === 0;
    $('#hist-page').textContent = `page ${hist.i + 1}` + (page.total !== undefined ? ` of ${Math.max(1, Math.ceil(page.total / 25))} (${page.total} runs)` : '');
    fill($('#hist-table tbody'), page.runs.map((r) => {
      const treeHref = r.trace_id ? '#tree/' + encodeURIComponent(r.trace_id) : null;
      const open = r.run_id ? () => openRun(r.run_id) : () => { if (treeHref) location.hash = treeHref; };
      return h('tr', { class: 'clickable', onclick: open, 'data-key': r.run_id || r.trace_id },
        h('td', { class: 'mono', title: r.run_id || r.trace_id }, r.run_id ? short(r.run_id) : '–'), h('td', {}, r.target), h('td', {}, r.type || r.kind),
        h('td', {}, stateBadge(r.status || r.state)), h('td', {}, progressBar(r.progress)),
        h('td', {}, new Date(r.created_at).toLocaleString()), h('td', {}, new Date(r.updated_at).toLocaleString()),
        h('td', { class: 'mono' }, treeHref ? h('a', { href: treeHref, title: r.trace_id, onclick: (e) => e.stopPropagation() }, short(r.trace_id)) : '–'));
    }), 'No runs.', 8);
  } catch (err) { if (seq === histSeq) fill($('#hist-table tbody'), [], err.message, 8); }
}
function resetHistory() { hist.cursors = ['']; hist.i = 0; showHistory(); }
$('#hist-state').addEventListener('change', resetHistory);
$('#hist-type').addEventListener('change', resetHistory);
$('#hist-target').addEventListener('change', resetHistory);
$('#hist-first').addEventListener('click', () => { hist.i = 0; showHistory(); });
$('#hist-next').addEventListener('click', () => { if (hist.cursors[hist.i + 1] !== undefined) { hist.i++; showHistory(); } });

// ---------- usage ----------

// usd writes a dollar figure with four significant digits at least and
// cents at most ($12.35, $0.01778, $0.000002469): agent costs run from
// millionths of a dollar to thousands.
function usd(c) {
  if (c === undefined || c === null || Number.isNaN(c)) return '–';
  if (c === 0) return '$0';
  if (c >= 100) return '$' + c.toFixed(2);
  return '$' + Number(c.toPrecision(4)).toString();
}

// showUsage charts tokens and cost by agent and by model, both from
// GET /usage (the event store's sums of agent_completed): one row and one
// bar per key; each cost cell keeps the API's figure in data-usd. The
// cached column is the part of the tokens read from a prompt cache ('–'
// from a server whose /usage has no cached_tokens).
async function showUsage() {
  try {
    const [byAgent, byModel] = await Promise.all([call('usage?group_by=agent'), call('usage?group_by=model')]);
    const t = byAgent.total;
    $('#usage-total').replaceChildren(meter('Tokens', fmtNum(t.tokens_used)),
      meter('Cached tokens', fmtNum(t.cached_tokens)),
      h('div', { class: 'meter', 'data-usd': t.cost_usd ?? '' }, h('div', { class: 'meter-value' }, usd(t.cost_usd)), h('div', { class: 'meter-label' }, 'Cost (USD)')),
      meter('Invocations', fmtNum(t.invocations)));
    for (const [u, key] of [[byAgent, 'agent'], [byModel, 'model']]) {
      const items = Object.entries(u.groups || {}).map(([k, v]) => ({ label: k, value: v.tokens_used, cached: v.cached_tokens, inv: v.invocations, cost: v.cost_usd }));
      $(`#usage-${key}-chart`).replaceChildren(bars(items, { unit: '' }));
      fill($(`#usage-${key} tbody`), [...items].sort((a, b) => b.value - a.value).map((i) => h('tr', { 'data-key': i.label }, h('td', {}, i.label), h('td', { class: 'num' }, String(i.value)),
        h('td', { class: 'num cached' }, i.cached === undefined ? '–' : String(i.cached)), h('td', { class: 'num' }, String(i.inv)))), 'No completed agents yet.', 4);
      // A server from before /usage had cost_usd: say so rather than draw zeros.
      if (items.length && items.every((i) => i.cost === undefined)) {
        $(`#usage-cost-${key}-chart`).replaceChildren(h('p', { class: 'muted' }, 'This server\'s /usage has no cost_usd (an older svc).'));
        fill($(`#usage-cost-${key} tbody`), [], '–', 3);
        continue;
      }
      const costs = items.map((i) => ({ label: i.label, value: i.cost || 0, inv: i.inv }));
      $(`#usage-cost-${key}-chart`).replaceChildren(bars(costs, { format: usd, floor: 1e-9 }));
      fill($(`#usage-cost-${key} tbody`), costs.sort((a, b) => b.value - a.value).map((i) => h('tr', { 'data-key': i.label },
        h('td', {}, i.label),
        h('td', { class: 'num', 'data-usd': i.value, title: '$' + i.value }, usd(i.value)),
        h('td', { class: 'num' }, i.inv ? usd(i.value / i.inv) : '–'))), 'No completed agents yet.', 3);
    }
  } catch (err) { $('#usage-total').replaceChildren(h('p', { class: 'bad' }, err.message)); }
}

// ---------- tools ----------

const toolSort = { key: 'calls', dir: -1, rows: [] };
async function showTools() {
  try {
    const u = await call('tools?group_by=' + $('#tools-group').value);
    toolSort.rows = u.rows;
    drawTools();
  } catch (err) { fill($('#tools-table tbody'), [], err.message, 8); }
}
function drawTools() {
  const { key, dir } = toolSort;
  const rows = [...toolSort.rows].sort((a, b) => {
    const x = a[key] ?? '', y = b[key] ?? '';
    return (typeof x === 'number' ? x - y : String(x).localeCompare(String(y))) * dir;
  });
  document.querySelectorAll('#tools-table th').forEach((th) => { th.dataset.sort = th.dataset.key === key ? (dir > 0 ? 'asc' : 'desc') : ''; });
  fill($('#tools-table tbody'), rows.map((r) => h('tr', { class: r.failures ? 'warn-row' : '' },
    h('td', {}, r.tool), h('td', {}, r.agent || '–'), h('td', { class: 'num' }, String(r.calls)), h('td', { class: 'num' }, String(r.failures)),
    h('td', { class: 'num' }, r.p50_ms.toFixed(1)), h('td', { class: 'num' }, r.p95_ms.toFixed(1)),
    h('td', { class: 'num' }, r.p99_ms.toFixed(1)), h('td', { class: 'num' }, r.avg_ms.toFixed(1)))), 'No tool calls yet.', 8);
}
document.querySelectorAll('#tools-table th').forEach((th) => th.addEventListener('click', () => {
  toolSort.dir = toolSort.key === th.dataset.key ? -toolSort.dir : (th.classList.contains('num') ? -1 : 1);
  toolSort.key = th.dataset.key;
  drawTools();
}));
$('#tools-group').addEventListener('change', showTools);

// ---------- health ----------

let lastStats = null;
async function pollStats() {
  try {
    const st = await call('runtime/stats');
    lastStats = st;
    state.burn.push({ t: Date.parse(st.generated_at), v: st.burn_rate.tokens_per_minute });
    if (state.burn.length > MAX_BURN) state.burn.shift();
    if (currentView() === 'health') drawHealth();
  } catch (err) {
    if (currentView() === 'health' && !(err instanceof APIError && err.status === 401)) $('#health-meters').replaceChildren(h('p', { class: 'bad' }, err.message));
  }
}
function drawHealth() {
  const st = lastStats;
  if (!st) return;
  const hd = st.header;
  // Runs in flight are the runtime's live count, as the API gives it: the
  // event counts cannot give it (a refused invocation fails unspawned).
  const m = [
    meter('Tokens', fmtNum(hd.tokens_used)), meter('Spawns', fmtNum(hd.agents_spawned)), meter('In flight', fmtNum(hd.runs_in_flight)),
    meter('Completed', fmtNum(hd.agents_completed)), meter('Failed', fmtNum(hd.agents_failed), hd.agents_failed ? 'bad' : ''),
    meter('Error rate', (100 * hd.error_rate).toFixed(1) + '%', hd.error_rate > 0.05 ? 'bad' : ''),
    meter('Tool calls', fmtNum(hd.tool_calls)), meter('Burn /min', fmtNum(st.burn_rate.tokens_per_minute)),
  ];
  if (st.token_budget) m.push(meter('Budget left', fmtNum(st.token_budget.remaining) + ' / ' + fmtNum(st.token_budget.limit), st.token_budget.remaining === 0 ? 'bad' : ''));
  if (st.stuck && st.stuck.count) m.push(meter('Stuck calls', st.stuck.count, 'bad'));
  if (st.nodes && st.nodes.length) m.push(meter('Serve nodes', st.nodes.length));
  $('#health-meters').replaceChildren(...m);
  $('#burn-chart').replaceChildren(line(state.burn, { unit: '/min' }));
  const rej = Object.entries(st.rejections || {}).map(([label, value]) => ({ label, value }));
  $('#rejections').replaceChildren(rej.length ? bars(rej) : h('p', { class: 'muted' }, 'No rejections.'));
  drawLimits(st.rate_limits || []);
  fill($('#errors-table tbody'), (st.error_groups || []).map((g) => h('tr', {}, h('td', { class: 'bad' }, g.error), h('td', { class: 'num' }, String(g.count)),
    h('td', {}, ts(g.last_seen)), h('td', {}, (g.agents || []).join(', ')), h('td', { class: 'detail' }, g.sample))), 'No errors.', 5);
  fill($('#servers-table tbody'), (st.tool_servers || []).map((s) => h('tr', {}, h('td', {}, s.name), h('td', {}, s.agent), h('td', {}, s.transport),
    h('td', {}, h('span', { class: 'badge ts-' + s.state }, s.state)), h('td', {}, (s.tools || []).length + ' tools'), h('td', { class: 'num' }, String(s.restarts)),
    h('td', { class: 'detail' }, s.last_error || ''))), 'No MCP tool servers.', 7);
  fill($('#workers-table tbody'), (st.workers || []).map((w) => h('tr', { 'data-worker': w.runtime_id }, h('td', { class: 'mono' }, w.runtime_id), h('td', {}, h('span', { class: 'badge w-' + w.status }, w.status)),
    h('td', { class: 'num' }, `${w.in_flight} / ${w.concurrency_cap}`),
    h('td', {}, ts(w.last_heartbeat), ' ', h('small', { class: 'hb-age', 'data-at': w.last_heartbeat, 'data-stopped': w.worker_stopped ? '1' : '',
      'data-period': String(w.heartbeat_seconds || 30) })),
    h('td', {}, (w.agent_subscriptions || []).join(', ')), h('td', {}, w.broker_scheme))),
  'No workers: runs happen in this process (svc serve --broker … for a fleet).', 6);
  // The header counts only what this node's events say: without
  // --publish-events the fleet's agent events stay on the workers.
  const quiet = (st.workers || []).length && !hd.agents_spawned && !hd.agents_completed;
  $('#fleet-note').hidden = !quiet;
  tickHeartbeats();
}

// drawLimits shows each rate limit the model calls wait under, its use
// in the last minute against what it allows ("412 / 6000 rpm"); the card
// stays hidden while there is none (GET /runtime/stats lists a limit once
// a call has drawn from it).
function drawLimits(limits) {
  $('#limits-card').hidden = !limits.length;
  if (!limits.length) { $('#limits-table tbody').replaceChildren(); return; }
  const per = (used, max, unit) => max ? `${fmtNum(used)} / ${fmtNum(max)} ${unit}` : `${fmtNum(used)} ${unit}`;
  const ms = (v) => (v >= 1000 ? (v / 1000).toFixed(1) + ' s' : Math.round(v) + ' ms');
  $('#limits-table tbody').replaceChildren(...limits.map((l) => {
    const lim = l.limit || {};
    const learned = [];
    if (l.learned_concurrency) learned.push(`window ${l.learned_concurrency} at once`);
    if (l.paused_ms) learned.push(`paused ${ms(l.paused_ms)}`);
    return h('tr', { 'data-limit': l.name },
      h('td', {}, l.name),
      h('td', { class: 'num', 'data-k': 'queued' }, fmtNum(l.queued)),
      h('td', { class: 'num', 'data-k': 'in_flight' }, lim.max_concurrent ? `${l.in_flight} / ${lim.max_concurrent}` : String(l.in_flight)),
      h('td', { class: 'num', 'data-k': 'wait' }, `${ms(l.wait_p50_ms)} / ${ms(l.wait_p99_ms)}`),
      h('td', { class: 'num', 'data-k': 'calls', title: `${l.calls} calls since the start` }, per(l.calls_last_minute, lim.requests_per_minute, 'rpm')),
      h('td', { class: 'num', 'data-k': 'tokens', title: `${l.tokens} tokens since the start` }, per(l.tokens_last_minute, lim.tokens_per_minute, 'tpm')),
      h('td', { class: 'num' + (l.throttled ? ' bad' : ''), 'data-k': 'throttled' }, fmtNum(l.throttled)),
      h('td', { 'data-k': 'learned', class: l.paused_ms ? 'bad' : '' }, learned.length ? learned.join(', ') : h('span', { class: 'muted' }, '–')));
  }));
}

// A worker is flagged "no heartbeat for N s" once its heartbeat period (30 s
// when the server does not know it) and a margin have passed without one,
// so a live worker between two beats is not flagged. Its status (healthy,
// stale, down at 90 s and 300 s) stays the server's.
const silentAfter = (period) => 1000 * (period + Math.max(2, period / 6));
// tickHeartbeats redraws every second how long ago each worker was heard
// from, so a killed worker shows "no heartbeat for N s" as it happens,
// between two polls of the stats.
function tickHeartbeats() {
  for (const el of document.querySelectorAll('#workers-table .hb-age')) {
    const age = Math.max(0, Math.round((Date.now() - Date.parse(el.dataset.at)) / 1000));
    if (el.dataset.stopped) { el.textContent = '(stopped)'; el.className = 'hb-age muted'; continue; }
    const silent = Date.now() - Date.parse(el.dataset.at) >= silentAfter(Number(el.dataset.period));
    el.textContent = silent ? `no heartbeat for ${age} s` : `(${age} s ago)`;
    el.className = 'hb-age ' + (silent ? 'bad' : 'muted');
  }
}
setInterval(() => { if (currentView() === 'health') tickHeartbeats(); }, 1000);

// ---------- groups ----------

async function showGroups() {
  const out = $('#groups-out');
  try {
    const names = await call('groups');
    if (!names.length) { out.replaceChildren(h('p', { class: 'muted' }, 'No groups registered.')); return; }
    const topos = await Promise.all(names.map((n) => call('groups/' + encodeURIComponent(n) + '/topology').catch((e) => ({ name: n, error: e.message }))));
    out.replaceChildren(...topos.map((t) => {
      if (t.error) return h('div', { class: 'card wide', 'data-group': t.name }, h('h2', {}, t.name), h('p', { class: 'bad' }, t.error));
      // The counts are the drawing's: a team's topology lists no nodes or
      // edges, its drawing has the coordinator and a delegate edge each.
      const g = graph(t);
      const count = (sel) => g.querySelectorAll(sel).length;
      const shape = t.kind === 'team'
        ? `coordinator ${t.coordinator}; ${t.delegates.length} delegates; at most ${t.max_rounds} rounds`
        : `entry ${t.entry.join(', ')}; terminal ${t.terminal.join(', ')}`;
      return h('div', { class: 'card wide', 'data-group': t.name }, h('h2', {}, t.name, ' ', h('small', { class: 'muted' }, t.kind || '')), g,
        h('p', { class: 'muted small group-counts' }, `${count('g.node')} nodes, ${count('g.edge')} edges; ${shape}`));
    }));
  } catch (err) { out.replaceChildren(h('p', { class: 'bad' }, err.message)); }
}

// ---------- views, theme, start ----------

const views = ['live', 'tree', 'history', 'usage', 'tools', 'health', 'groups'];
function currentView() { const v = location.hash.slice(1).split('/')[0]; return views.includes(v) ? v : 'live'; }
function route() {
  const v = currentView();
  for (const name of views) $('#view-' + name).hidden = name !== v;
  document.querySelectorAll('#tabs a').forEach((a) => a.classList.toggle('active', a.dataset.view === v));
  if (v === 'live') redraw('runs', 'feed');
  if (v === 'tree') showTree(treeShown());
  if (v === 'history') showHistory();
  if (v === 'usage') showUsage();
  if (v === 'tools') showTools();
  if (v === 'health') { drawHealth(); pollStats(); }
  if (v === 'groups') showGroups();
}
window.addEventListener('hashchange', route);
$('#live-state').addEventListener('change', () => redraw('runs'));
$('#live-agent').addEventListener('input', () => redraw('runs', 'feed'));
$('#feed-heartbeats').addEventListener('change', () => redraw('feed'));

function applyTheme(t) {
  document.documentElement.dataset.theme = t;
  $('#theme-btn').textContent = t === 'dark' ? '☀ Light' : '☾ Dark';
}
$('#theme-btn').addEventListener('click', () => {
  const t = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
  localStorage.setItem('svc.theme', t);
  applyTheme(t);
});
applyTheme(localStorage.getItem('svc.theme') || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'));
$('#token-btn').addEventListener('click', () => askToken('Bearer token for this server (kept for this browser tab only).').then((ok) => { if (ok) restart(); }));

let statsTimer = null, runsInterval = null;
function restart() {
  banner('');
  connect();
  refreshRuns();
  pollStats();
  route();
}
statsTimer = setInterval(pollStats, POLL_MS);
runsInterval = setInterval(refreshRuns, POLL_MS);
void statsTimer; void runsInterval;
restart();
