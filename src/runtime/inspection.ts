/**
 * What a live engine answers on its inspection socket (docs/cli.md#live-inspection): the read
 * side of its own open store, its clock, and operator actions through its public methods. The
 * CLI never opens the store, so the engine stays its only writer (invariant 2).
 */
import { TurnlogError } from '../errors.js';
import type { ListOptions, ReadOptions } from '../store/history-store.js';
import { inspectStoreDir } from '../store/store-dir.js';
import { encodeEvents } from '../inspect/protocol.js';
import { serveInspection, type InspectHandler, type InspectServer } from '../inspect/server.js';
import type { Runtime } from './runtime.js';

/** The engine's operator actions, as the socket calls them (implemented by the engine). */
export type ActionHandler = (op: string, args: Record<string, unknown>) => Promise<unknown> | undefined;

function str(args: Record<string, unknown>, key: string): string {
  const v = args[key];
  if (typeof v !== 'string') throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Inspection request is missing the string ${key}.`);
  return v;
}

/** The request handler over the runtime's store and clock; `actions` answers everything else. */
export function inspectionHandler(rt: Runtime, actions: ActionHandler): InspectHandler {
  return async (op, args) => {
    const store = rt.store;
    switch (op) {
      case 'hello':
        return { owner: rt.owner, instance: rt.instance, pid: process.pid };
      case 'now':
        return rt.clock.now();
      case 'readEvents':
        return encodeEvents(await store.readEvents(str(args, 'taskId'), (args['options'] ?? {}) as ReadOptions));
      case 'getSummary':
        return (await store.getSummary(str(args, 'taskId'))) ?? null;
      case 'listTasks':
        return store.listTasks((args['options'] ?? {}) as ListOptions);
      case 'getLease':
        return (await store.getLease(str(args, 'taskId'))) ?? null;
      case 'getSnapshot': {
        const s = await store.getSnapshot(str(args, 'taskId'));
        return s ? { eventId: s.eventId, data: Buffer.from(s.data).toString('base64') } : null;
      }
      case 'listCorrupt':
        return store.listCorrupt();
      default: {
        const done = actions(op, args);
        if (done === undefined) throw new TurnlogError('TURNLOG_INVALID_ARGUMENT', `Unknown inspection request ${op}; the CLI and the engine may be different turnlog versions.`);
        return done;
      }
    }
  };
}

/**
 * Serves inspection when enabled and the store is a LevelDB directory (an exclusive store the
 * CLI cannot open beside the engine). PostgreSQL needs none: the CLI reads it directly.
 */
export async function startInspection(rt: Runtime, enabled: boolean, actions: ActionHandler): Promise<InspectServer | undefined> {
  const store = rt.store;
  if (!enabled || !store.exclusive) return undefined;
  if ((await inspectStoreDir(store.location).catch(() => 'missing')) !== 'store') return undefined;
  return serveInspection(store.location, inspectionHandler(rt, actions), rt.log);
}
