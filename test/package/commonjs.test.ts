/**
 * README "ESM only": from CommonJS, `require('turnlog')` fails with the error the README quotes,
 * and `await import('turnlog')` works. A real CommonJS app in a temp dir, with turnlog linked
 * into its node_modules (needs `npm run build`: the package entry is dist/).
 */
import { spawnSync } from 'node:child_process';
import { mkdir, symlink, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { makeTmpDir } from '../helpers/tmp-dir.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

it('a CommonJS app cannot require() turnlog but can import() it', async () => {
  const dir = await makeTmpDir('turnlog-cjs-');
  cleanups.push(dir.remove);
  await mkdir(join(dir.path, 'node_modules'));
  await symlink(resolve('.'), join(dir.path, 'node_modules', 'turnlog'), 'dir');
  await writeFile(join(dir.path, 'package.json'), JSON.stringify({ name: 'cjs-app', private: true }));
  await writeFile(
    join(dir.path, 'app.cjs'),
    `try { require('turnlog'); console.log('require: loaded'); } catch (e) { console.log('require: ' + e.code + ' ' + e.message); }
import('turnlog').then((m) => console.log('import: ' + typeof m.Engine + ' ' + typeof m.defineWorkflow));
`,
  );
  const r = spawnSync(process.execPath, ['app.cjs'], { cwd: dir.path, encoding: 'utf8', timeout: 30_000 });
  expect(r.stderr).toBe('');
  const [req, imp] = r.stdout.trim().split('\n');
  expect(req).toMatch(/^require: ERR_PACKAGE_PATH_NOT_EXPORTED No "exports" main defined in .*node_modules[\\/]turnlog[\\/]package\.json$/);
  expect(imp).toBe('import: function function');
});
