/**
 * `npm run bench:peers`: installs bench/peers' own dependencies when they are missing or stale
 * (never part of the root's install), then runs every peer one after another, each in its own
 * child process (harness.mjs), and prints one table of medians and ratios to the floor.
 *
 *   node bench/peers/run.mjs [--write docs/performance.md] [peer …]
 *   PEERS_WORKLOADS=replay node bench/peers/run.mjs floor turnlog-level   (some workloads only; no --write)
 *
 * A peer that fails to install or run is a column saying so, never dropped. --write replaces
 * the text between the BENCH:PEERS markers of the given file with the table.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const PEERS = ['floor', 'turnlog-level', 'turnlog-pg', 'dbos', 'restate', 'langgraph', 'temporal'];
const args = process.argv.slice(2);
const writeAt = args.includes('--write') ? args[args.indexOf('--write') + 1] : undefined;
const only = args.filter((a, i) => !a.startsWith('--') && args[i - 1] !== '--write');
const TIMEOUT_MS = Number(process.env.PEERS_TIMEOUT_MS ?? 20 * 60_000);
if (writeAt && process.env.PEERS_WORKLOADS) throw new Error('--write needs every workload: unset PEERS_WORKLOADS');

/** npm ci in bench/peers unless node_modules was installed from this very lock (a stamp holds its hash). */
function install() {
  const hash = createHash('sha256').update(readFileSync(join(here, 'package-lock.json'))).digest('hex');
  const stamp = join(here, 'node_modules', '.turnlog-peers-lock');
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8') !== hash) {
    console.log('bench/peers: installing its own dependencies (npm ci; better-sqlite3 builds from source when no prebuilt binary can be fetched) …');
    execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: here, stdio: 'inherit' });
    writeFileSync(stamp, hash);
  }
  try {
    execFileSync(process.execPath, ['-e', "require('better-sqlite3')(':memory:').close()"], { cwd: here, stdio: 'ignore' });
  } catch {
    console.log('bench/peers: better-sqlite3 has no native module for this Node; npm rebuild better-sqlite3 …');
    execFileSync('npm', ['rebuild', 'better-sqlite3'], { cwd: here, stdio: 'inherit' });
  }
}

/** Runs one peer in its own process; resolves to its result or to { error }. */
function runPeer(name) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--expose-gc', join(here, 'harness.mjs'), name], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err = (err + d).slice(-8000)));
    const timer = setTimeout(() => child.kill('SIGKILL'), TIMEOUT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('@@result '));
      if (line) return resolve(JSON.parse(line.slice('@@result '.length)));
      const why = signal === 'SIGKILL' ? `timed out after ${TIMEOUT_MS / 60_000} min` : `exited ${code ?? signal}`;
      const last = (err || out).trim().split('\n').filter((l) => /error|Error|cannot|Cannot|failed/.test(l)).slice(0, 2).join(' / ');
      resolve({ peer: name, label: name, error: `${why}${last ? `: ${last.slice(0, 300)}` : ''}` });
    });
  });
}

// Rows: [key, title, unit, kind]; kind 'time' (lower is better) or 'rate' (higher is better).
const ROWS = [
  ['step100', 'per step, 100-step workflow (start → result ÷ 100)', 'µs', 'time'],
  ['single', 'one new 1-step workflow, start → result', 'ms', 'time'],
  ['flight10', '1,000 new 1-step workflows, 10 in flight', '/s', 'rate'],
  ['flight100', '1,000 new 1-step workflows, 100 in flight', '/s', 'rate'],
  ['turns', '1,000 turns over 100 existing conversations', 'turns/s', 'rate'],
  ['replay', 'replay a recorded 100-step history', 'µs', 'time'],
];

const fmt = (v, unit) => {
  const digits = unit === 'ms' ? 2 : 0;
  return `${v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })}${unit === '/s' || unit === 'turns/s' ? '/s' : ` ${unit}`}`;
};

function table(results) {
  const floor = results.find((r) => r.peer === 'floor');
  const head = ['work', ...results.map((r) => r.label)];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`];
  for (const [key, title, unit, kind] of ROWS) {
    const cells = results.map((r) => {
      if (r.error) return 'failed (below)';
      const m = r.results[key];
      if (!m) return '—';
      const base = floor && !floor.error ? floor.results[key]?.median : undefined;
      const ratio = base === undefined || r.peer === 'floor' ? '' : ` (${(m.median / base).toFixed(2)}×)`;
      return `${fmt(m.median, unit)}${ratio}`;
    });
    lines.push(`| ${title} | ${cells.join(' | ')} |`);
  }
  return lines.join('\n');
}

function goals(results) {
  const by = Object.fromEntries(results.filter((r) => !r.error).map((r) => [r.peer, r.results]));
  const t = by['turnlog-level'];
  const f = by.floor;
  if (!t || !f) return ['goals: turnlog (LevelDB) or the floor did not run'];
  const line = (name, value, target, met) => `- ${name}: ${value} (goal ${target}) — ${met ? 'met' : '**missed**'}`;
  const out = [];
  if (t.step100 && f.step100) {
    const step = t.step100.median / f.step100.median;
    out.push(line('per durable step vs the floor', `${step.toFixed(2)}×`, '≤ 1.2×', step <= 1.2));
  }
  if (t.single && f.single) {
    const single = t.single.median / f.single.median;
    out.push(line('new one-step task, start → result, vs the floor', `${single.toFixed(2)}×`, '≤ 1.4×', single <= 1.4));
  }
  if (t.flight100 && f.flight100) {
    const g = t.flight100.median / f.flight100.median;
    out.push(line('1,000 new one-step tasks, 100 in flight, vs the floor', `${g.toFixed(2)}× its rate`, '≥ 2×', g >= 2));
  }
  if (t.flight100 && by.dbos?.flight100) {
    const d = t.flight100.median / by.dbos.flight100.median;
    out.push(line('the same vs DBOS', `${d.toFixed(1)}× its rate`, '≥ 10×', d >= 10));
  }
  const spreads = Object.entries(t).map(([k, m]) => [k, m.spread]);
  const worst = spreads.reduce((a, b) => (b[1] > a[1] ? b : a));
  out.push(line('spread between rounds (slowest / fastest round), worst turnlog row', `${worst[1].toFixed(2)}× (${worst[0]})`, '< 1.5×', worst[1] < 1.5));
  return out;
}

function machine() {
  const c = cpus();
  return `${c.length} × ${c[0]?.model.trim() ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

install();
const results = [];
for (const name of only.length ? only : PEERS) {
  process.stdout.write(`${name} … `);
  const r = await runPeer(name);
  results.push(r);
  console.log(r.error ? `failed: ${r.error}` : 'done');
}
const rounds = process.env.PEERS_ROUNDS ?? '5';
const report = [
  `Medians of ${rounds} rounds run one after another, each peer in its own process, on ${machine()}.`,
  'Ratios in brackets are to the floor: for times, time ÷ the floor\'s (lower is better); for rates, rate ÷ the floor\'s (higher is better).',
  '',
  table(results),
  '',
  ...goals(results),
  '',
  ...results.map((r) => `- ${r.label}: ${r.error ? `**failed**: ${r.error}` : (r.notes ?? '')}`),
].join('\n');
console.log(`\n${report}`);
if (writeAt) {
  const file = readFileSync(writeAt, 'utf8');
  const re = /(<!-- BENCH:PEERS:START -->\n)[\s\S]*?(\n<!-- BENCH:PEERS:END -->)/;
  if (!re.test(file)) throw new Error(`${writeAt} has no <!-- BENCH:PEERS:START --> … <!-- BENCH:PEERS:END --> markers`);
  writeFileSync(writeAt, file.replace(re, `$1${report}$2`));
  console.log(`\nwritten into ${writeAt}`);
}
