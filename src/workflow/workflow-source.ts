/**
 * Where workflows are listed: an array, or a module namespace (`import * as workflows`) whose
 * exports include workflows (named exports, arrays, a default export). One reading for the
 * engine, the test engine, replay, the CLI and the worker process. No imports with I/O: the
 * worker loads this file at start-up.
 */
import type { Workflow } from './define-workflow.js';

/** Workflows: a list, or a module namespace whose exports include workflows (other exports are ignored). */
export type WorkflowSource = readonly Workflow<any, any, any, any>[] | Readonly<Record<string, unknown>>;

/** True for a value made by `defineWorkflow` (duck-typed: works across copies of the package). */
export function isWorkflow(v: unknown): v is Workflow<any, any, any, any> {
  if (typeof v !== 'object' || v === null) return false;
  const w = v as Partial<Workflow>;
  return typeof w.name === 'string' && typeof w.turn === 'function' && typeof w.kind === 'string' && typeof w.policy === 'object';
}

/**
 * Every workflow in `source`, in order, each object once: list items, or a namespace's export
 * values and the items of exported arrays (a default array). Same-named distinct objects stay.
 */
export function workflowList(source: WorkflowSource): Workflow<any, any, any, any>[] {
  const out: Workflow<any, any, any, any>[] = [];
  const seen = new Set<unknown>();
  const add = (v: unknown, depth: number): void => {
    if (isWorkflow(v)) {
      if (!seen.has(v)) out.push(v);
      seen.add(v);
    } else if (Array.isArray(v) && depth < 2) for (const x of v) add(x, depth + 1);
    else if (depth === 0 && typeof v === 'object' && v !== null) for (const x of Object.values(v)) add(x, depth + 1);
  };
  add(source, 0);
  return out;
}

/** Workflows by name from a list or a module (named exports, arrays, a default export); the last of a name wins. */
export function workflowMap(source: WorkflowSource): Map<string, Workflow<any, any, any, any>> {
  return new Map(workflowList(source).map((w) => [w.name, w]));
}
