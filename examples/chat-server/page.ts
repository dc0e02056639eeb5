/**
 * The chat page: one HTML document, no build step. It posts messages and follows the task's
 * stream over Server-Sent Events; the transcript and the last offset live in sessionStorage, so
 * a reload carries on from the offset (EventSource resends it as Last-Event-ID on reconnects).
 */
export const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>turnlog chat</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; color: #1d2330; }
  h1 { font-size: 1.2rem; }
  #log { border: 1px solid #d5d9e2; border-radius: 8px; padding: 1rem; min-height: 18rem; background: #fafbfc; }
  .msg { margin: .5rem 0; padding: .5rem .75rem; border-radius: 8px; white-space: pre-wrap; }
  .user { background: #dbe8ff; margin-left: 20%; }
  .user.steer::before { content: "steering · "; color: #5a6b8c; font-size: .85em; }
  .assistant { background: #fff; border: 1px solid #e3e6ec; margin-right: 20%; }
  .assistant.streaming::after { content: "▍"; color: #7a8599; }
  .note { color: #5a6b8c; font-size: .85em; margin: .25rem 0 .25rem .5rem; }
  .note.restart { color: #a34a00; }
  form { display: flex; gap: .5rem; margin-top: 1rem; }
  input { flex: 1; padding: .5rem; font: inherit; }
  #status { font-size: .8em; color: #7a8599; margin-top: .5rem; }
</style>
</head>
<body>
<h1>turnlog chat <small id="task"></small></h1>
<div id="log"></div>
<form id="form"><input id="text" autocomplete="off" placeholder="My order 1042 arrived broken, can I get a refund?"><button id="send">Send</button></form>
<div id="status">connecting…</div>
<script>
const params = new URLSearchParams(location.search);
const task = params.get('task') || 'chat-demo';
document.getElementById('task').textContent = '· ' + task;
const log = document.getElementById('log');
const key = 'turnlog-chat:' + task;
const saved = JSON.parse(sessionStorage.getItem(key) || '{}');
if (saved.html) log.innerHTML = saved.html;
let offset = saved.offset || '';
let bubble = log.querySelector('.assistant.streaming');

function save() { sessionStorage.setItem(key, JSON.stringify({ html: log.innerHTML, offset })); }
function add(cls, text) {
  const el = document.createElement('div');
  el.className = cls;
  el.textContent = text;
  log.appendChild(el);
  return el;
}
function assistant(turn, attempt) {
  if (bubble) bubble.classList.remove('streaming');
  bubble = add('msg assistant streaming', '');
  bubble.dataset.turn = turn;
  bubble.dataset.attempt = attempt;
  return bubble;
}

function render(item) {
  switch (item.kind) {
    case 'input-queued': add('msg user' + (item.steering ? ' steer' : ''), item.input); break;
    case 'turn-started': assistant(item.turn, 1); break;
    case 'attempt-restarted':
      add('note restart', 'The server restarted mid-answer (' + item.reason + '): attempt ' + item.attempt + ' starts the answer over.');
      assistant(item.turn, item.attempt);
      break;
    case 'chunk': (bubble || assistant(item.turn, item.attempt)).textContent += item.data; break;
    case 'step-started': add('note tool', 'calling the ' + item.name + ' tool…'); break;
    case 'step-completed':
      add('note tool-done', item.failure ? item.name + ' failed: ' + item.failure.message : item.name + ' done: $' + item.result.amount + ' for order ' + item.result.orderId);
      break;
    case 'inputs-taken': if (item.inputIds.length) add('note', 'took ' + item.inputIds.length + ' steering message(s)'); break;
    case 'gap': add('note', '… some output was missed here'); break;
    case 'turn-ended':
      if (bubble) { bubble.classList.remove('streaming'); bubble.dataset.ended = item.status; }
      bubble = null;
      add('note ended', 'turn ' + item.turn + ' ' + item.status);
      break;
  }
}

function connect() {
  const es = new EventSource('/api/stream?task=' + encodeURIComponent(task) + (offset ? '&from=' + encodeURIComponent(offset) : ''));
  es.onopen = () => { document.getElementById('status').textContent = 'connected'; };
  es.onmessage = (ev) => {
    const item = JSON.parse(ev.data);
    render(item);
    offset = item.offset;
    save();
    log.scrollTop = log.scrollHeight;
  };
  // EventSource reconnects by itself (with Last-Event-ID); a new URL carries the offset too.
  es.addEventListener('reset', () => { log.innerHTML = ''; offset = ''; bubble = null; save(); });
  es.onerror = () => { document.getElementById('status').textContent = 'reconnecting…'; };
}

document.getElementById('form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const input = document.getElementById('text');
  const text = input.value.trim() || input.placeholder;
  input.value = '';
  const r = await fetch('/api/messages?task=' + encodeURIComponent(task), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ text }) });
  if (!r.ok) add('note', 'not sent: ' + (await r.text()));
});
connect();
</script>
</body>
</html>
`;
