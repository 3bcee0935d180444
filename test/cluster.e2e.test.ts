import { afterAll, describe, it } from 'vitest';
import { runClusterScenario } from './helpers/cluster-scenario.js';
import { startCluster, type Cluster } from './helpers/cluster.js';

/**
 * Invariants 1, 2 and 4 with real processes: three `relay-jobs start` replicas share a canary
 * every second; the leader is SIGKILLed mid-round; Redis is stopped for five seconds and
 * started again; then every replica gets SIGTERM. The database records are the evidence
 * (`test/helpers/cluster-scenario.ts`; `test/pgbouncer.e2e.test.ts` runs the same through PgBouncer).
 */
describe('cluster of three real replicas', () => {
  let cluster: Cluster | undefined;
  afterAll(() => cluster?.stop());

  it('no slot twice, no overlap, failover within TTL + interval, PG fallback while Redis is down, clean SIGTERM', async () => {
    cluster = await startCluster({ replicas: 0, migrate: false });
    await runClusterScenario({ cluster });
  }, 120_000);
});
