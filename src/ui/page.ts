/**
 * The timeline page: one HTML document with its CSS and vanilla JS inline (no framework, no
 * build step). It polls the JSON API: the list every 2 s, an open task every 500 ms until
 * the task completes. Everything from the store is inserted with textContent, never as HTML.
 */
/** The whole page (HTML, CSS and JS), served at `/` by `startUiServer`. */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>turnlog</title>
<style>
  :root { --fg:#1d2330; --muted:#6b7385; --line:#e2e5ec; --bg:#f7f8fa; --ok:#1f8a4c; --bad:#c0392b; --warn:#b7770b; --info:#2d5fc4; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); display:flex; height:100vh; }
  code, pre, .mono { font-family: ui-monospace, "SF Mono", Menlo, Consolas, monospace; font-size:12.5px; }
  aside { width:340px; border-right:1px solid var(--line); background:#fff; display:flex; flex-direction:column; }
  aside header { padding:12px; border-bottom:1px solid var(--line); }
  aside h1 { font-size:16px; margin:0 0 8px; }
  aside .filters { display:flex; gap:6px; }
  aside input, aside select { font:inherit; padding:4px 6px; border:1px solid var(--line); border-radius:4px; }
  aside input { flex:1; min-width:0; }
  #tasks { list-style:none; margin:0; padding:0; overflow:auto; flex:1; }
  #tasks li { padding:8px 12px; border-bottom:1px solid var(--line); cursor:pointer; }
  #tasks li:hover { background:#f1f4fb; }
  #tasks li.selected { background:#e6edfb; }
  #tasks .id { font-weight:600; word-break:break-all; }
  #tasks .meta { color:var(--muted); font-size:12px; }
  main { flex:1; overflow:auto; padding:16px 24px; }
  .empty { color:var(--muted); padding:16px 12px; }
  .error { color:var(--bad); padding:8px 12px; }
  .badge { display:inline-block; padding:0 6px; border-radius:8px; font-size:11.5px; font-weight:600; background:#eceff4; color:var(--muted); }
  .badge.in_progress { background:#e3ecfd; color:var(--info); }
  .badge.completed { background:#e2f4ea; color:var(--ok); }
  .badge.suspended, .badge.pending { background:#fbf1dc; color:var(--warn); }
  .badge.bad { background:#fbe5e2; color:var(--bad); }
  h2 { font-size:18px; margin:0 0 4px; word-break:break-all; }
  h3 { font-size:14px; margin:20px 0 8px; }
  .summary { color:var(--muted); }
  .decision { margin-top:10px; padding:8px 12px; background:#fff; border:1px solid var(--line); border-left:3px solid var(--info); border-radius:4px; white-space:pre-wrap; }
  .turn { background:#fff; border:1px solid var(--line); border-radius:6px; margin:10px 0; padding:10px 12px; }
  .turn .head { display:flex; gap:10px; align-items:baseline; flex-wrap:wrap; }
  .turn .head strong { font-size:14px; }
  .attempt { margin:6px 0 0 12px; color:var(--muted); }
  table.steps { border-collapse:collapse; margin:6px 0 0 12px; }
  table.steps td { padding:2px 10px 2px 0; vertical-align:top; }
  .mark { display:inline-block; margin:4px 6px 0 12px; padding:1px 8px; border-radius:4px; font-size:12.5px; font-weight:600; }
  .mark.kill, .mark.crash { background:#fbe5e2; color:var(--bad); }
  .mark.timeout { background:#fbf1dc; color:var(--warn); }
  .mark.recovery { background:#e3ecfd; color:var(--info); }
  .recovery-line { margin-top:2px; }
  .mark.steer { background:#efe6fb; color:#6b3fb3; }
  ol.events { list-style:none; padding:0; margin:0; background:#fff; border:1px solid var(--line); border-radius:6px; }
  ol.events li { padding:4px 10px; border-bottom:1px solid var(--line); }
  ol.events li.kill, ol.events li.crash { background:#fdf3f2; }
  ol.events li.timeout { background:#fdf8ec; }
  ol.events li.recovery { background:#f2f6fe; }
  ol.events summary { cursor:pointer; }
  ol.events .t { color:var(--muted); display:inline-block; min-width:86px; }
  ol.events .in { padding-left:16px; }
  pre { background:#f6f7f9; padding:8px; border-radius:4px; overflow:auto; margin:6px 0; }
  .live { color:var(--info); font-weight:600; }
</style>
</head>
<body>
<aside>
  <header>
    <h1>turnlog</h1>
    <div class="filters">
      <select id="status" aria-label="status filter">
        <option value="">all statuses</option>
        <option value="pending">pending</option>
        <option value="in_progress">in progress</option>
        <option value="suspended">suspended</option>
        <option value="completed">completed</option>
      </select>
      <input id="q" type="search" placeholder="search task or workflow" aria-label="search">
    </div>
  </header>
  <ul id="tasks"></ul>
</aside>
<main id="detail"><p class="empty">Pick a task on the left to see its timeline.</p></main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let selected = decodeURIComponent(location.hash.slice(1)) || null;
let taskTimer = null;

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') n.className = v; else n.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) n.append(typeof c === 'string' ? document.createTextNode(c) : c);
  return n;
}
function dur(ms) {
  if (ms < 1000) return Math.round(ms) + 'ms';
  if (ms < 60000) return (ms / 1000).toFixed(2) + 's';
  return Math.floor(ms / 60000) + 'm' + String(Math.floor(ms / 1000) % 60).padStart(2, '0') + 's';
}
function statusBadge(t) {
  const bad = t.corrupt || (t.outcome && t.outcome !== 'succeeded');
  return el('span', { class: 'badge ' + t.status + (bad ? ' bad' : '') }, t.status.replace('_', ' ') + (t.outcome ? ' (' + t.outcome + ')' : '') + (t.corrupt ? ' [corrupt]' : ''));
}
function pretty(p) {
  if (p === null || p === undefined) return '';
  if ('value' in p) return JSON.stringify(p.value, null, 2) ?? 'undefined';
  if ('undecodable' in p) return '<' + p.encoding + ': cannot decode without its codec (pass --codecs)>';
  return '<' + p.encoding + ', base64> ' + p.base64;
}
async function getJSON(url) {
  const res = await fetch(url, { cache: 'no-store' });
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ? body.error.message : res.statusText);
  return body;
}

function taskMeta(t) {
  return [statusBadge(t), ' ' + t.workflow + ' · turn ' + t.turn + ' · ' + t.lastEventId + ' events'];
}

async function loadTasks() {
  const params = new URLSearchParams();
  if ($('status').value) params.set('status', $('status').value);
  if ($('q').value.trim()) params.set('q', $('q').value.trim());
  const list = $('tasks');
  try {
    const page = await getJSON('/api/tasks?' + params);
    list.replaceChildren(...page.tasks.map((t) => {
      const li = el('li', { 'data-task': t.taskId, class: t.taskId === selected ? 'selected' : '' },
        el('div', { class: 'id' }, t.taskId),
        el('div', { class: 'meta' }, ...taskMeta(t)));
      li.onclick = () => { location.hash = encodeURIComponent(t.taskId); };
      return li;
    }));
    if (page.tasks.length === 0) list.replaceChildren(el('li', { class: 'empty' }, params.toString() ? 'No tasks match this filter.' : 'No tasks in this store yet.'));
  } catch (err) {
    list.replaceChildren(el('li', { class: 'error' }, 'Cannot list tasks: ' + err.message));
  }
}

function markClass(type, e) {
  if (type === 'WorkerKilled') return 'kill';
  if (type === 'WorkerCrashed') return 'crash';
  if (type === 'TimeoutCancelRequested' || type === 'TurnTimedOut') return 'timeout';
  if (e && e.type === 'TurnStarted' && e.entryMode === 'recovered') return 'recovery';
  if (type === 'TurnExitedForRecovery') return 'recovery';
  return '';
}

function renderTurn(t, data) {
  const rec = data.recoveries.filter((r) => r.turn === t.turn);
  const outcome = t.outcome ? t.outcome.type.replace('Turn', '').replace(/([a-z])([A-Z])/g, '$1 $2').toLowerCase() + ' after ' + dur(t.outcome.durationMs) + (t.outcome.detail ? ': ' + t.outcome.detail : '') : null;
  return el('section', { class: 'turn', 'data-turn': String(t.turn) },
    el('div', { class: 'head' },
      el('strong', {}, 'Turn ' + t.turn),
      el('span', { class: 'summary' }, 'inputs ' + t.inputIds.join(', ')),
      t.steered && el('span', { class: 'mark steer' }, 'steered'),
      outcome ? el('span', { class: 'outcome' }, outcome) : el('span', { class: 'live' }, 'running…')),
    ...t.attempts.map((a) => el('div', { class: 'attempt' },
      'attempt ' + a.attempt + ' · ' + a.entryMode + ' · ' + a.executor + ' pid ' + a.pid + (a.ended ? ' · ' + a.ended.kind + ': ' + a.ended.detail : ''))),
    t.steps.length ? el('table', { class: 'steps' }, ...t.steps.map((s) => el('tr', { class: 'step', 'data-step': s.name },
      el('td', { class: 'mono' }, '#' + s.seq),
      el('td', {}, s.name),
      el('td', { class: 'mono' }, dur(s.durationMs)),
      el('td', {}, s.ok ? el('details', {}, el('summary', {}, 'result'), el('pre', {}, pretty(s.result))) : el('span', { class: 'mark kill' }, 'failed: ' + s.error))))) : null,
    t.checkpoints ? el('span', { class: 'mark' }, t.checkpoints + ' checkpoint(s)') : null,
    t.markerEventId !== null ? el('span', { class: 'mark timeout' }, 'timeout marker (event ' + t.markerEventId + ')') : null,
    t.kills ? el('span', { class: 'mark kill' }, 'worker killed ×' + t.kills) : null,
    t.crashes ? el('span', { class: 'mark crash' }, 'worker crashed ×' + t.crashes) : null,
    ...rec.map((r) => el('div', { class: 'recovery-line' },
      el('span', { class: 'mark recovery', 'data-rule': r.rule }, 'recovery: rule ' + r.rule + ' (event ' + r.eventId + ')'),
      el('span', { class: 'summary' }, ' ' + r.reason))));
}

function renderTask(data) {
  const t = data.task;
  const start = t.createdAt;
  const parts = [
    el('h2', {}, t.taskId),
    el('div', { class: 'summary' }, statusBadge(t), ' ' + t.workflow + ' (' + t.kind + ') · turn ' + t.turn + ' · ' + t.queued + ' queued · ' + t.lastEventId + ' events',
      t.status !== 'completed' ? el('span', { class: 'live' }, ' · live') : null),
  ];
  if (data.unreadable) parts.push(el('p', { class: 'error' }, 'Unreadable history (' + data.unreadable.code + '): ' + data.unreadable.message + ' Shown: the events before it.'));
  if (data.decision) parts.push(el('div', { class: 'decision', 'data-rule': data.decision.decision.rule }, 'Decision now: ' + data.decision.explanation));
  parts.push(el('h3', {}, 'Turns'));
  if (data.turns.length === 0) parts.push(el('p', { class: 'empty' }, 'No turn has started yet.'));
  parts.push(...data.turns.map((turn) => renderTurn(turn, data)));
  if (data.queued.length) {
    parts.push(el('h3', {}, 'Queued inputs'));
    parts.push(...data.queued.map((q) => el('div', {}, el('span', { class: 'mono' }, q.inputId), q.steering ? el('span', { class: 'mark steer' }, 'steering') : null, el('pre', {}, pretty(q.input)))));
  }
  parts.push(el('h3', {}, 'Events'));
  const recoveryIds = new Set(data.recoveries.map((r) => r.eventId));
  parts.push(el('ol', { class: 'events' }, ...data.timeline.map((e, i) => {
    const cls = markClass(e.type, data.events[i]) || (recoveryIds.has(e.eventId) ? 'recovery' : '');
    const indent = e.turn !== null && !(e.type === 'TurnStarted' || data.events[i] && /^Turn(Completed|Failed|Suspended|Cancelled|TimedOut|ExitedForRecovery)$/.test(e.type));
    return el('li', { class: cls, 'data-type': e.type, 'data-event': String(e.eventId) },
      el('details', {},
        el('summary', { class: indent ? 'in' : '' }, el('span', { class: 't mono' }, e.eventId + ' +' + dur(e.time - start)), ' ' + e.text),
        el('pre', {}, JSON.stringify(data.events[i], null, 2))));
  })));
  $('detail').replaceChildren(...parts);
}

async function loadTask() {
  clearTimeout(taskTimer);
  if (!selected) return;
  const id = selected;
  try {
    const data = await getJSON('/api/tasks/' + encodeURIComponent(id));
    if (id !== selected) return;
    // Keep expanded payloads open across live refreshes.
    const key = (d) => { const h = d.closest('[data-event],[data-step]'); return h ? (h.dataset.event || 's:' + h.dataset.step) : ''; };
    const open = new Set([...document.querySelectorAll('#detail details[open]')].map(key));
    renderTask(data);
    // The list refreshes every 2 s; keep the open task's entry in step with its timeline.
    const meta = document.querySelector('#tasks li[data-task="' + CSS.escape(id) + '"] .meta');
    if (meta) meta.replaceChildren(...taskMeta(data.task));
    for (const d of document.querySelectorAll('#detail details')) if (open.has(key(d))) d.open = true;
    if (data.task.status !== 'completed') taskTimer = setTimeout(loadTask, 500);
  } catch (err) {
    if (id !== selected) return;
    $('detail').replaceChildren(el('p', { class: 'error' }, 'Cannot load task ' + id + ': ' + err.message));
    taskTimer = setTimeout(loadTask, 2000);
  }
}

function select() {
  selected = decodeURIComponent(location.hash.slice(1)) || null;
  for (const li of document.querySelectorAll('#tasks li[data-task]')) li.classList.toggle('selected', li.dataset.task === selected);
  loadTask();
}
window.addEventListener('hashchange', select);
$('status').onchange = loadTasks;
$('q').oninput = loadTasks;
loadTasks();
setInterval(loadTasks, 2000);
select();
</script>
</body>
</html>
`;
