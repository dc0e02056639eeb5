/**
 * The rooms of src/ and which way imports point (docs/architecture.md), in one table: every
 * src/**\/*.ts file's imports are parsed and each must be allowed by its folder's row. Folders
 * may not import each other in a cycle. The replay folder's purity (no clock, no randomness)
 * is checked in test/replay/boundary.test.ts.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { importsOf } from './helpers/imports.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');

/** A room: a folder of src/, or a root module (`errors`, `logger`, `index`). */
type Room = 'attempt' | 'cli' | 'client' | 'stream' | 'executor' | 'history' | 'internal' | 'replay' | 'runtime' | 'store' | 'testing' | 'timeline' | 'ui' | 'inspect' | 'otel' | 'workflow' | 'errors' | 'logger' | 'index';

/** Which rooms each room may import (besides itself). */
const ROOMS: Record<Room, readonly Room[]> = {
  errors: [],
  logger: ['errors'],
  internal: [],
  history: ['errors', 'internal'],
  replay: ['errors', 'history'],
  store: ['errors', 'history'],
  // The authoring API (turnlog/workflow): light, loaded by every worker.
  workflow: ['errors', 'history'],
  // The turn-attempt contract shared by inline, process and replay executors. internal/: the wire
  // layer its call table (attempt/calls.ts) encodes worker records, acks and recorded calls with.
  attempt: ['errors', 'history', 'internal', 'workflow'],
  // Types only: the client API a remote client can implement too (no runtime, no cycle).
  client: ['errors', 'history', 'replay', 'stream'],
  // Streaming (docs/streaming.md): stream items and offsets (pure), the hub of live items and readers.
  stream: ['errors', 'history'],
  // internal/: the shared wire layer (internal/wire/) of the worker protocol (main's one wire layer
  // for history fast paths and worker frames; it loads no protobufjs, test/executor/worker-modules).
  executor: ['errors', 'history', 'internal', 'attempt', 'workflow', 'logger'],
  // Live inspection (docs/cli.md#live-inspection): the socket protocol, its server (the engine
  // serves it) and its client (a read-only HistoryStore for the CLI).
  inspect: ['errors', 'history', 'store', 'logger'],
  runtime: ['errors', 'history', 'replay', 'store', 'attempt', 'workflow', 'executor', 'client', 'stream', 'logger', 'inspect'],
  // `turnlog/otel`: OpenTelemetry as an EngineObserver; the only importer of @opentelemetry/api.
  otel: ['errors', 'history', 'runtime', 'logger'],
  testing: ['errors', 'history', 'replay', 'store', 'attempt', 'workflow', 'runtime', 'logger'],
  // The timeline a history renders to (turns, attempts, steps, recovery rules): pure, shared by
  // `turnlog show` and the timeline page.
  timeline: ['errors', 'history', 'replay'],
  // The `turnlog ui` page: an HTTP server over a store's read side and the timeline.
  ui: ['errors', 'history', 'store', 'timeline'],
  // Exception: the CLI's `replay` command runs replay testing (testing/), and `show`/`why`
  // describe tasks through the engine's read side (runtime/); store/ for everything else.
  cli: ['errors', 'history', 'replay', 'store', 'workflow', 'runtime', 'testing', 'timeline', 'ui', 'inspect'],
  index: ['errors', 'history', 'replay', 'store', 'workflow', 'client', 'executor', 'runtime', 'stream', 'logger'],
};

/** Packages (not node: builtins) each room may import; every other room imports none. */
const PACKAGES: Partial<Record<Room, RegExp>> = {
  // pg: the PostgreSQL store's optional peer, loaded by import() of a variable the scan cannot read.
  store: /^(level|classic-level|pg)$/,
  internal: /^protobufjs(\/|$)/,
  runtime: /^nanoid$/,
  cli: /^commander$/,
  otel: /^@opentelemetry\/api$/,
};

/** Rooms that must not touch node: builtins at all (pure or loaded everywhere). */
const NO_BUILTINS: readonly Room[] = ['errors', 'replay', 'client', 'workflow', 'internal', 'timeline', 'stream'];

/** The executor's child side runs inside workers: it may reach only these (plus executor/ protocol). */
const CHILD_SIDE = [
  'src/executor/child-main.ts',
  'src/executor/protocol.ts',
  // protocol.ts's parts (it re-exports them).
  'src/executor/protocol-messages.ts',
  'src/executor/protocol-engine-frames.ts',
  'src/executor/protocol-worker-frames.ts',
  'src/executor/frame-reader.ts',
];
// internal/: the wire layer (internal/wire/wire.ts, fields.ts) the protocol encodes frames with.
const CHILD_ROOMS: readonly Room[] = ['errors', 'history', 'internal', 'attempt', 'workflow'];

/**
 * Type-only imports allowed against the table, each named: erased at compile time, they load
 * nothing and make no runtime cycle, so they add no edge. The wire layer encodes history's
 * Payload and FailureInfo shapes, which history/events.ts defines (history imports the layer).
 */
/**
 * The deciding modules of runtime/ ("decide purely, then carry out", docs/architecture.md): their
 * values come only from the pure rooms and from each other; the store, the executors and the
 * engine's parts reach them at most as types. No Node builtins, no packages.
 */
const DECIDING = ['src/runtime/drafts.ts', 'src/runtime/operator.ts', 'src/runtime/cron.ts'];
const PURE_ROOMS: readonly Room[] = ['errors', 'history', 'replay'];

const TYPE_ONLY: readonly { file: string; spec: string }[] = [{ file: 'src/internal/wire/wire.ts', spec: '../../history/events.js' }];

function isTypeOnlyImport(code: string, spec: string): boolean {
  const quoted = spec.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
  const all = [...code.matchAll(new RegExp(`(?:^|\\s|;)(import|export)\\s+(type\\s)?[^'"]*?from\\s*['"]${quoted}['"]`, 'g'))];
  return all.length > 0 && all.every((m) => m[2] !== undefined);
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? tsFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}

function roomOf(file: string): Room {
  const parts = relative(src, file).split('/');
  return (parts.length > 1 ? parts[0] : parts[0]!.replace(/\.ts$/, '')) as Room;
}

function codeOf(file: string): string {
  // Comments may mention modules; only code counts.
  return readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:])\/\/.*$/gm, '$1');
}

const files = tsFiles(src);
const edges = new Map<Room, Set<Room>>();

describe('boundaries: which room of src/ may import which', () => {
  it('every room in src/ has a row in the table', () => {
    const rooms = new Set(files.map(roomOf));
    expect([...rooms].filter((r) => !(r in ROOMS))).toEqual([]);
  });

  it('every import is allowed by its room\'s row', () => {
    const bad: string[] = [];
    for (const file of files) {
      const from = roomOf(file);
      const rel = relative(root, file);
      const code = codeOf(file);
      for (const spec of importsOf(code)) {
        if (TYPE_ONLY.some((x) => x.file === rel && x.spec === spec)) {
          if (!isTypeOnlyImport(code, spec)) bad.push(`${rel} imports ${spec} for more than types (only \`import type\` is excepted)`);
          continue;
        }
        if (spec.startsWith('node:')) {
          if (NO_BUILTINS.includes(from)) bad.push(`${rel} imports ${spec} (${from}/ uses no Node builtins)`);
          continue;
        }
        if (!spec.startsWith('.')) {
          if (!PACKAGES[from]?.test(spec)) bad.push(`${rel} imports package ${spec} (not allowed in ${from}/)`);
          continue;
        }
        const to = roomOf(resolve(dirname(file), spec).replace(/\.js$/, '.ts'));
        if (to === from) continue;
        if (!edges.has(from)) edges.set(from, new Set());
        edges.get(from)!.add(to);
        if (!ROOMS[from].includes(to)) bad.push(`${rel} imports ${to} (${from}/ may import ${ROOMS[from].join(', ') || 'nothing'})`);
        if (CHILD_SIDE.includes(rel) && !CHILD_ROOMS.includes(to)) bad.push(`${rel} (worker side) imports ${to}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('no two rooms import each other, directly or around a cycle', () => {
    const cycles: string[] = [];
    const visit = (room: Room, path: Room[]) => {
      for (const next of edges.get(room) ?? []) {
        if (next === path[0]) cycles.push([...path, next].join(' → '));
        else if (!path.includes(next)) visit(next, [...path, next]);
      }
    };
    for (const room of edges.keys()) visit(room, [room]);
    expect(cycles).toEqual([]);
  });

  it('the deciding modules of runtime/ import nothing that does I/O (types aside)', () => {
    const bad: string[] = [];
    for (const rel of DECIDING) {
      const file = join(root, rel);
      const code = codeOf(file);
      for (const spec of importsOf(code)) {
        if (isTypeOnlyImport(code, spec)) continue;
        if (!spec.startsWith('.')) {
          bad.push(`${rel} imports ${spec}`);
          continue;
        }
        const target = resolve(dirname(file), spec).replace(/\.js$/, '.ts');
        if (DECIDING.includes(relative(root, target))) continue;
        if (!PURE_ROOMS.includes(roomOf(target))) bad.push(`${rel} imports ${relative(root, target)} for more than types`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('the checks can fail: a file of client/ importing runtime/ would be refused', () => {
    expect(ROOMS.client.includes('runtime')).toBe(false);
    expect(importsOf(`import { Engine } from '../runtime/engine.js';`)).toEqual(['../runtime/engine.js']);
    expect(edges.size).toBeGreaterThan(5); // the import scan found the graph
    // A type-only exception stays type-only: a value import from the same module is refused.
    expect(isTypeOnlyImport(`import type { Payload } from '../../history/events.js';`, '../../history/events.js')).toBe(true);
    expect(isTypeOnlyImport(`import { isTurnTerminal } from '../../history/events.js';`, '../../history/events.js')).toBe(false);
    expect(isTypeOnlyImport(`import type { Payload } from '../../history/events.js';\nimport { isTurnTerminal } from '../../history/events.js';`, '../../history/events.js')).toBe(false);
  });
});
