import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { cleanEnv, NODE_FLAGS } from './helpers/cli.js';
import { freePort } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

// That embed.ts type-checks against the public API is `npm run typecheck` (tsc -p
// examples/tsconfig.json), which CI (.ci/run) runs before the tests, beside src/ and test/.
describe('examples/', () => {
  it('embed.ts runs: own job, access token, usage, quota, then exits on its own after shutdown', async () => {
    const dir = embeddedDataDir(); // migrated already: no cold PGlite open
    const child = spawn(process.execPath, [...NODE_FLAGS, '--import', 'tsx', 'examples/embed.ts'], {
      cwd: ROOT,
      env: cleanEnv({ RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_HTTP_PORT: String(await freePort()), RELAY_JOBS_LOG_FORMAT: 'json', TSX_TSCONFIG_PATH: 'examples/tsconfig.json' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(code, `${out}\n${err}`).toBe(0);
    // Log lines and the example's result share stdout: the result is the line with token_version.
    const result = JSON.parse(out.split('\n').find((l) => l.includes('"token_version"'))!);
    expect(result).toMatchObject({
      token_version: 1,
      has_token: true,
      usage: 'enqueued',
      quota_used: 150,
      job: { status: 'no_work' },
      jobs: [{ name: 'gateway_stale_key_report', enabled: true, schedule: { every: '10m' } }],
    });
    expect(out).toContain('"msg":"shutdown complete"');
    // A clean run logs no warning: a shutdown that stops a snapshot rebuild is not a failed rebuild.
    const warnings = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: string | number; msg: string })
      .filter((l) => l.level === 'warn' || l.level === 'error' || (typeof l.level === 'number' && l.level >= 40));
    expect(warnings.map((w) => w.msg)).toEqual([]);
    // Embedded mode has no Redis to lose: its first snapshot build says why it really runs.
    expect(out).not.toContain('redis_lost');
  });
});
