import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime, type JobView } from '../src/app/runtime.js';
import { createLogger } from '../src/telemetry/logger.js';
import { JOBS } from '../src/app/registry.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

/** Real PostgreSQL and Redis, two replicas: platform_quota_flusher (scope instance) runs on r1 only, as if r2's loop were dead. */
describe('health per replica (real PostgreSQL and Redis, two runtimes)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  const prefix = uniqueName('rjhr');
  const runtimes: Runtime[] = [];
  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
  });
  afterAll(async () => {
    for (const rt of runtimes) await rt.shutdown().catch(() => undefined);
    await dropRedisPrefix(prefix);
    await db.drop();
  });

  async function replica(id: string, flusher: boolean): Promise<Runtime> {
    const env: Record<string, string> = {
      DATABASE_URL: db.url,
      REDIS_URL,
      RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
      RELAY_JOBS_INSTANCE_ID: id,
      RELAY_JOBS_ENV: 'test',
      RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
      RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '1s',
    };
    for (const j of JOBS) env[`RELAY_JOBS__JOBS__${j.name.toUpperCase()}__ENABLED`] = 'false';
    env.RELAY_JOBS__JOBS__PLATFORM_QUOTA_FLUSHER__ENABLED = String(flusher);
    env.RELAY_JOBS__JOBS__PLATFORM_QUOTA_FLUSHER__EVERY = '1s';
    env.RELAY_JOBS__JOBS__PLATFORM_QUOTA_FLUSHER__TIMEOUT = '1s';
    const rt = await Runtime.create(loadConfig({ env }), { logger: createLogger({ level: 'silent', instanceId: id, env: 'test' }) });
    runtimes.push(rt);
    rt.start();
    return rt;
  }

  async function until(rt: Runtime, want: (v: JobView) => boolean, what: string): Promise<JobView> {
    let last: JobView | undefined;
    return waitFor(
      async () => {
        last = (await rt.jobViews()).find((j) => j.name === 'platform_quota_flusher');
        return last && want(last) ? last : undefined;
      },
      { what: () => `${what}; last view: ${JSON.stringify(last)}`, timeoutMs: 90_000, intervalMs: 250 },
    );
  }

  it("a replica whose loop does not run is late, named in the job's view; the job is healthy again once that replica leaves the live set", async () => {
    const r1 = await replica('r1', true);
    const r2 = await replica('r2', false);
    // r1 rounds every second; r2 is live (it beats) but never rounds: late once a round was due since r2 started.
    const late = await until(r1, (v) => v.health === 'late', 'late because of r2');
    expect(late.worst_instance).toBe('r2');
    expect(late.health_reason).toMatch(/^replica r2: no round has run; one was due by /);
    expect(late.last_run?.instance_id).toBe('r1'); // the cluster-wide newest round, still shown, would have said healthy
    const byId = Object.fromEntries((late.instances ?? []).map((i) => [i.instance_id, i]));
    expect(Object.keys(byId).sort()).toEqual(['r1', 'r2']);
    expect(byId.r1).toMatchObject({ health: 'healthy', last_round: { instance_id: 'r1' } });
    expect(byId.r2).toMatchObject({ health: 'late', last_round: null });
    // Cluster jobs carry no per-replica detail.
    expect((await r1.jobViews()).find((j) => j.name === 'canary')).toMatchObject({ instances: null, worst_instance: null });

    await r2.shutdown(); // marks r2 stopped: it leaves the live set
    const healthy = await until(r1, (v) => v.health === 'healthy', 'healthy after r2 left');
    expect(healthy.worst_instance).toBeNull();
    expect(healthy.instances?.map((i) => i.instance_id)).toEqual(['r1']);
  });
});
