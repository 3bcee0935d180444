import { createServer, type Server } from 'node:http';
import { rmSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { LIVENESS_NS } from '../src/coordination/liveness.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';
import { loopBook } from '../src/workers/loop-book.js';

/** Polls `cond` until it holds (generous: the machine is loaded); fails with `what` otherwise. */
async function metric(rt: Runtime, name: string, labels = ''): Promise<number> {
  const text = await rt.metrics.registry.getSingleMetricAsString(name);
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels ? `{${labels}}` : ''} `));
  return line ? Number(line.split(' ').pop()) : 0;
}

/** A probe target that counts the probes per API key. */
function probeTarget(): Promise<{ server: Server; url: string; hits: Map<string, number> }> {
  const hits = new Map<string, number>();
  const server = createServer((req, res) => {
    const key = String(req.headers.authorization ?? '').replace(/^Bearer /, '');
    hits.set(key, (hits.get(key) ?? 0) + 1);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', choices: [{ message: { role: 'assistant', content: 'pong' } }] }));
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, hits })));
}

function monitor(url: string, key: string) {
  return { name: key, baseUrl: url, model: 'm', apiKey: key, accountId: null, intervalMs: 3_600_000, timeoutMs: 2000, jitterMs: 0, enabled: true, labels: {} };
}

const QUIET = {
  RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
  RELAY_JOBS_ENV: 'test',
  RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
  RELAY_JOBS__LOGGING__LEVEL: 'warn',
  RELAY_JOBS__SHUTDOWN__GRACE: '3s',
  RELAY_JOBS__CHANNEL_MONITOR__MIN_INTERVAL: '1s',
};

describe('wake-ups, cluster mode (real PostgreSQL, LISTEN on the liveness session)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let target: Awaited<ReturnType<typeof probeTarget>>;
  let rt: Runtime;
  let admin: pg.Client;
  const prefix = uniqueName('rjwake');
  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    target = await probeTarget();
    const config = loadConfig({
      env: {
        ...QUIET,
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'wake-1',
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        // Long enough that only a wake-up (or the listener being down) explains a prompt probe.
        RELAY_JOBS__WAKEUPS__BACKSTOP: '4s',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    rt.start();
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  }, 60_000);
  afterAll(async () => {
    await admin?.end();
    await rt?.shutdown();
    target?.server.close();
    await dropRedisPrefix(prefix);
    await db?.drop();
  });

  it('a created monitor wakes the runner: probed at once, through a notification', async () => {
    await waitFor(async () => (await metric(rt, 'relay_jobs_wakeup_listener_up')) === 1, { what: 'the listener' });
    const before = await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"');
    await rt.services.monitors.create(monitor(target.url, 'first'));
    await waitFor(() => (target.hits.get('first') ?? 0) >= 1, { what: 'the first probe' });
    expect(await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"')).toBeGreaterThan(before);
  });

  it('a dropped notification is made up by the backstop', async () => {
    // The trigger off: the write commits without a notification, as if it had been lost.
    await admin.query('ALTER TABLE monitors DISABLE TRIGGER monitors_wake_insert');
    try {
      // The runner has finished the previous test's probe (its result stored) and gone to its idle sleep.
      const monitorLoop = () =>
        loopBook(rt.metrics.loopTicks)
          .report(Date.now())
          .find((l) => l.loop === 'channel_monitor');
      await waitFor(async () => (await admin.query(`SELECT 1 FROM monitor_results r JOIN monitors m ON m.id = r.monitor_id WHERE m.name = 'first'`)).rowCount && monitorLoop()?.in_tick_ms === null, {
        what: () => `the runner idle after the first probe (loop: ${JSON.stringify(monitorLoop())})`,
      });
      const before = await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"');
      await rt.services.monitors.create(monitor(target.url, 'silent'));
      await waitFor(() => (target.hits.get('silent') ?? 0) >= 1, { what: 'the probe after the backstop' });
      expect(await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"')).toBe(before);
    } finally {
      await admin.query('ALTER TABLE monitors ENABLE TRIGGER monitors_wake_insert');
    }
  });

  it('the LISTEN session killed with pg_terminate_backend: the listener reconnects and the work is still done', async () => {
    const pid = async () =>
      (
        await admin.query<{ pid: number }>(
          `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
          [LIVENESS_NS],
        )
      ).rows[0]?.pid ?? null;
    const old = await pid();
    expect(old).not.toBeNull();
    await admin.query('SELECT pg_terminate_backend($1)', [old]);
    // Work written while the listener is down is done (loops poll at their own intervals meanwhile).
    await rt.services.monitors.create(monitor(target.url, 'while-down'));
    await waitFor(() => (target.hits.get('while-down') ?? 0) >= 1, { what: 'the probe while the listener was down' });
    await waitFor(
      async () => {
        const p = await pid();
        return p !== null && p !== old;
      },
      { what: 'a new liveness session' },
    );
    await waitFor(async () => (await metric(rt, 'relay_jobs_wakeup_listener_up')) === 1, { what: 'the listener back up' });
    const before = await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"');
    await rt.services.monitors.create(monitor(target.url, 'after'));
    await waitFor(() => (target.hits.get('after') ?? 0) >= 1, { what: 'the probe after the reconnect' });
    await waitFor(async () => (await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"')) > before, { what: 'the notification on the new session' });
  });
});

describe('wake-ups, embedded mode (PGlite in-process LISTEN)', () => {
  let dir: string;
  let target: Awaited<ReturnType<typeof probeTarget>>;
  let rt: Runtime;
  beforeAll(async () => {
    // A copy of the migrated template (no cold PGlite open). The backstop is far beyond the wait
    // below, so the probe can only come from the notification.
    dir = embeddedDataDir();
    target = await probeTarget();
    const config = loadConfig({ env: { ...QUIET, RELAY_JOBS_DATA_DIR: dir, RELAY_JOBS_INSTANCE_ID: 'wake-e', RELAY_JOBS__WAKEUPS__BACKSTOP: '10m' } });
    rt = await Runtime.create(config, { logger: silentLogger() });
    rt.start();
  }, 120_000);
  afterAll(async () => {
    await rt?.shutdown();
    target?.server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a created monitor wakes the runner through the in-process notification', async () => {
    await waitFor(async () => (await metric(rt, 'relay_jobs_wakeup_listener_up')) === 1, { what: 'the listener' });
    await rt.services.monitors.create(monitor(target.url, 'embedded'));
    // A freshly started embedded runtime runs its first rounds on its one PGlite connection: at
    // load average 18 the probe took over 20 s to come.
    await waitFor(() => (target.hits.get('embedded') ?? 0) >= 1, { what: 'the probe', timeoutMs: 90_000 });
    expect(await metric(rt, 'relay_jobs_wakeups_total', 'channel="monitors"')).toBeGreaterThan(0);
  });
});
