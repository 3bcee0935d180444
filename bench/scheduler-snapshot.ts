/**
 * The scheduler snapshot, each figure against a baseline measured in the same run:
 * - read latency: the read API's library call from the snapshot vs the same answer from PostgreSQL;
 * - change-to-visible latency while 1,000 changes/s are written, three consumers polling;
 * - full rebuild time at 10,000 and 100,000 accounts;
 * - outbox throughput with three consumers: claimed batches (this design) vs Sub2API's
 *   (one shared watermark, `SELECT … FOR UPDATE` of the next rows, no claim).
 */
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { RoutingAccounts } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { SchedulerOutbox } from '../src/areas/scheduler-snapshot/store/scheduler-outbox.js';
import { RedisSnapshotBuckets } from '../src/areas/scheduler-snapshot/store/snapshot-buckets.js';
import { SchedulerSnapshot } from '../src/areas/scheduler-snapshot/scheduler-snapshot-service.js';
import { OutboxConsumer, type ConsumerOptions } from '../src/areas/scheduler-snapshot/outbox-consumer.js';
import { byBucket } from '../src/areas/scheduler-snapshot/bucket-builder.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { SchedulerMetrics } from '../src/areas/scheduler-snapshot/metrics.js';
import { Deadline } from '../src/time/deadline.js';

const PLATFORMS = ['openai', 'claude', 'gemini'];
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;

interface Rig {
  db: PgDb;
  redis: Redis;
  routing: RoutingAccounts;
  outbox: SchedulerOutbox;
  snapshot: SchedulerSnapshot;
  metrics: Metrics;
  consumer(name: string, pollMs?: number): OutboxConsumer;
}

async function withRig<T>(accounts: number, fn: (rig: Rig) => Promise<T>): Promise<T> {
  const fresh = await freshDatabase();
  const db = await PgDb.connect({ url: fresh.url, poolSize: 12, connectTimeoutMs: 5000 });
  const redis = new Redis(REDIS_URL);
  redis.on('error', () => undefined);
  const prefix = uniqueName('rjbench');
  try {
    await migrate(db);
    await db.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at, priority)
       SELECT ($1::text[])[1 + g % 3], 'acc-' || g, 'x', false, now() + interval '30 days', g % 7 FROM generate_series(1, $2::int) g`,
      [PLATFORMS, accounts],
    );
    await db.query(`DELETE FROM scheduler_outbox`);
    const metrics = new Metrics();
    const routing = new RoutingAccounts(db);
    const outbox = new SchedulerOutbox(db);
    const buckets = new RedisSnapshotBuckets(redis, { prefix, env: 'bench' });
    const snapshot = new SchedulerSnapshot(buckets, routing, systemClock, metrics.group(SchedulerMetrics), silentLogger(), 'bench');
    const opts = (pollMs: number): ConsumerOptions => ({
      pollIntervalMs: pollMs,
      batchSize: 200,
      claimTtlMs: 30_000,
      rules: { lagBoundSeconds: 3600, lagPolls: 3, backlogLimit: 10_000_000 },
      rebuildEveryMs: 86_400_000,
      rebuildBackoffBaseMs: 5000,
      rebuildBackoffMaxMs: 300_000,
      rebuildChunk: 2000,
      ackTimeoutMs: 5000,
      ackAttempts: 3,
      deleteBatch: 50,
    });
    const consumer = (name: string, pollMs = 1000) => new OutboxConsumer(outbox, routing, snapshot, systemClock, metrics.group(SchedulerMetrics), silentLogger(), name, opts(pollMs));
    return await fn({ db, redis, routing, outbox, snapshot, metrics, consumer });
  } finally {
    await dropRedisPrefix(prefix);
    await redis.quit();
    await db.close();
    await fresh.drop();
  }
}

export interface ReadLatency {
  path: string;
  p50Ms: number;
  p99Ms: number;
}

/** 2,000 reads of one bucket (a third of `accounts`) per path. */
export async function benchReads(accounts: number, reads = 2000): Promise<ReadLatency[]> {
  return withRig(accounts, async ({ snapshot, routing }) => {
    const b = { platform: 'openai', group: '' };
    await snapshot.builder.buildBucket(b, false);
    const out: ReadLatency[] = [];
    const time = async (path: string, fn: () => Promise<unknown>) => {
      for (let i = 0; i < 100; i++) await fn();
      const ms: number[] = [];
      for (let i = 0; i < reads; i++) {
        const t = performance.now();
        await fn();
        ms.push(performance.now() - t);
      }
      out.push({ path, p50Ms: pct(ms, 0.5), p99Ms: pct(ms, 0.99) });
    };
    await time('PostgreSQL: the same bucket query and filter (baseline)', async () => {
      const rows = await routing.bucket(b);
      return rows.filter((r) => r.entry);
    });
    await time('snapshot, unchanged bucket (head check + decoded copy)', () => snapshot.accounts('openai'));
    await time('snapshot, bucket read and decoded every time (HGETALL)', () => snapshot.buckets.read(b));
    return out;
  });
}

/** Full rebuild of every bucket from PostgreSQL into an empty Redis. */
export async function benchRebuild(accounts: number): Promise<{ accounts: number; seconds: number; longestChunkMs: number }> {
  return withRig(accounts, async ({ snapshot }) => {
    let last = performance.now();
    let longest = 0;
    const t = performance.now();
    await snapshot.builder.rebuildAll(2000, async () => {
      const now = performance.now();
      longest = Math.max(longest, now - last);
      last = now;
    });
    return { accounts, seconds: (performance.now() - t) / 1000, longestChunkMs: longest };
  });
}

/** Change-to-visible: `rate` changes/s for `seconds`, three consumers polling every `pollMs`. */
export async function benchVisibility(accounts: number, rate: number, seconds: number, pollMs: number): Promise<{ changes: number; p50Ms: number; p99Ms: number }> {
  return withRig(accounts, async ({ db, redis, snapshot, consumer }) => {
    await snapshot.builder.rebuildAll(2000, async () => undefined);
    // As after a rebuild: the marker is set and the last rebuild recorded, so none runs during the measurement.
    await snapshot.buckets.claimMarker();
    await db.query(`UPDATE scheduler_snapshot_state SET last_rebuild_at = now()`);
    const consumers = [consumer('c1', pollMs), consumer('c2', pollMs), consumer('c3', pollMs)];
    consumers.forEach((c) => c.start());
    const pending = new Map<number, { version: number; at: number }>();
    const seen: number[] = [];
    let writing = true;
    const key = (snapshot.buckets as RedisSnapshotBuckets).key.bind(snapshot.buckets);
    const watcher = (async () => {
      while (writing || pending.size) {
        const ids = [...pending.keys()];
        for (const p of PLATFORMS) {
          const mine = ids.filter((id) => id % 3 === PLATFORMS.indexOf(p));
          if (!mine.length) continue;
          const vals = await redis.hmget(key({ platform: p, group: '' }), ...mine.map((id) => `a:${id}`)).catch(() => null);
          if (!vals) continue; // the connection dropped on a loaded machine: look again next time
          const now = performance.now();
          mine.forEach((id, i) => {
            const v = Number(/^(\d+)\|/.exec(vals[i] ?? '')?.[1] ?? -1);
            const want = pending.get(id);
            if (want && v >= want.version) {
              seen.push(now - want.at);
              pending.delete(id);
            }
          });
        }
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    const t0 = performance.now();
    let made = 0;
    while (performance.now() - t0 < seconds * 1000) {
      const due = Math.floor(((performance.now() - t0) / 1000) * rate);
      const batch: Promise<void>[] = [];
      // At most 20 writes in flight: a loaded machine falls behind the rate rather than queueing without bound.
      for (; made < due && batch.length < 20; made++) {
        const id = 1 + Math.floor(Math.random() * accounts);
        batch.push(
          db.query<{ v: string }>(`UPDATE accounts SET priority = (priority + 1) % 10 WHERE id = $1 RETURNING sched_version AS v`, [id]).then(({ rows }) => {
            const v = Number(rows[0]!.v);
            if (!pending.has(id) || pending.get(id)!.version < v) pending.set(id, { version: v, at: pending.get(id)?.at ?? performance.now() });
          }),
        );
      }
      await Promise.all(batch);
      await new Promise((r) => setTimeout(r, 2));
    }
    writing = false;
    await watcher;
    await Promise.all(consumers.map((c) => c.stop(Deadline.within(systemClock, 60_000))));
    return { changes: made, p50Ms: pct(seen, 0.5), p99Ms: pct(seen, 0.99) };
  });
}

/**
 * `events` pending account events drained by three concurrent consumers, per design. The
 * baseline is Sub2API's loop: read the shared watermark, `SELECT … WHERE id > watermark ORDER BY
 * id LIMIT 200 FOR UPDATE` in a transaction (the other replicas wait on those row locks, then
 * re-read the same rows), apply, write the watermark, delete.
 */
export async function benchOutbox(events: number): Promise<{ design: string; eventsPerSec: number; applications: number }[]> {
  const results: { design: string; eventsPerSec: number; applications: number }[] = [];
  const seed = async (db: PgDb) => {
    await db.query(`DELETE FROM scheduler_outbox`);
    await db.query(
      `INSERT INTO scheduler_outbox (event_type, payload, dedup_key) SELECT 'account_changed', jsonb_build_object('account_id', 1 + g % 10000, 'left', '[]'::jsonb), 'bench:' || g FROM generate_series(1, $1::int) g`,
      [events],
    );
  };
  await withRig(10_000, async ({ db, snapshot, routing, consumer, metrics }) => {
    await snapshot.builder.rebuildAll(2000, async () => undefined);
    await snapshot.buckets.claimMarker();
    await db.query(`UPDATE scheduler_snapshot_state SET last_rebuild_at = now()`);
    await seed(db);
    const cs = [consumer('c1'), consumer('c2'), consumer('c3')];
    const t = performance.now();
    const drain = async (c: OutboxConsumer) => {
      for (;;) {
        const r = await c.poll();
        if (r.backlog === 0) return;
      }
    };
    await Promise.all(cs.map(drain));
    const applied = (await metrics.group(SchedulerMetrics).applied.get()).values.reduce((s, v) => s + v.value, 0);
    results.push({ design: 'claimed batches of 200 (relay-jobs)', eventsPerSec: events / ((performance.now() - t) / 1000), applications: applied });

    await seed(db);
    await db.query(`UPDATE scheduler_snapshot_state SET watermark = 0`);
    let applications = 0;
    const sub2api = async () => {
      for (;;) {
        const done = await db.tx(async (q) => {
          const wm = Number((await q.query<{ w: string }>(`SELECT watermark AS w FROM scheduler_snapshot_state`)).rows[0]!.w);
          const { rows } = await q.query<{ id: string; payload: { account_id: number } }>(`SELECT id, payload FROM scheduler_outbox WHERE id > $1 ORDER BY id LIMIT 200 FOR UPDATE`, [wm]);
          if (!rows.length) return true;
          const found = await routing.byIds([...new Set(rows.map((r) => r.payload.account_id))]);
          for (const g of byBucket(found).values()) await snapshot.builder.applyRows(g.bucket, g.rows);
          applications += rows.length;
          const max = Math.max(...rows.map((r) => Number(r.id)));
          await q.query(`UPDATE scheduler_snapshot_state SET watermark = GREATEST(watermark, $1)`, [max]);
          await q.query(`DELETE FROM scheduler_outbox WHERE id <= $1`, [max]);
          return false;
        });
        if (done) return;
      }
    };
    const t2 = performance.now();
    await Promise.all([sub2api(), sub2api(), sub2api()]);
    results.push({ design: 'one watermark, FOR UPDATE, no claim (Sub2API, baseline)', eventsPerSec: events / ((performance.now() - t2) / 1000), applications });
  });
  return results;
}

/** Redis memory of the scheduler snapshot for `accounts` accounts (every bucket rebuilt), from MEMORY USAGE of its keys. */
export async function benchSnapshotMemory(accounts: number): Promise<{ accounts: number; bytes: number }> {
  return withRig(accounts, async ({ snapshot, redis }) => {
    await snapshot.builder.rebuildAll(2000, async () => undefined);
    return { accounts, bytes: await keyBytes(redis, `${(snapshot.buckets as unknown as { base: string }).base}:*`) };
  });
}

/** The sum of MEMORY USAGE (all samples) over the keys matching `pattern`. */
export async function keyBytes(redis: Redis, pattern: string): Promise<number> {
  let cursor = '0';
  let total = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    const p = redis.pipeline();
    for (const k of keys) p.memory('USAGE', k, 'SAMPLES', '0');
    for (const [err, n] of (await p.exec()) ?? []) if (!err) total += Number(n ?? 0);
  } while (cursor !== '0');
  return total;
}
