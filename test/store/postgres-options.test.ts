/**
 * createPostgresStore's options as docs/scale-out.md#setup states them, checked at construction
 * (no database needed): a reserved schema name and readOnly with a pool of the caller's own are
 * refused with TURNLOG_INVALID_ARGUMENT instead of failing at open or being ignored.
 */
import { describe, expect, it } from 'vitest';
import { createPostgresStore } from '../../src/store/postgres-store.js';
import { isTurnlogError } from '../../src/errors.js';

const URL = 'postgres://nobody@127.0.0.1:1/none';

function refusal(fn: () => unknown): Error {
  try {
    fn();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a refusal');
}

describe('createPostgresStore options', () => {
  it('refuses a schema name starting with pg_ (PostgreSQL reserves them) as a bad argument', () => {
    const err = refusal(() => createPostgresStore({ connectionString: URL, schema: 'pg_agents' }));
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect(err.message).toContain('"pg_agents"');
    expect(err.message).toMatch(/reserved/);
    // Other names with letters, digits and _ still construct.
    expect(createPostgresStore({ connectionString: URL, schema: 'agents_pg_1' }).location).toContain('#agents_pg_1');
  });

  it('refuses readOnly with a pool of the caller’s own instead of writing through it', () => {
    const pool = { connect: async () => ({}) } as never;
    const err = refusal(() => createPostgresStore({ pool, readOnly: true }));
    expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
    expect(err.message).toMatch(/readOnly applies only to a pool the store creates/);
    expect(() => createPostgresStore({ pool, readOnly: false })).not.toThrow();
    expect(() => createPostgresStore({ connectionString: URL, readOnly: true })).not.toThrow();
  });

  it('refuses a pool size (max) that is not an integer of at least 2: -1 made open() wait forever for a connection, 1 every append of an engine', () => {
    for (const max of [0, -1, 1, 2.5, Number.NaN, Number.POSITIVE_INFINITY, '4' as unknown as number]) {
      const err = refusal(() => createPostgresStore({ connectionString: URL, max }));
      expect(isTurnlogError(err, 'TURNLOG_INVALID_ARGUMENT')).toBe(true);
      expect(err.message).toContain(`max ${String(max)}`);
    }
    expect(() => createPostgresStore({ connectionString: URL, max: 2 })).not.toThrow();
    expect(() => createPostgresStore({ connectionString: URL, max: 40 })).not.toThrow();
  });
});
