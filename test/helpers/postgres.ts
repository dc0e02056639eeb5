/**
 * Shared PostgreSQL test plumbing. Suites run when the server answers (see postgres-setup.ts);
 * when it does not they are skipped, unless TURNLOG_REQUIRE_PG is set (CI), where they run and fail.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, inject } from 'vitest';
import { DEFAULT_PG_URL } from './postgres-setup.js';

declare module 'vitest' {
  export interface ProvidedContext {
    pgReachable: boolean;
  }
}

export const PG_URL = process.env['TURNLOG_TEST_PG_URL'] ?? DEFAULT_PG_URL;

/** Whether the PostgreSQL suites run here. */
export const pgEnabled = inject('pgReachable') || process.env['TURNLOG_REQUIRE_PG'] !== undefined;

/** `describe` for PostgreSQL suites: skipped (with the one line printed by postgres-setup) when unreachable. */
export function describePg(name: string, body: () => void): void {
  describe.skipIf(!pgEnabled)(name, body);
}

/** A schema name no other test run uses. */
export function uniqueSchema(prefix = 'turnlog_test'): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** Drops a test schema and everything in it. */
export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

/** A short-lived client for assertions on raw tables. */
export async function withClient<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}
