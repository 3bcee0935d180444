import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { newestMtime } from './helpers/mtime.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** The tests' build (helpers/build-cli.ts; not imported here: it loads PGlite for the template). */
const TEST_DIST = '.test-dist';

/**
 * `prepare` (npm ci, and `npx relay-jobs` in a checkout, which installs the checkout) runs
 * `scripts/build.mjs --if-stale`: a second run with nothing changed must not rebuild, so the CLI
 * never swaps dist/ under a running service. `npm run build` still always builds.
 *
 * The tree checked is the tests' own `.test-dist/`: the vitest global setup (helpers/build-cli.ts)
 * builds it with `scripts/build.mjs --out .test-dist --if-stale`, a full build whenever it is
 * missing (a fresh checkout, as in CI) or older than a source. Compiling another tree here cost a
 * whole tsc run (25 CPU s) for the same script and the same decision.
 */
describe('scripts/build.mjs', () => {
  const build = (...args: string[]) => execFileSync(process.execPath, ['scripts/build.mjs', '--out', TEST_DIST, ...args], { cwd: ROOT, encoding: 'utf8', stdio: 'pipe' });

  it('--if-stale builds once, then leaves an up-to-date tree alone', () => {
    expect(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.prepare).toBe('node scripts/build.mjs --if-stale');
    // Built by the global setup's `--if-stale` run: the CLI, and the stamp written after it, newer than every source.
    const main = join(ROOT, TEST_DIST, 'cli', 'main.js');
    const stamp = join(ROOT, TEST_DIST, '.built');
    expect(existsSync(main)).toBe(true);
    expect(statSync(stamp).mtimeMs).toBeGreaterThanOrEqual(newestMtime(['src', 'tsconfig.json', 'package.json', 'scripts/build.mjs'].map((p) => join(ROOT, p))));
    const before = [statSync(main).mtimeMs, statSync(stamp).mtimeMs];
    expect(build('--if-stale')).toMatch(/up to date; not rebuilt/);
    expect([statSync(main).mtimeMs, statSync(stamp).mtimeMs]).toEqual(before);
  });
});
