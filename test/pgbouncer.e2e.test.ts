import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { INTERVAL, LOCK_TTL, runClusterScenario } from './helpers/cluster-scenario.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { PgBouncer, hasPgbouncer } from './helpers/pgbouncer.js';
import { TEST_MASTER_KEY } from './helpers/services.js';
import { loadConfig } from '../src/app/config-schema.js';
import { redactConfig } from '../src/config/load.js';

/**
 * The cluster scenario (SIGKILL of the leader mid-round, a five-second Redis outage, SIGTERM)
 * with every statement through a real PgBouncer in transaction pooling mode and the session
 * state (liveness, advisory-lock fallback) on DATABASE_DIRECT_URL.
 */
describe.runIf(hasPgbouncer())('cluster behind PgBouncer in transaction mode, sessions on DATABASE_DIRECT_URL', () => {
  let cluster: Cluster | undefined;
  let bouncer: PgBouncer;

  beforeAll(async () => {
    [cluster, bouncer] = await Promise.all([startCluster({ replicas: 0, migrate: false }), PgBouncer.start('transaction')]);
  });
  afterAll(async () => {
    await cluster?.stop();
    await bouncer?.stop();
  });

  it('no slot twice, crash failover through the liveness session (not the lease), PG fallback while Redis is down', async () => {
    const r = await runClusterScenario({ cluster: cluster!, env: { DATABASE_URL: bouncer.url(cluster!.databaseName!), DATABASE_DIRECT_URL: cluster!.databaseUrl! } });
    // Taken over at the next slot because the victim's liveness session ended, not when its lease
    // ran out: a lease renewed every ttl/3 expires at least ttl − ttl/3 after the kill.
    expect(r.after.start - r.killedAt, 'takeover waited for the lease: the liveness session did not work behind PgBouncer').toBeLessThan(LOCK_TTL - LOCK_TTL / 3);
    expect(r.after.start - r.killedAt).toBeLessThanOrEqual(INTERVAL + 1000);
    for (const p of cluster!.replicas.map((x) => x.proc)) {
      expect(
        p.lines.some((l) => l.includes('DATABASE_URL reaches PostgreSQL through a pooler or proxy')),
        `${p.name}: prepared statements left on behind PgBouncer`,
      ).toBe(true);
      expect(
        // database.prepared_statements auto: the start-up probe finds PgBouncer on DATABASE_URL, so PgBouncer 1.18 never refuses one.
        p.lines.filter((l) => /not held by this session|crash detection off|refused a prepared statement/.test(l)),
        p.name,
      ).toEqual([]);
    }
  }, 120_000);
});

describe('DATABASE_DIRECT_URL', () => {
  it('is a cluster-mode key: refused without DATABASE_URL, masked when printed', () => {
    expect(() => loadConfig({ env: { DATABASE_DIRECT_URL: 'postgres://app:pw@db/x' } })).toThrow(/database\.direct_url \(DATABASE_DIRECT_URL\) is set but DATABASE_URL is not/);
    expect(() => loadConfig({ env: { DATABASE_URL: 'postgres://db/x', REDIS_URL: 'redis://r', DATABASE_DIRECT_URL: 'mysql://db', RELAY_JOBS_INSTANCE_ID: 'a', RELAY_JOBS_ENV: 'e' } })).toThrow(
      /database\.direct_url[\s\S]*postgres:\/\//,
    );
    const config = loadConfig({
      env: {
        DATABASE_URL: 'postgres://db/x',
        REDIS_URL: 'redis://r',
        DATABASE_DIRECT_URL: 'postgres://app:hunter2@db-direct/x',
        RELAY_JOBS_INSTANCE_ID: 'a',
        RELAY_JOBS_ENV: 'e',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
      },
    });
    expect(config.database.direct_url).toBe('postgres://app:hunter2@db-direct/x');
    expect(JSON.stringify(redactConfig(config))).not.toContain('hunter2');
  });
});
