/**
 * Lineage of a task (docs/children.md): its parent, from its TaskCreated, and the children its
 * turns started, from ChildStarted / ChildEnded. Pure; `turnlog show` and the page render it.
 */
import type { ChildStatus, HistoryEvent, TaskParent } from '../history/events.js';

/** One child a task started, as its history tells it. */
export interface ChildView {
  childId: string;
  workflow: string;
  turn: number;
  seq: number;
  /** Started with `{ cancelWithParent: false }`. */
  detached: boolean;
  startedEventId: number;
  /** The outcome the parent recorded (its last ChildEnded); `running` before one. */
  status: ChildStatus | 'running';
  endedEventId: number | null;
}

export interface LineageView {
  parent: TaskParent | null;
  children: ChildView[];
}

/** The parent and the children of the task whose history is `events`. */
export function lineage(events: readonly HistoryEvent[]): LineageView {
  let parent: TaskParent | null = null;
  const children = new Map<string, ChildView>();
  for (const e of events) {
    if (e.type === 'TaskCreated' && e.parent) parent = e.parent;
    else if (e.type === 'ChildStarted') {
      children.set(e.childId, { childId: e.childId, workflow: e.workflow, turn: e.turn, seq: e.seq, detached: e.detached, startedEventId: e.eventId, status: 'running', endedEventId: null });
    } else if (e.type === 'ChildEnded') {
      const c = children.get(e.childId);
      if (c) children.set(e.childId, { ...c, status: e.status, endedEventId: e.eventId });
    }
  }
  return { parent, children: [...children.values()] };
}

/** Text lines for `turnlog show`: the parent, then one line per child. Empty for a task with neither. */
export function lineageLines(l: LineageView): string[] {
  const out: string[] = [];
  if (l.parent) out.push(`parent    ${l.parent.taskId} (turn ${l.parent.turn}, call ${l.parent.seq}${l.parent.detached ? ', not cancelled with it' : ''})`);
  if (l.children.length > 0) {
    out.push(`children  ${l.children.length}`);
    for (const c of l.children) out.push(`  ${c.childId}  ${c.workflow}  ${c.status}  (turn ${c.turn}, call ${c.seq}${c.detached ? ', detached' : ''})`);
  }
  return out;
}
