/**
 * Issue #10 items 1–2: arbitrary JS strings (lone surrogates included) in every string field of
 * every event either round-trip (free text, made well-formed) or are refused at the call (ids),
 * never stored undecodable. Codec level here; stores and engine below.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTurnlogError } from '../../src/errors.js';
import {
  decodeEvent,
  encodeEvent,
  encodeEventDelimited,
  encodeEventDelimitedGeneric,
  encodeEventGeneric,
  eventFromJSON,
  eventToJSON,
} from '../../src/history/codec.js';
import { ALL_EVENT_TYPES, type EventType, type HistoryEvent } from '../../src/history/events.js';
import { LevelHistoryStore } from '../../src/store/level-store.js';
import { MemoryHistoryStore } from '../../src/store/memory-store.js';
import type { HistoryStore } from '../../src/store/history-store.js';
import { codeUnit, eventArbitraries } from '../helpers/event-arbitraries.js';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const { arbitraries } = eventArbitraries(codeUnit);
const anyEvent = fc.oneof(...ALL_EVENT_TYPES.map((t) => arbitraries[t] as fc.Arbitrary<HistoryEvent>));

/** The spec, written independently of src: fields that are identities, refused when ill-formed. */
const ID_FIELDS: Partial<Record<EventType, string[]>> = {
  TaskCreated: ['workflow'],
  InputQueued: ['inputId'],
  InputWithdrawn: ['inputId'],
  TurnStarted: ['inputIds', 'owner', 'instance'],
  StepCompleted: ['name', 'limit'],
  InputsTaken: ['inputIds'],
  PatchMarked: ['patchId'],
  ChildStarted: ['childId', 'workflow'],
  ChildEnded: ['childId'],
  LeaseClaimed: ['owner', 'instance'],
  OperatorAction: ['inputId', 'newInputId'],
  SignalReceived: ['signalId', 'name'],
  WaitStarted: ['name'],
  WaitEnded: ['signalId'],
  HistoryCompacted: ['droppedInputIds'],
};

function hasIllFormedId(e: HistoryEvent): boolean {
  const rec = e as unknown as Record<string, unknown>;
  return (ID_FIELDS[e.type] ?? []).some((k) => [rec[k]].flat().some((v) => typeof v === 'string' && !v.isWellFormed()));
}

/** Every string (values and object keys) made well-formed; bytes compared by content. */
function wellFormedPlain(v: unknown): unknown {
  if (typeof v === 'string') return v.toWellFormed();
  if (v instanceof Uint8Array) return [...v];
  if (Array.isArray(v)) return v.map(wellFormedPlain);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k.toWellFormed(), wellFormedPlain(x)]));
  return v;
}

function refusal(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  return undefined;
}

const HALF_EMOJI = 'Sure 😀'.slice(0, 6);

describe('codec: strings with lone surrogates', () => {
  it('the generator does produce ill-formed strings (the property below is not vacuous)', () => {
    const sample = fc.sample(anyEvent, { seed: 1337, numRuns: 300 });
    expect(sample.filter(hasIllFormedId).length).toBeGreaterThan(30);
    expect(sample.filter((e) => !hasIllFormedId(e) && JSON.stringify(e).includes('\\ud')).length).toBeGreaterThan(30);
  });

  for (const type of ALL_EVENT_TYPES) {
    it(`${type}: free text round-trips well-formed, an ill-formed id is refused`, () => {
      fc.assert(
        fc.property(arbitraries[type] as fc.Arbitrary<HistoryEvent>, (e) => {
          const before = structuredClone(e);
          if (hasIllFormedId(e)) {
            for (const enc of [encodeEvent, encodeEventGeneric, encodeEventDelimited, eventToJSON]) {
              expect(isTurnlogError(refusal(() => enc(e)), 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
            }
            return;
          }
          const want = wellFormedPlain(e);
          expect(wellFormedPlain(decodeEvent(encodeEvent(e), 't'))).toEqual(want);
          // The fast path and the generated encoder still agree byte for byte.
          expect([...encodeEvent(e)]).toEqual([...encodeEventGeneric(e)]);
          expect([...encodeEventDelimited(e)]).toEqual([...encodeEventDelimitedGeneric(e)]);
          const json = JSON.parse(JSON.stringify(eventToJSON(e))) as Record<string, unknown>;
          expect(wellFormedPlain(eventFromJSON(json, 't'))).toEqual(want);
          // The caller's event is not changed in place.
          expect(e).toEqual(before);
        }),
        { seed: 1337, numRuns: 150 },
      );
    });
  }

  it('the issue example: a failure message cut inside an emoji reads back with U+FFFD', () => {
    const e: HistoryEvent = { type: 'TurnFailed', eventId: 3, time: 1, generation: 1, turn: 1, failure: { message: HALF_EMOJI, type: 'Error' } };
    const back = decodeEvent(encodeEvent(e), 't');
    expect(back).toMatchObject({ failure: { message: 'Sure \uFFFD' } });
  });

  it('a refused id names the event, the field and the fix', () => {
    const e: HistoryEvent = { type: 'InputQueued', eventId: 2, time: 1, generation: 1, inputId: HALF_EMOJI, input: { metadata: {}, data: new Uint8Array() }, steering: false };
    const err = refusal(() => encodeEvent(e)) as Error;
    expect(err.message).toContain('event 2 (InputQueued)');
    expect(err.message).toContain('inputId "Sure \\ud83d"');
    expect(err.message).toContain('toWellFormed()');
  });
});

describe.each([
  ['level', async () => {
    const dir = await makeTmpDir('turnlog-wf-');
    const store = new LevelHistoryStore(dir.path, { sync: false });
    return { store, remove: dir.remove };
  }],
  ['memory', async () => ({ store: new MemoryHistoryStore() as HistoryStore, remove: async (): Promise<void> => undefined })],
] as const)('%s store: append → read', (_name, make) => {
  let store: HistoryStore;
  let remove: () => Promise<void>;
  beforeAll(async () => {
    ({ store, remove } = await make());
    await store.open();
  });
  afterAll(async () => {
    await store.close();
    await remove();
  });

  const created: HistoryEvent = {
    type: 'TaskCreated', eventId: 1, time: 1, generation: 1, workflow: 'wf', kind: 'multi-turn', formatVersion: 1,
    policy: { turnTimeoutMs: 1000, graceMs: 0, maxRecoveries: 1, maxWorkerCrashes: 1, steeringMaxQueued: 1, executor: 'inline', stepRetry: { maxAttempts: 1, initialIntervalMs: 0, backoffCoefficient: 1, maxIntervalMs: 0, nonRetryableTypes: [] } },
  };

  it('every event either reads back well-formed or is refused with nothing written', async () => {
    let n = 0;
    await fc.assert(
      fc.asyncProperty(anyEvent, async (arb) => {
        const taskId = `wf-${n++}`;
        const e = { ...arb, eventId: 2, generation: 1 } as HistoryEvent;
        if (e.type === 'TaskCreated') e.workflow = e.workflow.replaceAll('\0', '');
        await store.append(taskId, [created], { expectedLastEventId: 0, generation: 1 });
        let err: unknown;
        try {
          await store.append(taskId, [e], { expectedLastEventId: 1, generation: 1 });
        } catch (x) {
          err = x;
        }
        const read = await store.readEvents(taskId);
        if (hasIllFormedId(e)) {
          expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
          expect(read).toHaveLength(1);
          expect((await store.getSummary(taskId))?.lastEventId).toBe(1);
        } else {
          expect(err).toBeUndefined();
          expect(wellFormedPlain(read[1])).toEqual(wellFormedPlain(e));
        }
      }),
      { seed: 1337, numRuns: 120 },
    );
  });

  it('two task ids that differ only in a lone surrogate are refused, not merged into one history', async () => {
    for (const id of ['chat-\ud800', 'chat-\ud801', `chat-${HALF_EMOJI}`]) {
      const err = await store.append(id, [created], { expectedLastEventId: 0, generation: 1 }).catch((x: unknown) => x);
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
      expect((err as Error).message).toContain('lone UTF-16 surrogate');
    }
    expect(isTurnlogError(await store.readEvents('chat-\ud800').catch((x: unknown) => x), 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect(await store.getSummary('chat-\uFFFD')).toBeUndefined();
  });
});
