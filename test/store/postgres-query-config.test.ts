/**
 * The append's query config inherits `name` and `text` from its cached statement
 * (postgres-appender.ts, `queryConfig`). That holds only while `pg` reads a config's properties
 * rather than copying its own ones (`{ ...config }` would drop them, and every append would send
 * an empty, unnamed statement). pg 8.11.0-8.23.0 read the config in place; 8.23.1 copies it with
 * its prototype. This runs the installed `pg`'s own normalization (`new Query`, as `client.query`
 * does), with no server: a `pg` upgrade that drops inherited properties fails here by name.
 */
import pg from 'pg';
import { expect, it } from 'vitest';
import { queryConfig } from '../../src/store/postgres-appender.js';

it('pg keeps the inherited name and text of the append query config', () => {
  const st = { name: 'turnlog_append_0123456789abcdef01234567', text: 'SELECT $1::int AS x' };
  const values = [1];
  const config = queryConfig(st, values);
  expect(Object.keys(config)).toEqual(['values']);
  const q = new (pg as unknown as { Query: new (c: object) => { name?: string; text?: string; values?: unknown[] } }).Query(config);
  expect(q.name).toBe(st.name);
  expect(q.text).toBe(st.text);
  expect(q.values).toBe(values);
  // pg must not write into the cached statement: the next append's config inherits from it too.
  expect(Object.keys(st)).toEqual(['name', 'text']);
});
