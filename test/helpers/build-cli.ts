// vitest global setup: the tests that spawn the CLI run a build of their own in `.test-dist/`,
// never `dist/` (which a running `npm start` may be using), transpiled file by file (esbuild, about
// a second; the type check is `npm run typecheck`'s, and test/build-script.test.ts covers tsc's build). It is rebuilt only when a file under
// src/ is newer than the last build, so a run of one test file does not pay for a compile. The
// migrated PGlite template (pglite-template.ts) is rebuilt on the same condition.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGLITE_EMPTY_TEMPLATE, PGLITE_TEMPLATE, buildPgliteTemplate } from './pglite-template.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const TEST_DIST = '.test-dist';

function newest(dir: string): number {
  let max = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    max = Math.max(max, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs);
  }
  return max;
}

const builtAfter = (file: string, sources: number) => existsSync(file) && statSync(file).mtimeMs >= sources;

export default async function setup(): Promise<void> {
  const sources = Math.max(newest(join(ROOT, 'src')), statSync(join(ROOT, 'tsconfig.json')).mtimeMs);
  const main = join(ROOT, TEST_DIST, 'cli', 'main.js');
  if (!builtAfter(main, sources)) execFileSync(process.execPath, ['scripts/build.mjs', '--out', TEST_DIST, '--transpile-only'], { cwd: ROOT, stdio: 'inherit' });
  if (![PGLITE_TEMPLATE, PGLITE_EMPTY_TEMPLATE].every((t) => builtAfter(join(t, 'pgdata', 'PG_VERSION'), sources))) await buildPgliteTemplate();
}
