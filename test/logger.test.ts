import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, it } from 'vitest';
import { NODE_FLAGS } from './helpers/cli.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** What a fresh process prints on stdout for one event logged in `format`, and whether it loaded pino-pretty. */
function logOnce(format: 'json' | 'pretty'): { out: string; prettyLoaded: boolean } {
  const script = [
    `import { createRequire } from 'node:module';`,
    `import { createLogger } from './src/telemetry/logger.ts';`,
    `const log = createLogger({ level: 'info', instanceId: 'i-1', env: 'test', format: '${format}' });`,
    `log.info({ job: 'token_refresh', refresh_token: 'rt-very-secret' }, 'refreshed');`,
    // Which of the two formatters this process loaded, on stderr.
    `const cache = createRequire(import.meta.url).cache;`,
    `process.stderr.write(String(Object.keys(cache).some((k) => k.includes('/pino-pretty/'))));`,
  ].join('\n');
  const r = spawnSync(process.execPath, [...NODE_FLAGS, '--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  if (r.status !== 0 || !/^(true|false)$/.test(r.stderr)) throw new Error(`the logging child failed (exit ${r.status}):\n${r.stdout}\n${r.stderr}`);
  return { out: r.stdout, prettyLoaded: r.stderr === 'true' };
}

describe('logger formats', () => {
  it('json: one object per line with instance and env, secrets masked; pino-pretty is not loaded', ({ expect }) => {
    const { out, prettyLoaded } = logOnce('json');
    expect(prettyLoaded).toBe(false);
    const line = JSON.parse(out.trim()) as Record<string, unknown>;
    expect(line).toMatchObject({ level: 'info', instance_id: 'i-1', env: 'test', job: 'token_refresh', refresh_token: '***', msg: 'refreshed' });
  });

  it('pretty: one human line per event, secrets masked as in JSON', ({ expect }) => {
    const { out, prettyLoaded } = logOnce('pretty');
    expect(prettyLoaded).toBe(true);
    expect(out.trim().split('\n')).toHaveLength(1);
    expect(out).toMatch(/INFO.*refreshed/);
    expect(out).toContain('token_refresh');
    expect(out).not.toContain('rt-very-secret');
    expect(out.trim().startsWith('{')).toBe(false);
  });
});
