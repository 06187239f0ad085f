// hostfork's web view (docs/web.md). Plain JavaScript, no build step.
// Everything shown comes from the JSON API (docs/api.md) and is put in
// the page as text (textContent, never HTML): what a workload writes is
// never markup here.
'use strict';

const $ = (id) => document.getElementById(id);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// el makes an element; strings among kids become text nodes.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k);
  return e;
}

async function api(path, opts) {
  const r = await fetch(path, opts);
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { msg = (await r.json()).message || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return r.json();
}

// lines calls fn with each line of a streamed response body.
async function lines(body, fn) {
  const rd = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await rd.read();
    if (done) return;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const l = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (l) fn(l);
    }
  }
}

// Go duration strings ("1m2.5s", "300ms") to seconds.
function seconds(d) {
  if (!d) return null;
  const unit = { h: 3600, m: 60, s: 1, ms: 1e-3, us: 1e-6, 'µs': 1e-6, ns: 1e-9 };
  let t = 0;
  for (const [, n, u] of String(d).matchAll(/([0-9.]+)(h|ms|m|s|us|µs|ns)/g)) t += parseFloat(n) * unit[u];
  return t;
}
const bytes = (n) => n === null || n === undefined ? 'unknown' :
  n >= 1 << 30 ? (n / (1 << 30)).toFixed(1) + ' GiB' : n >= 1 << 20 ? (n / (1 << 20)).toFixed(1) + ' MiB' : (n / 1024).toFixed(0) + ' KiB';
const short = (id) => (id || '').slice(0, 12);
function left(at) {
  if (!at) return 'none';
  let s = Math.round((Date.parse(at) - Date.now()) / 1000);
  if (s <= 0) return 'passed';
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
  s %= 60;
  return (h ? h + 'h ' : '') + (h || m ? m + 'm ' : '') + s + 's';
}
const labels = (l) => Object.entries(l || {}).map(([k, v]) => el('span', { class: 'label' }, v ? k + '=' + v : k));
const state = (s) => el('span', { class: 'state ' + s }, s);

const st = { envs: [], cmds: [], events: [], samples: new Map(), selected: null, stream: 'stdout', kinds: new Set(), envIds: new Set() };

// --- live data ---------------------------------------------------------

let timer = null;
function refreshSoon() {
  if (!timer) timer = setTimeout(() => { timer = null; refresh(); }, 150);
}

async function refresh() {
  try {
    const envQ = '?commands=0' + ($('show-stopped').checked ? '' : '&active=1');
    const cmdQ = $('show-ended').checked ? '?brief=1' : '?live=1';
    const [envs, cmds, cap] = await Promise.all([api('/v1/envs' + envQ), api('/v1/commands' + cmdQ), api('/v1/capacity')]);
    st.envs = envs;
    st.cmds = cmds;
    sample(envs);
    renderCapacity(cap);
    renderEnvs();
    renderCmds();
    if (st.selected) renderDetail();
    if (!performance.getEntriesByName('first-render').length) performance.mark('first-render');
  } catch (e) {
    $('conn').textContent = 'error: ' + e.message;
  }
}

// sample keeps each environment's CPU share and memory from the kernel's
// counters (limits_now) for its sparkline.
function sample(envs) {
  const now = Date.now() / 1000;
  for (const e of envs) {
    const n = e.limits_now;
    if (!n) continue;
    const a = st.samples.get(e.id) || [];
    const cpu = seconds(n.cpu && n.cpu.usage), mem = n.memory && n.memory.current_bytes;
    const prev = a[a.length - 1];
    const share = prev && cpu !== null && prev.cpu !== null && now > prev.t ? Math.max(0, (cpu - prev.cpu) / (now - prev.t)) : null;
    a.push({ t: now, cpu, mem, share });
    if (a.length > 30) a.shift();
    st.samples.set(e.id, a);
  }
}

function spark(values) {
  const v = values.filter((x) => x !== null && x !== undefined);
  if (v.length < 2) return null;
  const max = Math.max(...v, 1e-9);
  const pts = v.map((x, i) => (i * 80 / (v.length - 1)).toFixed(1) + ',' + (19 - x / max * 18).toFixed(1)).join(' ');
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', '0 0 80 20');
  const pl = document.createElementNS(ns, 'polyline');
  pl.setAttribute('points', pts);
  svg.append(pl);
  return svg;
}

async function followEvents() {
  let since = 0;
  for (;;) {
    try {
      const r = await fetch('/v1/events?since=' + since);
      if (!r.ok) throw new Error(r.status + ' ' + r.statusText);
      $('conn').textContent = 'live';
      await lines(r.body, (l) => {
        const ev = JSON.parse(l);
        since = ev.seq;
        addEvent(ev);
      });
    } catch (e) {
      $('conn').textContent = 'reconnecting: ' + e.message;
    }
    await sleep(1000);
  }
}

function addEvent(ev) {
  st.events.push(ev);
  if (st.events.length > 2000) st.events.splice(0, st.events.length - 2000);
  for (const [set, v, sel] of [[st.kinds, ev.kind, 'ev-kind'], [st.envIds, ev.env, 'ev-env']]) {
    if (v && !set.has(v)) {
      set.add(v);
      $(sel).append(el('option', { value: v }, sel === 'ev-env' ? short(v) : v));
    }
  }
  renderEventsSoon();
  refreshSoon();
}

// --- rendering -----------------------------------------------------------

function renderCapacity(c) {
  const pct = (x) => x === null || x === undefined ? 'unknown' : x.toFixed(1) + ' %';
  const box = $('capacity');
  box.replaceChildren(
    el('span', {}, 'slots ', el('b', { id: 'slots' }, c.used + ' / ' + c.slots), ' used (', c.bound, ')'),
    el('span', {}, 'admission ', el('b', { id: 'admission' }, c.paused ? 'paused' : 'open')),
    el('span', {}, 'cores ', el('b', {}, String(c.cores))),
    el('span', {}, 'memory available ', el('b', {}, bytes(c.mem_available))),
    el('span', {}, 'CPU pressure ', el('b', {}, pct(c.cpu_pressure))),
    el('span', {}, 'memory pressure ', el('b', {}, pct(c.memory_pressure))));
}

function renderEnvs() {
  const box = $('envs');
  if (!st.envs.length) return box.replaceChildren(el('p', { class: 'muted' }, 'No environments.'));
  box.replaceChildren(...st.envs.slice().reverse().map((e) => {
    const a = st.samples.get(e.id) || [];
    const last = a[a.length - 1];
    const n = e.limits_now;
    const trees = (e.trees || []).map((t) => el('li', {}, t.name + ': ' + t.kind + ' from ' + (t.baseline || t.source || '?') + ' (' + t.state + ')',
      t.workload_path ? ' at ' + t.workload_path : ''));
    return el('div', { class: 'item env', 'data-id': e.id },
      el('div', { class: 'row' }, el('span', { class: 'id' }, short(e.id)), state(e.state), el('span', {}, e.purpose || ''), labels(e.labels),
        e.state === 'active' ? el('button', { type: 'button', class: 'stop', onclick: (ev) => { ev.stopPropagation(); confirmStop('env', e.id, 'environment ' + short(e.id) + (e.purpose ? ' (' + e.purpose + ')' : '') + ' and every command in it'); } }, 'Stop') : null),
      el('div', { class: 'row' },
        el('span', {}, 'deadline ', el('b', { class: 'countdown', 'data-at': e.deadline_at || '' }, e.until_stopped ? 'until stopped' : left(e.deadline_at))),
        el('span', {}, 'CPU ', last && last.share !== null ? (last.share * 100).toFixed(0) + ' %' : (n ? '…' : 'unknown'), spark(a.map((x) => x.share))),
        el('span', {}, 'memory ', n ? bytes(n.memory && n.memory.current_bytes) : 'unknown', spark(a.map((x) => x.mem))),
        el('span', {}, st.cmds.filter((c) => c.env === e.id && live(c)).length + ' live commands')),
      el('details', {}, el('summary', {}, 'trees, view, limits'),
        trees.length ? el('ul', {}, trees) : el('p', { class: 'muted' }, 'No private trees.'),
        el('button', { type: 'button', onclick: (ev) => measure(ev.target) }, 'measure Btrfs sizes'),
        e.view ? el('pre', {}, JSON.stringify(e.view, null, 1)) : el('p', { class: 'muted' }, 'No view rules.'),
        e.limits ? el('pre', {}, JSON.stringify(e.limits, null, 1)) : el('p', { class: 'muted' }, 'No limits.')));
  }));
}

async function measure(btn) {
  btn.disabled = true;
  try {
    const sizes = await api('/v1/usage/btrfs');
    btn.replaceWith(el('p', {}, sizes.length ? sizes.map((s) => short(s.env) + ' ' + s.tree + ': ' + bytes(s.total_bytes) + ' (' + bytes(s.exclusive_bytes) + ' own)').join('; ') : 'No Btrfs trees.'));
  } catch (e) {
    btn.replaceWith(el('p', { class: 'error' }, e.message));
  }
}

const live = (c) => c.tree_state === 'live' || c.tree_state === 'unverified' || c.tree_state === 'pending';

function renderCmds() {
  const box = $('cmds');
  const cmds = st.cmds.slice(-300).reverse();
  if (!cmds.length) return box.replaceChildren(el('p', { class: 'muted' }, 'No commands.'));
  box.replaceChildren(...cmds.map((c) => el('div', { class: 'item cmd' + (c.id === st.selected ? ' sel' : ''), 'data-id': c.id, onclick: () => select(c.id) },
    el('div', { class: 'row' }, el('span', { class: 'id' }, short(c.id)), state(c.tree_state || c.record_state),
      el('span', { class: 'argv' }, (c.argv || []).join(' '))),
    c.purpose ? el('div', { class: 'muted' }, c.purpose) : null)));
}

let evTimer = null;
function renderEventsSoon() {
  if (!evTimer) evTimer = setTimeout(() => { evTimer = null; renderEvents(); }, 50);
}

function renderEvents() {
  const env = $('ev-env').value, kind = $('ev-kind').value;
  const evs = st.events.filter((e) => (!env || e.env === env) && (!kind || e.kind === kind)).slice(-300).reverse();
  $('events').replaceChildren(...evs.map((e) => el('li', { 'data-kind': e.kind },
    el('span', { class: 'muted' }, new Date(e.at).toLocaleTimeString(), ' #' + e.seq + ' '), el('b', {}, e.kind), ' ',
    el('span', { class: 'id' }, short(e.env)), e.command ? [' ', el('span', { class: 'id' }, short(e.command))] : null,
    e.reason ? ' reason ' + e.reason : '', e.exit_code !== undefined ? ' exit ' + e.exit_code : '',
    e.signal !== undefined ? ' signal ' + e.signal : '', e.detail ? ' — ' + e.detail : '')));
}

// --- one command -----------------------------------------------------------

let follow = null; // the selected command's log or session follower

async function select(id) {
  if (st.selected !== id) {
    st.selected = id;
    st.stream = 'stdout';
    startOutput(id);
  }
  renderCmds();
  renderDetail();
}

async function renderDetail() {
  const id = st.selected;
  let c, env;
  try {
    c = await api('/v1/commands/' + id);
    env = st.envs.find((e) => e.id === c.env) || await api('/v1/envs/' + c.env).catch(() => null);
  } catch (e) {
    return $('detail').replaceChildren(el('p', { class: 'error' }, e.message));
  }
  if (id !== st.selected) return;
  const alive = live(c);
  const pid = (x) => x ? 'pid ' + x.pid : 'none';
  $('detail').className = '';
  $('detail').replaceChildren(el('dl', { id: 'answers' },
    el('dt', {}, 'what'), el('dd', {}, el('span', { class: 'argv' }, (c.argv || []).join(' ')), c.purpose ? ' — ' + c.purpose : '', ' ', labels(c.labels)),
    el('dt', {}, 'why'), el('dd', {}, 'environment ', el('span', { class: 'id' }, short(c.env)), env && env.purpose ? ' — ' + env.purpose : '', ' ', labels(env && env.labels)),
    el('dt', {}, 'where'), el('dd', {}, c.session ? 'a session (' + c.session + '); ' : '', 'output ', c.output || '', c.stdout_path ? [': ', el('span', { class: 'id' }, c.stdout_path)] : ''),
    el('dt', {}, 'alive'), el('dd', { id: 'alive' }, 'leader ', state(c.leader_state), ' (', pid(c.workload), '), tree ', state(c.tree_state),
      ' (guardian ', pid(c.guardian), ')', c.exit_code !== null && c.exit_code !== undefined ? ', exit ' + c.exit_code : '', c.signal ? ', signal ' + c.signal : '',
      c.stop_reason ? ', stopped: ' + c.stop_reason : ''),
    el('dt', {}, 'stop'), el('dd', {}, alive ? el('button', { type: 'button', id: 'stop-cmd', class: 'danger',
      onclick: () => confirmStop('command', c.id, 'command ' + short(c.id) + ' (' + (c.argv || []).join(' ') + ') and its whole tree') }, 'Stop') : 'no: its tree has ended')));
}

function startOutput(id) {
  if (follow) follow.abort();
  follow = new AbortController();
  const c = st.cmds.find((x) => x.id === id) || {};
  $('output').hidden = false;
  $('log').textContent = '';
  if (c.session === 'tty') {
    $('log').hidden = true;
    $('term').hidden = false;
    watchSession(id, follow.signal);
  } else {
    $('log').hidden = false;
    $('term').hidden = true;
    followLog(id, st.stream, follow.signal);
  }
}

// followLog tails a stream of the command's output from a byte offset
// (the last lines first), resuming from the offset it reached when the
// connection breaks; the stream's clean end is the tree's end.
async function followLog(id, stream, signal) {
  const pre = $('log');
  let offset = null;
  const dec = new TextDecoder();
  while (!signal.aborted) {
    try {
      const q = offset === null ? 'tail=200' : 'offset=' + offset;
      const r = await fetch('/v1/commands/' + id + '/logs?follow=1&stream=' + stream + '&' + q, { signal });
      if (!r.ok) throw new Error((await r.json().catch(() => ({}))).message || r.statusText);
      if (offset === null) offset = Number(r.headers.get('Hostfork-Log-Offset')) || 0;
      $('log-state').textContent = 'following from byte ' + offset;
      const rd = r.body.getReader();
      for (;;) {
        const { value, done } = await rd.read();
        if (done) break;
        offset += value.byteLength;
        const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
        pre.append(dec.decode(value, { stream: true }));
        if (pre.textContent.length > 512 * 1024) pre.textContent = pre.textContent.slice(-256 * 1024);
        if (stick) pre.scrollTop = pre.scrollHeight;
      }
      $('log-state').textContent = 'the tree has exited: ' + offset + ' bytes in all';
      return;
    } catch (e) {
      if (signal.aborted) return;
      $('log-state').textContent = e.message + '; retrying';
      await sleep(1000);
    }
  }
}

// loadXterm loads xterm.js the first time a session is shown, so the
// first render does not wait for it.
function loadXterm() {
  if (window.Terminal) return Promise.resolve();
  return new Promise((ok, fail) => {
    const s = el('script', { src: '/static/vendor/xterm/xterm.js' });
    s.addEventListener('load', ok);
    s.addEventListener('error', () => fail(new Error('xterm.js did not load')));
    document.head.append(s);
  });
}

// watchSession shows the command's terminal read-only: the session's
// WebSocket (docs/sessions.md), watch only.
async function watchSession(id, signal) {
  const box = $('term');
  box.replaceChildren();
  try {
    await loadXterm();
  } catch (e) {
    $('log-state').textContent = e.message;
    return;
  }
  if (signal.aborted) return;
  const term = new window.Terminal({ disableStdin: true, convertEol: false, cols: 100, rows: 24, fontSize: 12, scrollback: 2000 });
  term.open(box);
  const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/commands/' + id + '/attach?no_stdin=1');
  ws.binaryType = 'arraybuffer';
  ws.onmessage = (m) => {
    const b = new Uint8Array(m.data);
    if (b[0] === 0x6f) term.write(b.subarray(1)); // 'o': output
    else if (b[0] === 0x78) $('log-state').textContent = 'the leader exited'; // 'x'
    else if (b[0] === 0x48) $('log-state').textContent = 'watching the session (read-only)'; // 'H'
  };
  ws.onclose = (e) => { if (!signal.aborted) $('log-state').textContent = 'session closed' + (e.reason ? ': ' + e.reason : ''); };
  signal.addEventListener('abort', () => { ws.close(); term.dispose(); });
}

// --- the one action ------------------------------------------------------

function confirmStop(kind, id, what) {
  const d = $('confirm');
  $('confirm-text').textContent = 'Stop ' + what + '?';
  d.dataset.kind = kind;
  d.dataset.id = id;
  d.showModal();
}

async function doStop() {
  const d = $('confirm');
  d.close();
  const path = (d.dataset.kind === 'env' ? '/v1/envs/' : '/v1/commands/') + d.dataset.id + '/stop';
  try {
    await api(path, { method: 'POST' });
  } catch (e) {
    $('conn').textContent = 'stop failed: ' + e.message;
  }
  refresh();
}

// --- start -------------------------------------------------------------------

function start() {
  $('confirm-yes').addEventListener('click', doStop);
  $('confirm-no').addEventListener('click', () => $('confirm').close());
  for (const s of ['stdout', 'stderr']) {
    $('tab-' + s).addEventListener('click', () => {
      st.stream = s;
      $('tab-stdout').classList.toggle('on', s === 'stdout');
      $('tab-stderr').classList.toggle('on', s === 'stderr');
      if (st.selected) startOutput(st.selected);
    });
  }
  $('show-stopped').addEventListener('change', refresh);
  $('show-ended').addEventListener('change', refresh);
  $('ev-env').addEventListener('change', renderEvents);
  $('ev-kind').addEventListener('change', renderEvents);
  // The deadlines count down here; the counters are read every 2 s while
  // an environment is active (nothing is polled on an idle node).
  setInterval(() => {
    for (const b of document.querySelectorAll('.countdown[data-at]')) if (b.dataset.at) b.textContent = left(b.dataset.at);
  }, 1000);
  setInterval(() => { if (st.envs.some((e) => e.state === 'active')) refresh(); }, 2000);
  // The event log (its whole backlog first) follows the first render,
  // so that render does not wait behind it.
  refresh().then(followEvents);
}

start();
