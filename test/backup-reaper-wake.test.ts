import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Registry } from 'prom-client';
import { BackupService } from '../src/areas/backup/backup-service.js';
import { Backups } from '../src/areas/backup/store/backups.js';
import { PgDumper } from '../src/areas/backup/dumper.js';
import { BackupMetrics } from '../src/areas/backup/metrics.js';
import { WakeHub } from '../src/workers/wake-hub.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { backupEnv } from './helpers/backup-env.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';

/** Issue 26: the backup reaper is woken by a backup starting (migration 028) and sleeps until its lease could expire. */
describe('backup reaper wake-ups (real PostgreSQL)', () => {
  let env: Awaited<ReturnType<typeof backupEnv>>;
  beforeAll(async () => {
    env = await backupEnv({ verify: false });
  });
  afterAll(async () => env.cleanup());

  const start = (id: string, leaseMs: number) =>
    env.backups.start({
      id,
      trigger: 'manual',
      instanceId: 'replica-dead',
      leaseMs,
      storage: 'fs',
      location: 'x',
      objectKey: `test/x/${id}.dump.gz`,
      format: 'pg_dump',
      compression: 'gzip',
      jobRunId: null,
    });

  it('a backup starting notifies relay_jobs_wake with topic backups', async () => {
    const c = new pg.Client({ connectionString: env.url });
    await c.connect();
    try {
      const topics: string[] = [];
      c.on('notification', (n) => topics.push(`${n.channel}:${n.payload}`));
      await c.query('LISTEN relay_jobs_wake');
      await start('wakeb0000001', 60_000);
      await waitFor(async () => topics.includes('relay_jobs_wake:backups'), { what: 'the backups notification' });
      await env.backups.finish('wakeb0000001', 'replica-dead', { state: 'failed', error: 'test over' });
    } finally {
      await c.end();
    }
  });

  it('woken once by a start, the reaper reaps the backup when its lease expires, with no other wake and a 10 min backstop', async () => {
    const hub = new WakeHub(true, 30_000);
    hub.setListening(true);
    const reaper = new BackupService({
      backups: new Backups(env.db),
      storage: env.storage,
      dumper: new PgDumper({ db: env.db, url: env.url, level: 6 }),
      verifier: null,
      clock: systemClock,
      log: silentLogger(),
      metrics: new BackupMetrics(new Registry()),
      instanceId: 'replica-a',
      env: 'test',
      dbName: env.name,
      compression: 'gzip',
      leaseMs: 30_000,
      keepLast: 14,
      wakes: hub,
    });
    hub.on('backups', (why) => reaper.wakeReaper(why));
    reaper.startReaper();
    try {
      await start('wakeb0000002', 800);
      hub.emit('backups'); // what the listener does with the notification
      await waitFor(async () => (await env.backups.get('wakeb0000002'))!.state === 'failed', { what: 'the reaper to reap the expired lease', timeoutMs: 20_000 });
      expect((await env.backups.get('wakeb0000002'))!.error).toMatch(/abandoned: instance replica-dead/);
    } finally {
      await reaper.stop(Deadline.within(systemClock, 5000));
    }
  });
});
