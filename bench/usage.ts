/**
 * Usage data at volume, each figure against a baseline in the same run:
 * - ingest: the UsageWriter (multi-row batches) vs one INSERT per event;
 * - cleanup of N rows: partition drop and batched delete vs one big DELETE (rows/s, longest transaction);
 * - aggregation of the rows into hourly/daily rollups, and dashboard query time on rollups vs raw rows;
 * - flushing 100,000 dirty quota counters vs one upsert per counter.
 */
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { UsageStore, utcDayStart } from '../src/areas/usage/store/usage.js';
import { Rollups } from '../src/areas/usage/store/rollups.js';
import { QuotaUsage } from '../src/areas/usage/store/quota-usage.js';
import { UsageWriter } from '../src/areas/usage/usage-writer.js';
import { PlatformQuota } from '../src/areas/usage/platform-quota.js';
import { rebuildRange } from '../src/areas/usage/rollup-rebuild.js';
import { RedisQuotaCounters, quotaMember } from '../src/coordination/quota-counters.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { DeadLetters } from '../src/store/dead-letters.js';
import { Deadline } from '../src/time/deadline.js';
import { systemClock } from '../src/time/clock.js';

const DAY = 86_400_000;

export interface Line {
  what: string;
  value: string;
}

async function withDb<T>(fn: (db: PgDb) => Promise<T>): Promise<T> {
  const fresh = await freshDatabase();
  const db = await PgDb.connect({ url: fresh.url, poolSize: 10, connectTimeoutMs: 5000 });
  try {
    await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
    await fresh.drop();
  }
}

const event = (i: number, t: number) => ({
  request_id: `r${i}`,
  user_id: `u${i % 1000}`,
  api_key_id: null,
  account_id: `a${i % 200}`,
  platform: ['openai', 'anthropic', 'gemini'][i % 3]!,
  model: `m${i % 20}`,
  input_tokens: 100,
  output_tokens: 200,
  cache_tokens: 0,
  cost: '0.0012345',
  latency_ms: 300,
  status_code: i % 50 === 0 ? 500 : 200,
  created_at: new Date(t).toISOString(),
});

export async function benchIngest(n = 50_000, baselineN = 5000): Promise<{ writer: number; perEvent: number }> {
  return withDb(async (db) => {
    const store = new UsageStore(db);
    const now = Date.now();
    await store.ensurePartitions([utcDayStart(now)]);
    // Baseline: what a gateway does without a writer, one INSERT per event (8 at a time).
    let next = 0;
    let t = performance.now();
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < baselineN) {
          const e = event(next++, now);
          await db.query(
            `INSERT INTO usage_logs (request_id, user_id, account_id, platform, model, input_tokens, output_tokens, cache_tokens, cost, latency_ms, status_code, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)`,
            [e.request_id, e.user_id, e.account_id, e.platform, e.model, e.input_tokens, e.output_tokens, e.cache_tokens, e.cost, e.latency_ms, e.status_code, e.created_at],
          );
        }
      }),
    );
    const perEvent = baselineN / ((performance.now() - t) / 1000);
    const writer = new UsageWriter(store, { batchSize: 1000, queueLimit: n + 1, overflow: 'sync', spillDir: '/tmp' }, new Metrics(), silentLogger(), new DeadLetters(db));
    t = performance.now();
    for (let i = 0; i < n; i++) writer.record(event(1_000_000 + i, now));
    await writer.stop(Deadline.within(systemClock, 600_000));
    const rate = n / ((performance.now() - t) / 1000);
    return { writer: rate, perEvent };
  });
}

async function fill(db: PgDb, store: UsageStore, rows: number, days: number, end: number): Promise<void> {
  const start = end - days * DAY;
  await store.ensurePartitions(Array.from({ length: days + 1 }, (_, i) => utcDayStart(start) + i * DAY));
  const chunk = 1_000_000;
  for (let off = 0; off < rows; off += chunk) {
    const n = Math.min(chunk, rows - off);
    await db.query(
      `INSERT INTO usage_logs (request_id, user_id, account_id, platform, model, input_tokens, output_tokens, cache_tokens, cost, latency_ms, status_code, created_at)
       SELECT 'r' || g, 'u' || (g % 100), 'a' || (g % 50), (ARRAY['openai','anthropic','gemini'])[1 + g % 3], 'm' || (g % 20), 100, 200, 0, 0.0012345, 300,
              CASE WHEN g % 50 = 0 THEN 500 ELSE 200 END, to_timestamp($1 / 1000.0) + (g::float8 * $2 / $3) * interval '1 millisecond'
       FROM generate_series($4::bigint, $5::bigint) g`,
      [start, end - start, rows, off + 1, off + n],
    );
  }
  await db.query(`ANALYZE usage_logs`);
}

/** Longest single statement of a cleanup = its longest transaction (each statement commits on its own). */
export async function benchCleanup(rows: number, days = 10): Promise<Array<{ method: string; rows: number; seconds: number; rowsPerSec: number; longestTxMs: number }>> {
  const out = [];
  for (const method of ['one big DELETE (baseline)', 'partition drop', 'batched DELETE (5,000/tx)'] as const) {
    out.push(
      await withDb(async (db) => {
        const store = new UsageStore(db);
        const end = utcDayStart(Date.now());
        await fill(db, store, rows, days, end);
        let longest = 0;
        const timed = async <T>(fn: () => Promise<T>) => {
          const t = performance.now();
          const r = await fn();
          longest = Math.max(longest, performance.now() - t);
          return r;
        };
        const t = performance.now();
        let deleted = 0;
        if (method === 'partition drop') {
          for (const p of await store.partitions()) if (p.dayStart + DAY <= end) deleted += await timed(() => store.dropPartition(p.name, p.dayStart));
        } else if (method === 'one big DELETE (baseline)') {
          deleted = (await timed(() => db.query(`DELETE FROM usage_logs WHERE created_at < $1`, [new Date(end)]))).rowCount;
        } else {
          for (let from: Date | undefined; ;) {
            const r = await timed(() => store.deleteBatch({ before: new Date(end), from }, 5000));
            deleted += r.deleted;
            if (r.deleted < 5000) break;
            from = r.latest ?? from;
          }
        }
        const seconds = (performance.now() - t) / 1000;
        return { method, rows: deleted, seconds, rowsPerSec: deleted / seconds, longestTxMs: longest };
      }),
    );
  }
  return out;
}

export async function benchAggregation(sizes: number[]): Promise<Array<{ rows: number; aggregateS: number; dashRollupMs: number; dashRawMs: number }>> {
  const out = [];
  for (const rows of sizes) {
    out.push(
      await withDb(async (db) => {
        const store = new UsageStore(db);
        const rollups = new Rollups(db, 'UTC');
        const end = Math.floor(Date.now() / 3_600_000) * 3_600_000;
        await fill(db, store, rows, 7, end);
        const t = performance.now();
        await rebuildRange(rollups, new Date(end - 7 * DAY), new Date(end), () => undefined);
        const aggregateS = (performance.now() - t) / 1000;
        await db.query(`ANALYZE usage_hourly`);
        const from = new Date(end - 7 * DAY);
        const to = new Date(end);
        const median = async (fn: () => Promise<unknown>) => {
          const s: number[] = [];
          for (let i = 0; i < 5; i++) {
            const t0 = performance.now();
            await fn();
            s.push(performance.now() - t0);
          }
          return s.sort((a, b) => a - b)[2]!;
        };
        const dashRollupMs = await median(() => rollups.query({ from, to, granularity: 'hour', groupBy: 'model' }));
        const dashRawMs = await median(() =>
          db.query(
            `SELECT date_trunc('hour', created_at, 'UTC') AS t, model, count(*), sum(input_tokens), sum(output_tokens), sum(cost) FROM usage_logs WHERE created_at >= $1 AND created_at < $2 GROUP BY 1, 2 ORDER BY 1, 2`,
            [from, to],
          ),
        );
        return { rows, aggregateS, dashRollupMs, dashRawMs };
      }),
    );
  }
  return out;
}

export async function benchQuotaFlush(keys = 100_000, baselineKeys = 10_000): Promise<{ flushPerSec: number; perKeyPerSec: number }> {
  return withDb(async (db) => {
    const redis = new Redis(REDIS_URL);
    const prefix = uniqueName('rjbenchq');
    try {
      const counters = new RedisQuotaCounters(redis, { prefix, env: 'bench' });
      const store = new QuotaUsage(db);
      const quota = new PlatformQuota(counters, store, 1000, new Metrics(), silentLogger(), new DeadLetters(db));
      // Seeded counters for `keys` users (as after their first increment), all dirty.
      for (let i = 0; i < keys; i += 1000) {
        const p = redis.pipeline();
        for (let j = i; j < Math.min(keys, i + 1000); j++) {
          const m = quotaMember(`u${j}`, 'openai');
          p.hset(`${prefix}:bench:quota:${m}`, 'used', j, 'epoch', 0, 'seeded', 1);
          p.sadd(`${prefix}:bench:quota:dirty`, m);
        }
        await p.exec();
      }
      let t = performance.now();
      const r = await quota.flushAll();
      if (r.flushed !== keys) throw new Error(`flushed ${r.flushed} of ${keys}`);
      const flushPerSec = keys / ((performance.now() - t) / 1000);
      t = performance.now();
      for (let j = 0; j < baselineKeys; j++) await store.upsert([{ user_id: `b${j}`, platform: 'openai', used: j, epoch: 0 }]);
      const perKeyPerSec = baselineKeys / ((performance.now() - t) / 1000);
      return { flushPerSec, perKeyPerSec };
    } finally {
      redis.disconnect();
      await dropRedisPrefix(prefix);
    }
  });
}
