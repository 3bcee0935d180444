import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { coveredCutoff } from '../src/areas/ops/ops-cleanup.js';
import { outcomeOf } from './helpers/rounds.js';
import { DEAD_REPLICA_HORIZON_MS } from '../src/coordination/instance-retention.js';
import { LIVENESS_NS } from '../src/store/liveness-sql.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const hourStart = (t: number) => new Date(Math.floor(t / HOUR) * HOUR);

/**
 * Issue 50 point 3: ops_cleanup never deletes minute (or hourly) buckets the ops_aggregation
 * watermark has not covered, the rule usage_cleanup keeps; dead_letters has a retention
 * (`ops.retention_days.dead_letters`) and is pruned; so are the rows of replicas gone for good.
 */
describe('ops_cleanup respects the aggregation watermark and prunes dead letters', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  const prefix = uniqueName('rjopsclean');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'clean-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '3',
        RELAY_JOBS__OPS__RETENTION_DAYS__DEAD_LETTERS: '30',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
  });
  afterAll(async () => {
    await rt?.shutdown();
    await sql?.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  const minuteBuckets = async () => (await sql.query<{ bucket: Date }>(`SELECT bucket FROM ops_metrics_minute ORDER BY bucket`)).rows.map((r) => r.bucket.getTime());
  const setWatermark = (key: string, at: Date) =>
    sql.query(
      `INSERT INTO job_cursors (job_name, key, value, fencing_token) VALUES ('ops_aggregation', $1, $2::jsonb, 0)
       ON CONFLICT (job_name, key) DO UPDATE SET value = EXCLUDED.value`,
      [key, JSON.stringify(at.toISOString())],
    );

  it('keeps minute rows past retention the aggregation has not covered, failing the target with the watermark; deletes them once covered', async () => {
    const now = Date.now();
    const covered = hourStart(now - 20 * DAY).getTime(); // rolled up: goes
    const uncovered = hourStart(now - 10 * DAY).getTime(); // past the 7 days, but after the watermark: stays
    const fresh = hourStart(now - 2 * HOUR).getTime(); // inside retention: stays
    for (const b of [covered, uncovered, fresh]) {
      await sql.query(`INSERT INTO ops_metrics_minute (bucket, bucket_seconds, metrics, fencing_token) VALUES ($1, 60, '{}', 1)`, [new Date(b)]);
    }
    // ops_aggregation stopped 12 days ago.
    const watermark = hourStart(now - 12 * DAY);
    await setWatermark('hourly_watermark', watermark);
    await setWatermark('daily_watermark', new Date(Math.floor(now / DAY) * DAY));

    const first = outcomeOf(await rt.runNow('ops_cleanup'));
    expect(first?.status).toBe('failed');
    expect(first?.error).toMatch(/ops_metrics_minute: FAILED after 1: refusing to delete rows before .*ops_aggregation has only covered buckets before/);
    expect(first?.error).toContain(watermark.toISOString());
    expect(await minuteBuckets()).toEqual([uncovered, fresh]);

    // The aggregation catches up: the next round deletes what is now covered and past retention.
    await setWatermark('hourly_watermark', hourStart(now));
    const second = outcomeOf(await rt.runNow('ops_cleanup'));
    expect(second?.status, second?.error ?? undefined).not.toBe('failed');
    expect(await minuteBuckets()).toEqual([fresh]);
  });

  it('0 (the operator\'s "empty it", here an API override) deletes what the aggregation covered and nothing past its watermark', async () => {
    await sql.query(`DELETE FROM ops_metrics_minute`);
    const now = Date.now();
    const watermark = hourStart(now - 3 * DAY);
    const coveredRow = hourStart(now - 4 * DAY).getTime();
    const uncoveredRows = [hourStart(now - 2 * DAY).getTime(), hourStart(now - HOUR).getTime()];
    for (const b of [coveredRow, ...uncoveredRows]) {
      await sql.query(`INSERT INTO ops_metrics_minute (bucket, bucket_seconds, metrics, fencing_token) VALUES ($1, 60, '{}', 1)`, [new Date(b)]);
    }
    await setWatermark('hourly_watermark', watermark);
    await rt.services.ops.retention.put({ ops_metrics_minute: 0 });
    try {
      const out = outcomeOf(await rt.runNow('ops_cleanup'));
      expect(out?.status, out?.error ?? undefined).not.toBe('failed');
      expect(await minuteBuckets()).toEqual(uncoveredRows);
    } finally {
      await sql.query(`DELETE FROM ops_retention`);
    }
  });

  it('with no watermark at all (the aggregation never ran) nothing of a folded target is deleted', async () => {
    await sql.query(`DELETE FROM job_cursors WHERE job_name = 'ops_aggregation'`);
    await sql.query(`DELETE FROM ops_metrics_hourly`);
    const old = hourStart(Date.now() - 200 * DAY);
    await sql.query(`INSERT INTO ops_metrics_hourly (bucket, metrics, samples) VALUES ($1, '{}', 60)`, [old]);
    const out = outcomeOf(await rt.runNow('ops_cleanup'));
    expect(out?.status).toBe('failed');
    expect(out?.error).toMatch(/ops_metrics_hourly: FAILED after 0: refusing to delete rows before .*\(nothing yet\)/);
    expect(Number((await sql.query(`SELECT count(*) AS n FROM ops_metrics_hourly`)).rows[0].n)).toBe(1);
  });

  it('prunes dead letters older than ops.retention_days.dead_letters and keeps the newer ones', async () => {
    await sql.query(`DELETE FROM dead_letters`);
    await sql.query(
      `INSERT INTO dead_letters (source, reason, payload, created_at) VALUES
         ('usage', 'old', '{}', now() - interval '45 days'),
         ('quota_flush', 'old', '{}', now() - interval '31 days'),
         ('usage', 'new', '{}', now() - interval '29 days'),
         ('usage_spill', 'new', '{}', now())`,
    );
    const out = outcomeOf(await rt.runNow('ops_cleanup'));
    expect(out?.note ?? out?.error).toMatch(/dead_letters: 2/);
    const left = (await sql.query<{ reason: string }>(`SELECT reason FROM dead_letters ORDER BY id`)).rows.map((r) => r.reason);
    expect(left).toEqual(['new', 'new']);
    // The retention API knows the target too.
    const targets = await rt.services.ops.retention.overrides();
    expect(targets).toEqual({});
  });

  it('prunes the rows of replicas silent past the dead-replica horizon (a frozen one holding its liveness key stays), and their schedule votes at the next check', async () => {
    const horizon = `clock_timestamp() - $1 * interval '1 millisecond'`;
    const add = (id: string, beat: string, stopped: boolean, aliveKey: number | null) =>
      sql.query(
        `INSERT INTO instances (instance_id, boot_id, env, mode, hostname, pid, version, started_at, heartbeat_at, stopped_at, alive_key)
         VALUES ($2, gen_random_uuid(), 'test', 'cluster', 'h', 1, 't', ${beat}, ${beat}, ${stopped ? beat : 'NULL'}, $3)`,
        [DEAD_REPLICA_HORIZON_MS, id, aliveKey],
      );
    await add('gone-dead', `${horizon} - interval '1 minute'`, false, null); // SIGKILLed 7 days and a minute ago
    await add('gone-stopped', `${horizon} - interval '2 days'`, true, null); // stopped cleanly 9 days ago
    await add('dead-recent', `${horizon} + interval '1 hour'`, false, null); // still named by the doctor
    // Frozen (SIGSTOP) past the horizon, still holding its liveness key: alive by the one test.
    await sql.query(`SELECT pg_advisory_lock(${LIVENESS_NS}, 4242)`);
    await add('frozen', `${horizon} - interval '1 day'`, false, 4242);
    await sql.query(`INSERT INTO job_schedule_votes (job_name, instance_id, fingerprint, spec) VALUES ('ops_cleanup', 'gone-dead', 'f', '{}')`);
    const ids = async () => (await sql.query<{ instance_id: string }>(`SELECT instance_id FROM instances ORDER BY instance_id`)).rows.map((r) => r.instance_id);
    try {
      const out = outcomeOf(await rt.runNow('ops_cleanup'));
      expect(out?.note ?? out?.error).toMatch(/instances: 2(;|$)/);
      expect(await ids()).toEqual(['clean-1', 'dead-recent', 'frozen']);
      // The pruned replica's vote has no row left to judge it by: the live replica's next check drops it.
      await rt.schedules.publish();
      const voters = (await sql.query<{ instance_id: string }>(`SELECT DISTINCT instance_id FROM job_schedule_votes ORDER BY 1`)).rows.map((r) => r.instance_id);
      expect(voters).toEqual(['clean-1']);
    } finally {
      await sql.query(`SELECT pg_advisory_unlock(${LIVENESS_NS}, 4242)`);
    }
  });

  it('aligns the cutoff down to the rollup bucket and never past the watermark', () => {
    const cover = { job: 'ops_aggregation', key: 'hourly_watermark', alignMs: HOUR };
    const wm = new Date(Date.UTC(2026, 11, 10, 12));
    expect(coveredCutoff(new Date(Date.UTC(2026, 11, 3, 7, 42)), wm, cover)).toEqual(new Date(Date.UTC(2026, 11, 3, 7)));
    expect(coveredCutoff(new Date(Date.UTC(2026, 11, 11)), wm, cover)).toEqual(wm);
    expect(coveredCutoff(null, wm, cover)).toEqual(wm);
    expect(coveredCutoff(new Date(Date.UTC(2026, 11, 3)), null, cover)).toEqual(new Date(0));
  });
});
