// vitest global setup: the tests that spawn the CLI run a build of their own in `.test-dist/`,
// never `dist/` (which a running `npm start` may be using). It is built by `scripts/build.mjs
// --if-stale --bundle`: the CLI bundled by esbuild, in about a second (the type check is `npm run
// typecheck`'s; `npm ci`'s prepare builds dist/ with tsc), under the `prepare` script's
// own staleness rule, so a run of one test file does not pay for a build, and
// test/build-script.test.ts checks that rule on the tree built here. The migrated PGlite template
// (pglite-template.ts) is rebuilt whenever a file under src/ is newer than it; the migrated
// PostgreSQL template (services.ts, buildPgTemplate) is made for each run and dropped after it.
//
// Every temporary file of the run (data directories, PGlite copies, backups, private servers'
// data) goes under one directory of its own, TMPDIR for the workers and every process they start,
// removed when the run ends: the tests' own clean-ups miss some, and a run left about 1.5 GB in /tmp.
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { newestMtime } from './mtime.js';
import { PGLITE_EMPTY_TEMPLATE, PGLITE_TEMPLATE, buildPgliteTemplate } from './pglite-template.js';
import { buildPgTemplate } from './services.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const TEST_DIST = '.test-dist';

const builtAfter = (file: string, sources: number) => existsSync(file) && statSync(file).mtimeMs >= sources;

export default async function setup(): Promise<() => Promise<void>> {
  const runTmp = mkdtempSync(join(tmpdir(), 'relay-jobs-tests-'));
  // Readable by the `postgres` user, whose private servers' directories live inside.
  chmodSync(runTmp, 0o755);
  process.env.TMPDIR = runTmp;
  const sources = newestMtime([join(ROOT, 'src'), join(ROOT, 'tsconfig.json')]);
  // Quiet when up to date; the compiler's errors (on stdout) are in the error when it fails.
  try {
    execFileSync(process.execPath, ['scripts/build.mjs', '--out', TEST_DIST, '--if-stale', '--bundle'], { cwd: ROOT, encoding: 'utf8', stdio: 'pipe' });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    throw new Error(`scripts/build.mjs --out ${TEST_DIST} --if-stale --bundle failed:\n${e.stdout ?? ''}${e.stderr ?? ''}`, { cause: err });
  }
  const pgliteStale = ![PGLITE_TEMPLATE, PGLITE_EMPTY_TEMPLATE].every((t) => builtAfter(join(t, 'pgdata', 'PG_VERSION'), sources));
  const [dropPgTemplate] = await Promise.all([buildPgTemplate(), pgliteStale ? buildPgliteTemplate() : undefined]);
  return async () => {
    await dropPgTemplate();
    rmSync(runTmp, { recursive: true, force: true });
  };
}
