import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { defineJob } from '../src/modules/define-job.js';
import { checkJobSections } from '../src/app/registry.js';
import { captureLogs } from './helpers/log-capture.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

let release: (() => void) | null = null;

/** A short job (1 s timeout) that ignores its AbortSignal and holds its lease until the test lets it go. */
const stubbornJob = defineJob({
  name: 'stubborn',
  description: 'Ignores its signal: holds its lease past its timeout',
  scope: 'cluster',
  defaults: { enabled: false, every: '1h', timeout: '1s', lockTtl: '3s' },
  needs: ['metrics'],
  async run() {
    await new Promise<void>((r) => (release = r));
    return { items: 1 };
  },
});

/**
 * Issue 50 point 5: a lease held past its job's timeout is logged at warn once per episode
 * (one round holding on), with job, holder and age, not once per renewal tick.
 */
describe('a lease held past the job timeout', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  const prefix = uniqueName('rjoverrun');
  const logs = captureLogs('overrun-1', 'info');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'overrun-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '3',
      },
      checkJobs: checkJobSections([stubbornJob]),
    });
    rt = await Runtime.create(config, { jobs: [stubbornJob], logger: logs.logger });
  });
  afterAll(async () => {
    release?.();
    await rt?.shutdown();
    await sql?.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  const warns = () => logs.lines.filter((l) => l.level === 'warn' || l.level === 40).filter((l) => String(l.msg).startsWith('lease held past the job timeout'));
  const leaseUntil = async () => (await sql.query<{ lease_until: Date }>(`SELECT lease_until FROM job_state WHERE job_name = 'stubborn'`)).rows[0]?.lease_until.getTime() ?? 0;

  /** One episode: the round overruns, is warned about once, renews on several more ticks, then ends. */
  async function episode(n: number) {
    release = null;
    const round = rt.runNow('stubborn');
    await waitFor(() => warns().length === n, { what: `warn line ${n}`, timeoutMs: 30_000 });
    // Three more renewals (a tick a second with a 3 s lease) while it still holds on: no more lines.
    const seen = new Set<number>([await leaseUntil()]);
    await waitFor(async () => seen.add(await leaseUntil()).size >= 4, { what: 'three more renewals', intervalMs: 100 });
    expect(warns()).toHaveLength(n);
    release!();
    return outcomeOf(await round);
  }

  it('warns once per episode with job, holder and age; renewals add no line', async () => {
    const first = await episode(1);
    // The round ignored its signal and returned: its outcome is whatever it returned.
    expect(first?.status).toBe('ok');
    const w = warns()[0]!;
    expect(w).toMatchObject({ job: 'stubborn', holder: 'overrun-1', timeout_ms: 1000 });
    expect(w.age_ms as number).toBeGreaterThan(2000);
    // A second episode is a second line.
    await episode(2);
    expect(warns()).toHaveLength(2);
  });
});
