import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    // Real LevelDB, real child processes and real SIGKILLs: give slow shared machines room.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Probes PostgreSQL once: its suites skip with one printed line when it is unreachable.
    globalSetup: ['test/helpers/postgres-setup.ts'],
  },
});
