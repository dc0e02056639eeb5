/**
 * LangGraph JS with its SQLite checkpointer (better-sqlite3). A one-step workflow is a graph of
 * one node on a new thread; a 100-step workflow one node looping 100 times (a checkpoint per
 * superstep); a conversation a thread, a turn one invoke on it. durability 'sync' (each
 * checkpoint written before the next step) and PRAGMA synchronous=FULL: better-sqlite3 builds
 * WAL mode with synchronous=NORMAL, which does not sync each commit; FULL matches the others.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Annotation, END, START, StateGraph } from '@langchain/langgraph';
import { SqliteSaver } from '@langchain/langgraph-checkpoint-sqlite';
import { labelOf, pkgVersion } from './common.mjs';

const version = pkgVersion('@langchain/langgraph');
export const info = {
  label: `${labelOf('LangGraph', version)} + SQLite`,
  version,
  notes: `checkpointer ${pkgVersion('@langchain/langgraph-checkpoint-sqlite')}, better-sqlite3 ${pkgVersion('better-sqlite3')}, durability sync, synchronous=FULL`,
};

export async function open() {
  const dir = mkdtempSync(join(tmpdir(), 'turnlog-peers-langgraph-'));
  const saver = SqliteSaver.fromConnString(join(dir, 'checkpoints.db'));
  saver.db.pragma('synchronous = FULL');
  const State = Annotation.Root({ x: Annotation(), i: Annotation() });
  const one = new StateGraph(State)
    .addNode('s', (s) => ({ x: s.x + 1 }))
    .addEdge(START, 's')
    .addEdge('s', END)
    .compile({ checkpointer: saver });
  const many = new StateGraph(State)
    .addNode('s', (s) => ({ i: s.i + 1 }))
    .addEdge(START, 's')
    .addConditionalEdges('s', (s) => (s.i < 100 ? 's' : END))
    .compile({ checkpointer: saver });
  let n = 0;
  const cfg = (thread) => ({ configurable: { thread_id: thread }, durability: 'sync', recursionLimit: 1000 });
  return {
    workflow100: () => many.invoke({ i: 0, x: 0 }, cfg(`m${n++}`)),
    oneStep: (i) => one.invoke({ x: i, i: 0 }, cfg(`o${i}`)),
    conversations: (k) => Array.from({ length: k }, (_, i) => `c${i}`),
    turn: (c, i) => one.invoke({ x: i, i: 0 }, cfg(c)),
    async close() {
      saver.db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
