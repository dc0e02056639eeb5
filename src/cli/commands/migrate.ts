/**
 * `turnlog migrate`: creates or upgrades a PostgreSQL store's schema explicitly (engines also
 * migrate on open). Idempotent, and safe while engines run or start (advisory lock).
 */
import type { Command } from 'commander';
import { SCHEMA_VERSION } from '../../store/postgres-migrations.js';
import { isPostgresUrl } from '../../store/postgres-store.js';
import { globals, openPostgresCliStore, printJSON, printText, usageError } from '../context.js';

/** Registers `migrate` on the program. */
export function registerMigrate(program: Command): void {
  program
    .command('migrate')
    .description('create or upgrade the schema of a PostgreSQL store (--store postgres://…)')
    .action(async (_flags: unknown, cmd: Command) => {
      const g = globals(cmd);
      if (!isPostgresUrl(g.store)) {
        throw usageError(`turnlog migrate needs a PostgreSQL store (--store postgres://user@host/db or TURNLOG_STORE); ${g.store} is a LevelDB directory, which needs no migration.`);
      }
      const store = await openPostgresCliStore(g.store, { create: true });
      try {
        const applied = store.migrationsApplied;
        if (g.json) return printJSON({ store: store.location, schema: store.schema, applied, version: SCHEMA_VERSION });
        return printText(
          applied.length
            ? `applied migration${applied.length > 1 ? 's' : ''} ${applied.join(', ')} to ${store.location}; schema ${store.schema} is at version ${SCHEMA_VERSION}`
            : `schema ${store.schema} of ${store.location} is already at version ${SCHEMA_VERSION}; nothing to do`,
        );
      } finally {
        await store.close();
      }
    });
}
