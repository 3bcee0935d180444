// `config check --print` round-trips through the CLI in both modes (issue 52, point 7a), and `config
// check` requires what `start` requires (7b): the output, fed back with `-c`, is the same
// configuration; a PostgreSQL URL's role is printed (only the password is a secret); a `***` fed
// back is refused naming the key and the file, by `config check` and by `start` alike; cluster mode
// without RELAY_JOBS_MASTER_KEY fails `config check` in `start`'s own words.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from './helpers/cli.js';
import { TEST_MASTER_KEY } from './helpers/services.js';

const dir = mkdtempSync(join(tmpdir(), 'rj-roundtrip-'));
let n = 0;
function file(text: string): string {
  const f = join(dir, `printed-${++n}.yaml`);
  writeFileSync(f, text);
  return f;
}
/** The printed configuration without its comment lines (the header names the file a key came from). */
const body = (out: string) =>
  out
    .split('\n')
    .filter((l) => !l.startsWith('#'))
    .join('\n');

const CLUSTER = {
  DATABASE_URL: 'postgres://relay_app:s3cret-pw@127.0.0.1:5432/relay',
  REDIS_URL: 'redis://127.0.0.1:6379',
  RELAY_JOBS_INSTANCE_ID: 'r1',
  RELAY_JOBS_ENV: 'roundtrip',
  RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
  RELAY_JOBS_ADMIN_TOKEN: 'roundtrip-admin-token-0123456789',
  RELAY_JOBS__SQL__DATABASE_URL: 'postgres://relay_console@127.0.0.1:5432/relay',
};

describe('config check --print round-trips', () => {
  it('embedded mode: the printed file loads back as the same configuration', async () => {
    const env = { RELAY_JOBS_DATA_DIR: join(dir, 'data'), RELAY_JOBS_HTTP_PORT: '18099', RELAY_JOBS__JOBS__CANARY__EVERY: '5s' };
    const first = await runCli(['config', 'check', '--print'], env);
    expect(first.code, first.stderr).toBe(0);
    const again = await runCli(['config', 'check', '--print', '-c', file(first.stdout)], {});
    expect(again.code, again.stderr).toBe(0);
    expect(body(again.stdout)).toBe(body(first.stdout));
  });

  it('cluster mode: the role is printed, the password is not; a `***` fed back is refused by key, by config check and start', async () => {
    const first = await runCli(['config', 'check', '--print'], CLUSTER);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).not.toContain('s3cret-pw');
    expect(first.stdout).toContain('postgres://relay_app:***@127.0.0.1:5432/relay');
    // A URL without a password holds no secret: printed whole, and it loads back as it is.
    expect(first.stdout).toContain('postgres://relay_console@127.0.0.1:5432/relay');
    expect(first.stdout).toMatch(/# secrets set but not printed: .*master_key \(RELAY_JOBS_MASTER_KEY\)/);
    const printed = file(first.stdout);

    // Fed back with the secrets where they came from (the variables): the same configuration.
    const back = await runCli(['config', 'check', '--print', '-c', printed], CLUSTER);
    expect(back.code, back.stderr).toBe(0);
    expect(body(back.stdout)).toBe(body(first.stdout));

    // Without DATABASE_URL the file's `***` is the password: refused, naming the key and the file.
    const { DATABASE_URL: _omit, ...withoutDb } = CLUSTER;
    for (const args of [
      ['config', 'check', '-c', printed],
      ['start', '-c', printed],
    ]) {
      const r = await runCli(args, withoutDb);
      expect(r.code, `${args.join(' ')}: ${r.stdout}${r.stderr}`).toBe(2);
      expect(r.stderr).toContain(`database.url (${printed}): its password is "***"`);
      expect(r.stderr).not.toContain('DATABASE_URL)');
    }
  });

  it('config check requires the master key start requires, in the same words', async () => {
    const { RELAY_JOBS_MASTER_KEY: _omit, ...noKey } = CLUSTER;
    const [check, start] = await Promise.all([runCli(['config', 'check'], noKey), runCli(['start'], { ...noKey, RELAY_JOBS_HTTP_PORT: '0' })]);
    expect(check.code, check.stdout + check.stderr).toBe(2);
    expect(start.code, start.stdout + start.stderr).toBe(2);
    expect(check.stderr).toContain('RELAY_JOBS_MASTER_KEY is not set: cluster mode encrypts account credentials with it');
    expect(check.stderr.trim()).toBe(start.stderr.trim());
    // Embedded mode generates its key: nothing to require.
    const embedded = await runCli(['config', 'check'], { RELAY_JOBS_DATA_DIR: join(dir, 'data-embedded') });
    expect(embedded.code, embedded.stderr).toBe(0);
  });
});
