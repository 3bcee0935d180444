import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const DAY = 86_400_000;

/**
 * One setting prunes job_runs: `scheduler.run_retention`, applied by ops_cleanup (the retention
 * round), not by the instance heartbeat. The deprecated `ops.retention_days.job_runs` still
 * takes effect, as `scheduler.run_retention`, with a warning naming it.
 */
describe('job_runs retention', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  const prefix = uniqueName('rjret');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });
  afterAll(async () => {
    await rt?.shutdown();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  /** Finished and running records, each started `daysAgo` days before the database's now. */
  async function seed(rows: Array<{ job: string; daysAgo: number; status: string }>): Promise<void> {
    for (const r of rows) {
      await sql.query(
        `INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, status, started_at, finished_at)
         VALUES ($1, now(), 'cluster', 'manual', 'ret-1', $2, now() - make_interval(days => $3), CASE WHEN $2 = 'running' THEN NULL ELSE now() - make_interval(days => $3) END)`,
        [r.job, r.status, r.daysAgo],
      );
    }
  }
  /** A replica's environment with the deprecated key set to 2 days. */
  const env = (extra: Record<string, string> = {}) => ({
    DATABASE_URL: db.url,
    REDIS_URL,
    RELAY_JOBS_INSTANCE_ID: 'ret-1',
    RELAY_JOBS_ENV: 'test',
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
    RELAY_JOBS__DATABASE__POOL_SIZE: '3',
    RELAY_JOBS__OPS__RETENTION_DAYS__JOB_RUNS: '2',
    ...extra,
  });
  const seeded = async () =>
    (await sql.query<{ job_name: string }>(`SELECT job_name FROM job_runs WHERE instance_id = 'ret-1' AND job_name <> 'ops_cleanup' ORDER BY job_name`)).rows.map((r) => r.job_name);

  it('the deprecated ops.retention_days.job_runs still works, as scheduler.run_retention, with a warning naming it', () => {
    const config = loadConfig({ env: env() });
    expect(config.scheduler.run_retention).toBe(2 * DAY);
    expect(config.ops.retention_days).not.toHaveProperty('job_runs');
    expect(config.warnings).toEqual([expect.stringMatching(/^ops\.retention_days\.job_runs \(RELAY_JOBS__OPS__RETENTION_DAYS__JOB_RUNS\) is deprecated: .*scheduler\.run_retention: 2d/)]);
  });

  it('ops_cleanup prunes finished job_runs older than that retention; newer and running records stay', async () => {
    // Batches of 2 over 5 old rows: the round drains batch after batch, not one batch.
    const config = loadConfig({ env: env({ RELAY_JOBS__JOBS__OPS_CLEANUP__BATCH: '2' }) });
    rt = await Runtime.create(config, { logger: silentLogger() });
    await seed([
      ...Array.from({ length: 5 }, (_, i) => ({ job: `old_${i}`, daysAgo: 3, status: i % 2 ? 'failed' : 'ok' })),
      { job: 'recent', daysAgo: 1, status: 'ok' },
      { job: 'still_running', daysAgo: 3, status: 'running' },
    ]);
    expect(await seeded()).toHaveLength(7);

    const out = outcomeOf(await rt.runNow('ops_cleanup'));
    expect(out?.status).toBe('ok');
    expect(out?.note).toMatch(/(^|; )job_runs: 5(;|$)/);
    expect(await seeded()).toEqual(['recent', 'still_running']);
    // ops_cleanup's own record is new: it stays.
    expect(Number((await sql.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'ops_cleanup'`)).rows[0].n)).toBe(1);
  });
});
