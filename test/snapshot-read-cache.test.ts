import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { RoutingAccounts } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { RedisSnapshotBuckets } from '../src/areas/scheduler-snapshot/store/snapshot-buckets.js';
import { SchedulerSnapshot } from '../src/areas/scheduler-snapshot/scheduler-snapshot-service.js';
import { SchedulerMetrics } from '../src/areas/scheduler-snapshot/metrics.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

/**
 * `snapshot.read_max_age` (issue 53): a replica serves a decoded bucket from memory for that long
 * after it checked the bucket's head in Redis, then checks again; the epoch floor holds throughout.
 * Real PostgreSQL and Redis; the read cache's clock is a number the test moves, so nothing waits.
 */
describe('scheduler snapshot read cache (real PostgreSQL and Redis)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let db: PgDb;
  let redis: Redis;
  const prefix = uniqueName('rjreadcache');
  let now = 0;
  let snapshot: SchedulerSnapshot;
  const b = { platform: 'openai', group: '' };

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    db = await PgDb.connect({ url: fresh.url, poolSize: 3, connectTimeoutMs: 5000 });
    redis = new Redis(REDIS_URL);
    await db.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at) SELECT 'openai', 'acc-' || g, 'x', false, now() + interval '1 day' FROM generate_series(1, 5) g`,
    );
    const buckets = new RedisSnapshotBuckets(redis, { prefix, env: 'test' });
    snapshot = new SchedulerSnapshot(buckets, new RoutingAccounts(db), systemClock, new Metrics().group(SchedulerMetrics), silentLogger(), 'rc', 100, () => now);
    await snapshot.builder.buildBucket(b, false);
  }, 60_000);

  afterAll(async () => {
    redis?.disconnect();
    await dropRedisPrefix(prefix);
    await db?.close();
    await fresh?.drop();
  });

  it('serves from memory within read_max_age of its last check, and the store again after it', async () => {
    now = 1000;
    const first = await snapshot.accounts('openai');
    expect(first.source).toBe('snapshot');
    expect(first.accounts.map((a) => a.id)).toContain(3);
    // A change reaches the store (the account leaves the bucket): the bucket's head moves.
    await db.query(`UPDATE accounts SET schedulable = false WHERE id = 3`);
    await snapshot.builder.buildBucket(b, false);
    now = 1099; // within 100 ms of the check: the decoded copy, no round trip
    const cached = await snapshot.accounts('openai');
    expect(cached.accounts.map((a) => a.id)).toContain(3);
    expect(cached.epoch).toBe(first.epoch);
    now = 1100; // read_max_age after the check: asked again
    const next = await snapshot.accounts('openai');
    expect(next.source).toBe('snapshot');
    expect(next.accounts.map((a) => a.id)).not.toContain(3);
    expect(next.epoch).toBeGreaterThan(first.epoch);
  });

  it('reads that arrive while a check runs share it, and the epoch never goes back', async () => {
    now = 5000;
    const answers = await Promise.all(Array.from({ length: 20 }, () => snapshot.accounts('openai')));
    const epochs = answers.map((a) => a.epoch);
    expect(new Set(epochs).size).toBe(1);
    const later = await snapshot.accounts('openai');
    expect(later.epoch).toBeGreaterThanOrEqual(epochs[0]!);
  });
});
