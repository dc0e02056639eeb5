/**
 * Runs the workloads of issue #16 on one peer, in this process, and prints one JSON line:
 * `node harness.mjs <peer>`. A peer module (peers/<name>.mjs) exports `open()`, resolving to
 * an adapter; a workload whose method the adapter lacks is reported as not applicable.
 *
 *   workflow100()     a new 100-step workflow, start → result
 *   oneStep(i)        a new one-step workflow, start → result (i is unique in the process)
 *   conversations(n)  opens n conversations (not measured); turn(conv, i) runs one turn on one
 *   replay100()       replays a recorded 100-step history once; returns its event count
 *   close()
 *
 * Each workload warms up (its warm-up repeated for at least WARM_MS: the JIT tiers a peer's code
 * up over thousands of calls, turnlog's step path over ~2,500 steps, and rounds measured before
 * that time a process's first seconds), then runs ROUNDS times one after another; a round's figure
 * is the median (latencies) or the rate of the round; the result is the median of the rounds
 * and the spread (slowest round / fastest). Every round of every workload starts from a
 * collected heap when the process runs with --expose-gc (run.mjs starts it so): no round pays
 * for the garbage the workload before it left. The collection is `gc({ type: 'major' })`, one
 * full GC: a bare `gc()` collects "all available garbage", which also drops every map no live
 * object has (V8 keeps those for two ordinary GCs), and each optimized function that depended
 * on one is deoptimized: ~75 of turnlog's a round, so each round re-ran its tier-up
 * (docs/performance.md, "Allocation and GC per turn"). A replay round is at least REPLAYS replays and
 * at least REPLAY_ROUND_MS, timed together, so a sub-millisecond replay is not measured by a
 * round shorter than one garbage collection.
 *
 * PEERS_WORKLOADS=replay,single (names as in WORKLOADS) runs only those workloads. Each result
 * also lists `cpuShare`: per round, this process's CPU time over the round's wall time.
 */
import { performance } from 'node:perf_hooks';

const ROUNDS = Number(process.env.PEERS_ROUNDS ?? 5);
const SINGLES = 20; // one-step workflows one after another, per round
const MANY = 1000; // one-step workflows per round at 10 and at 100 in flight
const CONVERSATIONS = 100;
const TURNS = 1000; // per round, over the conversations
const REPLAYS = 20; // 100-step histories replayed per round, at least
const REPLAY_ROUND_MS = Number(process.env.PEERS_REPLAY_ROUND_MS ?? 500); // and for at least this long
const WARM_MS = Number(process.env.PEERS_WARM_MS ?? 3000); // each workload's warm-up, at least
const ONLY = process.env.PEERS_WORKLOADS ? new Set(process.env.PEERS_WORKLOADS.split(',')) : undefined;

const now = () => performance.now();
export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

let seq = 0;
/** Runs `count` calls of `fn(i)` with at most `inFlight` at once; returns calls per second. */
async function inFlightRate(count, inFlight, fn) {
  let next = 0;
  const t0 = now();
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) {
        next++;
        await fn(seq++);
      }
    }),
  );
  return count / ((now() - t0) / 1000);
}

const WORKLOADS = {
  /** µs per step of a 100-step workflow, start → result (3 of them per round). */
  step100: {
    needs: ['workflow100'],
    async round(a) {
      const xs = [];
      for (let i = 0; i < 3; i++) {
        const t0 = now();
        await a.workflow100();
        xs.push(((now() - t0) * 1000) / 100);
      }
      return median(xs);
    },
    warm: (a) => a.workflow100(),
  },
  /** ms from start to result of one new one-step workflow, one after another. */
  single: {
    needs: ['oneStep'],
    async round(a) {
      const xs = [];
      for (let i = 0; i < SINGLES; i++) {
        const t0 = now();
        await a.oneStep(seq++);
        xs.push(now() - t0);
      }
      return median(xs);
    },
    warm: async (a) => {
      for (let i = 0; i < SINGLES; i++) await a.oneStep(seq++);
    },
  },
  /** one-step workflows per second, 1,000 new ones with 10 in flight. */
  flight10: { needs: ['oneStep'], round: (a) => inFlightRate(MANY, 10, (i) => a.oneStep(i)), warm: (a) => inFlightRate(100, 10, (i) => a.oneStep(i)) },
  /** the same with 100 in flight. */
  flight100: { needs: ['oneStep'], round: (a) => inFlightRate(MANY, 100, (i) => a.oneStep(i)), warm: (a) => inFlightRate(200, 100, (i) => a.oneStep(i)) },
  /** turns per second: 1,000 turns over 100 existing conversations, each conversation's turns in order. */
  turns: {
    needs: ['conversations', 'turn'],
    async round(a, convs) {
      const t0 = now();
      const per = TURNS / convs.length;
      await Promise.all(
        convs.map(async (c) => {
          for (let i = 0; i < per; i++) await a.turn(c, seq++);
        }),
      );
      return TURNS / ((now() - t0) / 1000);
    },
    warm: async (a, convs) => Promise.all(convs.map((c) => a.turn(c, seq++))),
  },
  /** µs to replay one recorded 100-step history. */
  replay: {
    needs: ['replay100'],
    async round(a) {
      const t0 = now();
      let events = 0;
      let n = 0;
      while (n < REPLAYS || now() - t0 < REPLAY_ROUND_MS) {
        events = await a.replay100();
        n++;
      }
      return { value: ((now() - t0) * 1000) / n, events };
    },
    // As long as a round: five replays left the first round to pay the JIT's tier-up (2–3× the others).
    warm: (a) => WORKLOADS.replay.round(a),
  },
};

export async function runPeer(name) {
  const mod = await import(new URL(`./peers/${name}.mjs`, import.meta.url).href);
  const info = mod.info ?? {};
  const a = await mod.open();
  const results = {};
  try {
    const convs = typeof a.conversations === 'function' ? await a.conversations(CONVERSATIONS) : [];
    const active = Object.entries(WORKLOADS).filter(([key, w]) => (!ONLY || ONLY.has(key)) && w.needs.every((m) => typeof a[m] === 'function'));
    for (const [key, w] of active) {
      const t0 = now();
      do await w.warm(a, convs);
      while (now() - t0 < WARM_MS);
    }
    const rounds = Object.fromEntries(active.map(([key]) => [key, []]));
    const extra = {};
    const cpuShare = {};
    for (let r = 0; r < ROUNDS; r++) {
      for (const [key, w] of active) {
        globalThis.gc?.({ type: 'major' });
        const c0 = process.cpuUsage();
        const t0 = now();
        const v = await w.round(a, convs);
        // This process's CPU over the round's wall time: well below 1, the round mostly waited (for
        // a core on a loaded machine, or for a server's work, which runs in another process).
        const c = process.cpuUsage(c0);
        (cpuShare[key] ??= []).push((c.user + c.system) / 1000 / (now() - t0));
        if (typeof v === 'object') {
          rounds[key].push(v.value);
          extra[key] = v;
        } else rounds[key].push(v);
      }
    }
    for (const [key, xs] of Object.entries(rounds)) {
      results[key] = { median: median(xs), spread: Math.max(...xs) / Math.min(...xs), rounds: xs, cpuShare: cpuShare[key], ...(extra[key]?.events ? { events: extra[key].events } : {}) };
    }
  } finally {
    await a.close();
  }
  return { peer: name, label: info.label ?? name, version: info.version, notes: info.notes, results };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const name = process.argv[2];
  const out = await runPeer(name);
  process.stdout.write(`\n@@result ${JSON.stringify(out)}\n`);
  // Some SDKs keep sockets or timers open after close(); the result is out, so end here.
  process.exit(0);
}
