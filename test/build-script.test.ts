import { afterAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * `prepare` (npm ci, and `npx relay-jobs` in a checkout, which installs the checkout) runs
 * `scripts/build.mjs --if-stale`: a second run with nothing changed must not rebuild, so the CLI
 * never swaps dist/ under a running service. `npm run build` still always builds.
 */
describe('scripts/build.mjs', () => {
  const dir = mkdtempSync(join(ROOT, '.build-check-'));
  const out = relative(ROOT, join(dir, 'out'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const build = (...args: string[]) => execFileSync(process.execPath, ['scripts/build.mjs', '--out', out, ...args], { cwd: ROOT, encoding: 'utf8', stdio: 'pipe' });

  it('--if-stale builds once, then leaves an up-to-date tree alone', () => {
    expect(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.prepare).toBe('node scripts/build.mjs --if-stale');
    build('--if-stale');
    const main = join(ROOT, out, 'cli', 'main.js');
    expect(existsSync(main)).toBe(true);
    const before = statSync(main).mtimeMs;
    expect(build('--if-stale')).toMatch(/up to date; not rebuilt/);
    expect(statSync(main).mtimeMs).toBe(before);
  }, 300_000);
});
