import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { PrivateRedis, TEST_MASTER_KEY, freshDatabase } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { CHECKS, Doctor } from '../src/areas/doctor/index.js';

const ADMIN = 'quota-outage-admin-token-0123';
const auth = { authorization: `Bearer ${ADMIN}` };

/** Quota increments during a Redis outage answer 503 (retryable), not 500; the dirty-set size is a gauge (issue 10). */
describe('platform quota while Redis is down', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let redis: PrivateRedis;
  let rt: Runtime;
  let http: FastifyInstance;
  const inc = (user: string) => http.inject({ method: 'POST', url: '/api/v1/quota/usage', headers: auth, payload: { increments: [{ user_id: user, platform: 'openai', amount: 3 }] } });

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    redis = await PrivateRedis.start();
    rt = await Runtime.create(
      loadConfig({
        env: {
          DATABASE_URL: db.url,
          REDIS_URL: redis.url,
          RELAY_JOBS_INSTANCE_ID: 'qo-1',
          RELAY_JOBS_ENV: 'test',
          RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
          RELAY_JOBS_ADMIN_TOKEN: ADMIN,
          RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
          RELAY_JOBS__DATABASE__POOL_SIZE: '4',
          RELAY_JOBS__REDIS__COMMAND_TIMEOUT: '300ms',
        },
      }),
      { logger: silentLogger() },
    );
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await redis.stop();
    await db.drop();
  });

  it('answers 503 with Retry-After while Redis is down, 200 again once it is back; the dirty-set gauge follows the flusher', async () => {
    expect((await inc('before')).statusCode).toBe(200);
    await rt.runNow('platform_quota_flusher');
    expect((await http.inject('/metrics')).body).toMatch(/^relay_jobs_quota_dirty_keys 0$/m);
    await redis.stop();
    const down = await inc('during');
    expect(down.statusCode, down.body).toBe(503);
    expect(down.headers['retry-after']).toBe('1');
    expect(down.json().error.code).toBe('quota_unavailable');
    await redis.start();
    // Until the client has reconnected (its back-off grows while Redis is down; a loaded machine slows it further).
    await waitFor(async () => (await inc('after')).statusCode === 200, { what: 'a quota increment answered 200 after Redis came back', timeoutMs: 90_000, intervalMs: 100 });
    // The private Redis came back empty; the new counter is dirty until the next flush.
    expect(await rt.services.quota.dirtyCount()).toBe(1);
    expect((await http.inject('/metrics')).body).toMatch(/^relay_jobs_quota_dirty_keys 1$/m);
  });
});

/** A replica of another RELAY_JOBS_ENV refuses to join live replicas in the same database (issue 10). */
describe('mixed environments in one database', () => {
  it('refuses to start naming the other environment, unless cluster.allow_mixed_env', async () => {
    const db = await freshDatabase({ migrated: true });
    const redis = await PrivateRedis.start();
    const env = (e: string, id: string, extra: Record<string, string> = {}) =>
      loadConfig({
        env: { DATABASE_URL: db.url, REDIS_URL: redis.url, RELAY_JOBS_INSTANCE_ID: id, RELAY_JOBS_ENV: e, RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY, RELAY_JOBS__DATABASE__POOL_SIZE: '2', ...extra },
      });
    const prod = await Runtime.create(env('production', 'p-1'), { logger: silentLogger() });
    try {
      await expect(Runtime.create(env('staging', 's-1'), { logger: silentLogger() })).rejects.toThrow(/environment "production" \(p-1\).*RELAY_JOBS_ENV is "staging"/);
      const same = await Runtime.create(env('production', 'p-2'), { logger: silentLogger() });
      await same.shutdown();
      const allowed = await Runtime.create(env('staging', 's-2', { RELAY_JOBS__CLUSTER__ALLOW_MIXED_ENV: 'true' }), { logger: silentLogger() });
      await allowed.shutdown();
      // The same environment on another Redis key prefix: its quota counters, locks and snapshot
      // would be a key space the others never read (it joined silently, and a user's usage split in two).
      const otherPrefix = env('production', 'p-3', { RELAY_JOBS__REDIS__KEY_PREFIX: 'elsewhere' });
      await expect(Runtime.create(otherPrefix, { logger: silentLogger() })).rejects.toThrow(
        'live replicas p-1 of this database and environment use redis.key_prefix "relay-jobs", and this replica\'s is "elsewhere"',
      );
      // A one-shot command is not a replica (nothing of it stays in the key space): it runs, and its
      // doctor says what is apart.
      const oneShot = await Runtime.create(otherPrefix, { logger: silentLogger(), register: false });
      try {
        const report = await new Doctor(
          {
            config: otherPrefix,
            db: oneShot.db,
            redis: oneShot.redis,
            clock: oneShot.clock,
            jobs: () => [],
            instances: () => oneShot.instances(),
            replica: () => false,
            breakers: () => [],
            backupDir: null,
          },
          CHECKS.filter((c) => c.name === 'same_backends'),
        ).run();
        expect(report.checks[0]).toMatchObject({ status: 'fail', measured: expect.stringContaining('replica p-1 uses redis.key_prefix "relay-jobs", this one "elsewhere"') });
      } finally {
        await oneShot.shutdown();
      }
    } finally {
      await prod.shutdown();
      await redis.stop();
      await db.drop();
    }
  });
});
