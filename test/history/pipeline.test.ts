/**
 * One payload pipeline (src/history/pipeline.ts): conversion and codecs built once, and a custom
 * converter reaching replayHistory in-process and in a worker thread, and the CLI (`show`,
 * `events`, `replay`).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { HistoryEvent, Payload } from '../../src/history/events.js';
import { parseHistoryFile } from '../../src/history/history-file.js';
import { DefaultPayloadConverter, type PayloadCodec } from '../../src/history/payload.js';
import { moduleConverter, payloadPipeline } from '../../src/history/pipeline.js';
import { replayHistory } from '../../src/testing/replay-history.js';
import { createTestEngine } from '../../src/testing/test-engine.js';
import { mapPrices, payloadConverter } from '../fixtures/custom-payloads/workflows.js';
import { ROOT, appendHistory, cli, cliJSON, ensureBuilt, withLevel } from '../cli/run-cli.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const MODULE = join(ROOT, 'dist/test/fixtures/custom-payloads/workflows.js');
/** A codec that marks and reverses the data, so an encoded payload is visibly not the plain one. */
const reverse: PayloadCodec = {
  encode: (p) => ({ metadata: { ...p.metadata, reversed: new Uint8Array([1]) }, data: Uint8Array.from(p.data).reverse() }),
  decode: (p) => {
    const { reversed: _r, ...metadata } = p.metadata;
    return { metadata, data: Uint8Array.from(p.data).reverse() };
  },
};

let tmp: { path: string; remove: () => Promise<void> };
/** A task recorded with the custom converter (a Map in input, step results and output). */
let recorded: HistoryEvent[];
let storeDir: string;

beforeAll(async () => {
  ensureBuilt();
  tmp = await makeTmpDir();
  const t = await createTestEngine({ workflows: [mapPrices], payloadConverter });
  await (await t.engine.start(mapPrices, new Map([['eur', 21]]), { taskId: 'maps' })).result();
  recorded = parseHistoryFile(await t.engine.exportHistory('maps'), 'maps.json').tasks[0]!.events;
  await t.close();
  storeDir = join(tmp.path, 'store');
  await withLevel(storeDir, (s) => appendHistory(s, 'maps', recorded));
});
afterAll(async () => {
  await tmp?.remove();
});

describe('payloadPipeline', () => {
  it('converts with the given converter and runs the codecs only at encode/decode', () => {
    const p = payloadPipeline({ converter: payloadConverter, codecs: [reverse] });
    const plain = p.toPayload(new Map([['a', 1]]));
    expect(new TextDecoder().decode(plain.metadata['encoding'])).toBe('json/maps');
    const stored = p.encode(plain);
    expect(stored.metadata['reversed']).toBeDefined();
    expect(p.fromStored<Map<string, number>>(stored).get('a')).toBe(1);
    const e: HistoryEvent = { type: 'InputQueued', eventId: 2, time: 1, generation: 1, inputId: 'i', input: plain, steering: false };
    const back = p.decodeEvent(p.encodeEvent(e)) as Extract<HistoryEvent, { type: 'InputQueued' }>;
    expect(p.fromPayload<Map<string, number>>(back.input).get('a')).toBe(1);
  });

  it('without options: the JSON converter and no codec chain (the identity, no mapping on hot paths)', () => {
    const p = payloadPipeline();
    expect(p.converter).toBeInstanceOf(DefaultPayloadConverter);
    expect(p.chain).toBeUndefined();
    const payload: Payload = p.toPayload({ a: 1 });
    expect(p.encode(payload)).toBe(payload);
    expect(p.fromStored(payload)).toEqual({ a: 1 });
  });

  it("moduleConverter takes a module's payloadConverter export only when it has both methods", () => {
    expect(moduleConverter({ payloadConverter })).toBe(payloadConverter);
    expect(moduleConverter({ payloadConverter: { toPayload: () => undefined } })).toBeUndefined();
    expect(moduleConverter({})).toBeUndefined();
  });
});

describe('a custom converter reaches every consumer', () => {
  // The engine inline and process workers: test/runtime/engine-payloads.test.ts and
  // test/executor/process-payloads.test.ts ("payloads: 'custom'").

  it("replayHistory in-process with a module path takes the module's converter (it used JSON and failed)", async () => {
    const report = await replayHistory({ history: recorded, taskId: 'maps', workflows: MODULE, isolate: 'none' });
    expect(report.turns).toBe(1);
  });

  it("replayHistory with isolate: 'worker' takes the module's converter in the thread", async () => {
    const report = await replayHistory({ history: recorded, taskId: 'maps', workflows: MODULE, isolate: 'worker' });
    expect(report.turns).toBe(1);
  }, 60_000);

  it("the CLI: show and events decode payloads with a --codecs module's payloadConverter (they showed <json/maps, N bytes>)", async () => {
    const mod = join(tmp.path, 'converter.mjs');
    await writeFile(mod, `export { payloadConverter } from ${JSON.stringify(MODULE)};\n`);
    const without = await cli(['--store', storeDir, 'show', 'maps']);
    expect(without.stdout).toContain('json/maps');
    const show = await cli(['--store', storeDir, '--codecs', mod, 'show', 'maps']);
    expect(show.stderr).toBe('');
    expect(show.code).toBe(0);
    expect(show.stdout).toContain('"eur":42');
    expect(show.stdout).not.toContain('<json/maps');
    const events = await cliJSON(['--store', storeDir, '--codecs', mod, 'events', 'maps', '--json']);
    expect(JSON.stringify(events.json)).toContain('"eur":42');
  }, 60_000);

  it("the CLI: replay takes the workflows module's converter", async () => {
    const file = join(tmp.path, 'maps.json');
    const t = await createTestEngine({ workflows: [mapPrices], payloadConverter });
    await (await t.engine.start(mapPrices, new Map([['eur', 1]]), { taskId: 'maps2' })).result();
    await writeFile(file, await t.engine.exportHistory('maps2'));
    await t.close();
    const r = await cli(['replay', file, '--workflows', MODULE, '--isolate', 'none']);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain('ok: 1 turn replayed');
  }, 60_000);
});
