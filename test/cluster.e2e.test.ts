import { afterAll, beforeAll, describe, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { runClusterScenario } from './helpers/cluster-scenario.js';
import { PrivateRedis, freshDatabase } from './helpers/services.js';

/**
 * Invariants 1, 2 and 4 with real processes: three `relay-jobs start` replicas share a canary
 * every second; the leader is SIGKILLed mid-round; Redis is stopped for five seconds and
 * started again; then every replica gets SIGTERM. The database records are the evidence
 * (`test/helpers/cluster-scenario.ts`; `test/pgbouncer.e2e.test.ts` runs the same through PgBouncer).
 */
describe('cluster of three real replicas', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let redis: PrivateRedis;
  let client: pg.Client;
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    db = await freshDatabase();
    redis = await PrivateRedis.start();
    client = new pg.Client({ connectionString: db.url });
    await client.connect();
  });
  afterAll(async () => {
    for (const r of replicas) if (r.proc.exitCode === null) r.proc.kill('SIGKILL');
    await client.end();
    await redis.stop();
    await db.drop();
  });

  it('no slot twice, no overlap, failover within TTL + interval, PG fallback while Redis is down, clean SIGTERM', async () => {
    await runClusterScenario({ databaseUrl: db.url, client, redis, replicas });
  }, 120_000);
});
