/** What several peer modules share: the turnlog build, the 100-step history, the local PostgreSQL. */
import { readFileSync } from 'node:fs';
import { decodeEvent, encodeEvent, defineWorkflow } from '../../../dist/src/index.js';
import { historyBuilder } from '../../../dist/src/testing/index.js';

export { decodeEvent, encodeEvent, defineWorkflow, historyBuilder };

/** postgres://postgres@127.0.0.1:5432/test unless TURNLOG_TEST_PG_URL says otherwise. */
export const PG_URL = process.env.TURNLOG_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Drops a schema a peer made on the local PostgreSQL. */
export async function dropSchema(schema) {
  const { default: pg } = await import('pg');
  const c = new pg.Client({ connectionString: PG_URL });
  await c.connect();
  await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await c.end();
}

/** A recorded one-turn task of 100 steps, as turnlog stores it (what the replay workload replays). */
export function hundredStepHistory(taskId = 'bench-100') {
  const b = historyBuilder(taskId, { tick: 10 }).created({ workflow: 'hundred-steps' }).input('q').turnStarted();
  for (let i = 0; i < 100; i++) b.step(`call-model-${i}`, { text: `q ${i}`, tokens: 42 });
  return b.completed({ tokens: 4200 }).build();
}

/** The handler of the replayed history: 100 model calls, like an agent loop with 100 tool calls. */
export const hundredSteps = defineWorkflow({
  name: 'hundred-steps',
  turn: async (ctx, q) => {
    let tokens = 0;
    for (let i = 0; i < 100; i++) tokens += (await ctx.step(`call-model-${i}`, () => ({ text: `${q} ${i}`, tokens: 42 }))).tokens;
    return { tokens };
  },
});

/** The installed version of a peer package (read from bench/peers/node_modules; not every package exports its package.json). */
export function pkgVersion(name) {
  const file = new URL(`../node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(file, 'utf8')).version;
}

/** "DBOS 5.3" from a name and a full version. */
export const labelOf = (name, version) => `${name} ${version.split('.').slice(0, 2).join('.')}`;
