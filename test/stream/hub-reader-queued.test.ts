// The hand-written stream reader (843bd6f) keeps a generator's contract for calls queued behind a
// read that fails: the read in flight rejects once, and the next() queued behind it is answered
// { done: true }, as an async generator's is. Before, the queued call rejected with the same error:
// a consumer with two next() calls in flight got the failure twice.
import { expect, it } from 'vitest';
import { StreamHub } from '../../src/stream/hub.js';
import { stubSource } from '../helpers/stream-source.js';

const source = stubSource();
const settle = (p: Promise<unknown>) => p.then((v) => ['ok', v], (e: { code?: string }) => ['err', e.code]);

it('a next() queued behind a read that fails (an offset past the history) gets done, not the error again, as a generator', async () => {
  async function* failing(): AsyncGenerator<never> {
    throw Object.assign(new Error('offset'), { code: 'TURNLOG_STREAM_OFFSET' });
  }
  const g = failing();
  const generator = await Promise.all([settle(g.next()), settle(g.next())]);
  const r = new StreamHub(source).read('t', { from: '5' });
  expect(await Promise.all([settle(r.next()), settle(r.next())])).toEqual(generator);
  expect(generator).toEqual([['err', 'TURNLOG_STREAM_OFFSET'], ['ok', { done: true, value: undefined }]]);
});
