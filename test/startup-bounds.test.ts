import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server, type Socket } from 'node:net';
import { runCli, ServiceProcess } from './helpers/cli.js';
import { TEST_MASTER_KEY, freePort, freshDatabase, uniqueName } from './helpers/services.js';

/**
 * Issue 49, point 5: start-up always ends. Servers that accept a connection and never speak (a hung
 * host, a firewall that drops) make `start` and the one-shot commands fail within their connect
 * timeouts with one line naming what did not answer; SIGTERM while start-up waits on one exits at
 * once, naming it. Without the bounds these processes never exit: the helpers' own limits (far
 * above the bounds) fail the test then, so nothing here is a timing assertion.
 */
describe('start-up that always ends', () => {
  const silent: Server[] = [];
  const held: Socket[] = [];
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  const ports: number[] = [];

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    for (let i = 0; i < 2; i++) {
      const s = createServer((c) => held.push(c.on('error', () => undefined)));
      await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
      silent.push(s);
      ports.push((s.address() as { port: number }).port);
    }
  });
  afterAll(async () => {
    for (const c of held) c.destroy();
    await Promise.all(silent.map((s) => new Promise((r) => s.close(r))));
    await db?.drop();
  });

  const base = () => ({
    RELAY_JOBS_ENV: 'bounds',
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__REDIS__KEY_PREFIX: uniqueName('rjbounds'),
  });
  const silentPg = () => `postgres://relay:hunter2@127.0.0.1:${ports[0]}/relay`;
  const silentSentinels = () => `redis+sentinel://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}/mymaster`;

  it('a PostgreSQL that never answers: start, jobs and doctor exit 2 with one line naming it and the bound', async () => {
    // start tries a silent server again for database.startup_wait (issue 53): 2 s here, not the default minute.
    const env = { ...base(), DATABASE_URL: silentPg(), REDIS_URL: 'redis://127.0.0.1:6379', RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '1s', RELAY_JOBS__DATABASE__STARTUP_WAIT: '2s' };
    const runs = await Promise.all([
      runCli(['start'], { ...env, RELAY_JOBS_INSTANCE_ID: 'b1', RELAY_JOBS_HTTP_PORT: String(await freePort()) }, 120_000),
      runCli(['jobs'], env, 120_000),
      runCli(['doctor'], env, 120_000),
    ]);
    for (const [i, r] of runs.entries()) {
      const what = ['start', 'jobs', 'doctor'][i]!;
      expect(r.code, `${what}: ${r.stdout}${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split('\n'), what).toHaveLength(1);
      expect(r.stderr, what).toMatch(
        new RegExp(`cannot connect to PostgreSQL at postgres://relay:\\*\\*\\*@127\\.0\\.0\\.1:${ports[0]}/relay \\(DATABASE_URL\\): no answer within 1 s \\(database\\.connect_timeout\\)`),
      );
      expect(r.stderr + r.stdout, what).not.toContain('hunter2');
    }
  });

  it('sentinels that never answer: start and jobs exit 2 naming the sentinels and the bound', async () => {
    const env = { ...base(), DATABASE_URL: db.url, REDIS_URL: silentSentinels(), RELAY_JOBS__REDIS__CONNECT_TIMEOUT: '1s' };
    const runs = await Promise.all([runCli(['start'], { ...env, RELAY_JOBS_INSTANCE_ID: 'b2', RELAY_JOBS_HTTP_PORT: String(await freePort()) }, 120_000), runCli(['jobs'], env, 120_000)]);
    for (const r of runs) {
      expect(r.code, r.stdout + r.stderr).toBe(2);
      expect(r.stderr).toMatch(
        new RegExp(
          `cannot connect to Redis at redis\\+sentinel://.* \\(REDIS_URL\\): no answer within 2 s \\(redis\\.connect_timeout 1 s, two attempts\\) from the sentinels 127\\.0\\.0\\.1:${ports[0]}, 127\\.0\\.0\\.1:${ports[1]}`,
        ),
      );
    }
  });

  /** `start` with connect timeouts of ten minutes: only the signal can end its wait within the test. */
  async function interrupted(env: Record<string, string>, waiting: RegExp): Promise<ServiceProcess> {
    const svc = ServiceProcess.start('bounds', {
      ...base(),
      ...env,
      RELAY_JOBS_INSTANCE_ID: 'b3',
      RELAY_JOBS_HTTP_PORT: String(await freePort()),
      RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '10m',
      RELAY_JOBS__REDIS__CONNECT_TIMEOUT: '10m',
    });
    await svc.waitForLine(waiting);
    svc.proc.kill('SIGTERM');
    expect(await svc.exitedWithin(60_000), svc.lines.join('\n')).toBe(0);
    return svc;
  }

  it('SIGTERM while start-up waits on PostgreSQL exits 0 at once, naming what it waited on', async () => {
    const svc = await interrupted({ DATABASE_URL: silentPg(), REDIS_URL: 'redis://127.0.0.1:6379' }, /connecting to PostgreSQL/);
    const line = svc.lines.find((l) => l.includes('start-up interrupted'));
    expect(line, svc.lines.join('\n')).toMatch(
      /start-up interrupted by SIGTERM while connecting to PostgreSQL at postgres:\/\/relay:\*\*\*@127\.0\.0\.1:\d+\/relay \(DATABASE_URL\): exiting, nothing was started/,
    );
    expect(svc.lines.join('\n')).not.toContain('hunter2');
  });

  it('SIGTERM while start-up waits on silent sentinels exits 0 at once, naming them', async () => {
    const svc = await interrupted({ DATABASE_URL: db.url, REDIS_URL: silentSentinels() }, /connecting to Redis/);
    const line = svc.lines.find((l) => l.includes('start-up interrupted'));
    expect(line, svc.lines.join('\n')).toMatch(/start-up interrupted by SIGTERM while connecting to Redis at redis\+sentinel:\/\/127\.0\.0\.1:\d+,127\.0\.0\.1:\d+\/mymaster \(REDIS_URL\)/);
  });
});
