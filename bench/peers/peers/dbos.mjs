/**
 * DBOS Transact on the local PostgreSQL (a fresh system schema in the test database, dropped at
 * the end). A one-step workflow is a registered workflow calling one registered step; DBOS has no
 * multi-turn task, so a conversation's turn is a workflow of one step whose id names the turn.
 */
import { randomBytes } from 'node:crypto';
import { DBOS } from '@dbos-inc/dbos-sdk';
import { PG_URL, dropSchema, labelOf, pkgVersion } from './common.mjs';

const version = pkgVersion('@dbos-inc/dbos-sdk');
export const info = { label: `${labelOf('DBOS', version)} (PostgreSQL)`, version, notes: 'system database on the local PostgreSQL; a turn is a new one-step workflow' };

export async function open() {
  const schema = `dbos_peers_${randomBytes(4).toString('hex')}`;
  DBOS.setConfig({ name: 'turnlog-peers', systemDatabaseUrl: PG_URL, systemDatabaseSchemaName: schema, logLevel: 'error' });
  const step = DBOS.registerStep(async (x) => x + 1, { name: 's' });
  const one = DBOS.registerWorkflow(async (x) => step(x), { name: 'one-step' });
  const many = DBOS.registerWorkflow(
    async () => {
      for (let i = 0; i < 100; i++) await step(i);
      return 100;
    },
    { name: 'many-steps' },
  );
  await DBOS.launch();
  let n = 0;
  const run = async (wf, id, ...args) => (await DBOS.startWorkflow(wf, { workflowID: id })(...args)).getResult();
  const run_id = randomBytes(3).toString('hex');
  return {
    workflow100: () => run(many, `${run_id}-m${n++}`),
    oneStep: (i) => run(one, `${run_id}-o${i}`, i),
    conversations: (k) => Array.from({ length: k }, (_, i) => `${run_id}-c${i}`),
    turn: (c, i) => run(one, `${c}-t${i}`, i),
    async close() {
      await DBOS.shutdown();
      await dropSchema(schema);
    },
  };
}
