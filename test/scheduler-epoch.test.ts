import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { RoutingAccounts, type BucketId, type RoutingRow } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { SchedulerOutbox } from '../src/areas/scheduler-snapshot/store/scheduler-outbox.js';
import { RedisSnapshotBuckets } from '../src/areas/scheduler-snapshot/store/snapshot-buckets.js';
import { SchedulerSnapshot, type SchedulerAccounts } from '../src/areas/scheduler-snapshot/scheduler-snapshot-service.js';
import { OutboxConsumer } from '../src/areas/scheduler-snapshot/outbox-consumer.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { SchedulerMetrics } from '../src/areas/scheduler-snapshot/metrics.js';
import { testConsumerOptions } from './helpers/outbox-consumer-options.js';

/**
 * Every path that could move a bucket's epoch back, each with its interleaving forced (real
 * PostgreSQL and Redis; the only test code between them are pauses at named points):
 * - a PostgreSQL answer after the bucket's newest account left it;
 * - a replica started after Redis came back empty, the newest account gone: only the high-water holds the epoch;
 * - a rebuild after Redis lost its data, racing a consumer batch and a change committed meanwhile;
 * - two replicas rebuilding at once, Redis losing its data between them;
 * - a replica restarted (no memory) reading a bucket that lags what another answered.
 * Asserted on every answer: per replica and in the order the answers were given (all replicas
 * reach Redis here), the epoch never decreases.
 */

/** A pause point: `hold()` arms it, the code under test waits in `pass()` until `release()`. */
class Gate {
  private held: Promise<void> | null = null;
  private open: (() => void) | null = null;
  private arrivedAt: (() => void) | null = null;
  arrived: Promise<void> = Promise.resolve();
  hold(): void {
    this.held = new Promise((r) => (this.open = r));
    this.arrived = new Promise((r) => (this.arrivedAt = r));
  }
  async pass(): Promise<void> {
    const h = this.held;
    if (!h) return;
    this.held = null;
    this.arrivedAt?.();
    await h;
  }
  release(): void {
    this.open?.();
  }
}

/** The real store, with a pause after the N-th bucket read and after batch reads. */
class PausingRouting extends RoutingAccounts {
  bucketCalls = 0;
  pauseBucketCall = 0;
  readonly afterBucket = new Gate();
  readonly afterByIds = new Gate();
  override async bucket(b: BucketId, signal?: AbortSignal): Promise<RoutingRow[]> {
    const rows = await super.bucket(b, signal);
    if (++this.bucketCalls === this.pauseBucketCall) await this.afterBucket.pass();
    return rows;
  }
  override async byIds(ids: number[]): Promise<RoutingRow[]> {
    const rows = await super.byIds(ids);
    await this.afterByIds.pass();
    return rows;
  }
}

/** Real Redis buckets, with a pause before a bucket is opened. */
class PausingBuckets extends RedisSnapshotBuckets {
  readonly beforeOpen = new Gate();
  override async open(...args: Parameters<RedisSnapshotBuckets['open']>): Promise<string> {
    await this.beforeOpen.pass();
    return super.open(...args);
  }
}

const OPENAI: BucketId = { platform: 'openai', group: '' };

describe('scheduler snapshot epoch: never back, per bucket, across both sources', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let db: PgDb;
  const redises: Redis[] = [];
  /** Waits for the running test's replicas' background repairs and rebuilds (after it). */
  const background: Array<() => Promise<unknown>> = [];
  let prefix: string;
  let answers: { replica: string; source: string; epoch: number; ids: number[] }[];

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    db = await PgDb.connect({ url: fresh.url, poolSize: 10, connectTimeoutMs: 5000 });
    await migrate(db);
  });
  afterAll(async () => {
    await db.close();
    await fresh.drop();
  });
  beforeEach(async () => {
    prefix = uniqueName('rjepoch');
    answers = [];
    await db.query(`DELETE FROM accounts`);
    // ids 1-6 openai, 7-9 claude; each insert takes a version.
    await db.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at, priority)
       SELECT CASE WHEN g <= 6 THEN 'openai' ELSE 'claude' END, 'e-' || g, 'x', false, now() + interval '30 days', g FROM generate_series(1, 9) g`,
    );
    await db.query(`DELETE FROM scheduler_outbox`);
    await db.query(`UPDATE scheduler_snapshot_state SET last_rebuild_at = now()`); // no periodic rebuild in the way
  });
  afterEach(async () => {
    // A PostgreSQL answer starts a bucket repair in the background, a consumer's poll may start a
    // rebuild: the prefix is dropped once the test's are done, or one writes its buckets again
    // into the shared Redis afterwards.
    // The test's clients are closed before the drop: work that starts after the wait (a repair a
    // late answer asks for) fails on a closed client instead of writing into the dropped prefix.
    const waits = background.splice(0);
    await Promise.all(waits.map((wait) => wait()));
    for (const r of redises.splice(0)) r.disconnect();
    await Promise.all(waits.map((wait) => wait()));
    await dropRedisPrefix(prefix);
  });

  const idOf = async (name: string) => Number((await db.query<{ id: string }>(`SELECT id FROM accounts WHERE name = $1`, [name])).rows[0]!.id);
  const change = async (name: string) => Number((await db.query<{ v: string }>(`UPDATE accounts SET priority = priority + 1 WHERE name = $1 RETURNING sched_version AS v`, [name])).rows[0]!.v);

  function replica(name: string) {
    const redis = new Redis(REDIS_URL);
    redises.push(redis);
    const routing = new PausingRouting(db);
    const buckets = new PausingBuckets(redis, { prefix, env: 'test' });
    const metrics = new Metrics();
    const snapshot = new SchedulerSnapshot(buckets, routing, systemClock, metrics.group(SchedulerMetrics), silentLogger(), name);
    const consumer = new OutboxConsumer(new SchedulerOutbox(db), routing, snapshot, systemClock, metrics.group(SchedulerMetrics), silentLogger(), name, testConsumerOptions({ rebuildChunk: 4 }));
    background.push(() => Promise.all([snapshot.settled(), consumer.rebuildSettled()]));
    const ask = async (): Promise<SchedulerAccounts & { ids: number[] }> => {
      const a = await snapshot.accounts(OPENAI.platform, OPENAI.group);
      const ids = a.accounts.map((x) => x.id);
      answers.push({ replica: name, source: a.source, epoch: a.epoch, ids });
      return { ...a, ids };
    };
    return { name, routing, buckets, snapshot, consumer, ask };
  }

  /** Every answer, in the order given, is at an epoch at least that of every answer before it. */
  function expectNeverBack(): void {
    let high = 0;
    const back: string[] = [];
    for (const [i, a] of answers.entries()) {
      if (a.epoch < high) back.push(`answer ${i} (${a.replica}, ${a.source}) at epoch ${a.epoch} after ${high}`);
      high = Math.max(high, a.epoch);
    }
    expect(back, JSON.stringify(answers)).toEqual([]);
  }

  const truth = async () =>
    (
      await db.query(
        `SELECT id FROM accounts WHERE platform = 'openai' AND sched_group IS NULL AND schedulable AND scheduler_routing_status(status, status_before_refresh) = 'active' ORDER BY priority, id`,
      )
    ).rows.map((r) => Number((r as { id: string }).id));

  /** Replica r1 serving the bucket from the snapshot, at the version of e-6, its newest account. */
  async function servedAtNewest() {
    const r1 = replica('r1');
    await r1.snapshot.builder.buildBucket(OPENAI, false);
    await change('e-6');
    await r1.consumer.poll();
    const served = await r1.ask();
    expect(served.source).toBe('snapshot');
    return { r1, served };
  }

  it('a PostgreSQL answer after the newest account left the bucket (moved, disabled, deleted) is not older than the snapshot answer before it', async () => {
    const { r1, served } = await servedAtNewest();
    expect(served.epoch).toBe(Number((await db.query<{ v: string }>(`SELECT max(sched_version) AS v FROM accounts WHERE platform = 'openai'`)).rows[0]!.v));

    // The newest account leaves the list, each way, and the snapshot is lost before the consumer sees it.
    await db.query(`UPDATE accounts SET platform = 'claude' WHERE name = 'e-6'`);
    await dropRedisPrefix(prefix);
    const moved = await r1.ask();
    expect(moved.source).toBe('postgres');
    expect(moved.ids).not.toContain(await idOf('e-6'));
    await r1.snapshot.settled();
    await db.query(`UPDATE accounts SET status = 'disabled' WHERE name = 'e-5'`);
    await db.query(`DELETE FROM accounts WHERE name = 'e-4'`);
    await dropRedisPrefix(prefix);
    // A replica restarted meanwhile (nothing in memory) answers too.
    const r2 = replica('r2');
    expect((await r2.ask()).source).toBe('postgres');
    expect((await r1.ask()).source).toBe('postgres');
    await Promise.all([r1.snapshot.settled(), r2.snapshot.settled()]);
    await r1.consumer.poll();
    await r1.consumer.rebuildSettled();
    const after = await r2.ask();
    expect(after.source).toBe('snapshot');
    expect(after.ids).toEqual(await truth());
    await r1.ask();
    expectNeverBack();
  });

  it('a replica started after Redis came back empty answers from PostgreSQL at the high-water, not at its rows, when the newest account left the bucket', async () => {
    const { served } = await servedAtNewest();

    // e-6 leaves the bucket (its versions go with it), and Redis comes back empty.
    await db.query(`UPDATE accounts SET platform = 'claude' WHERE name = 'e-6'`);
    await dropRedisPrefix(prefix);
    // A replica that started now knows nothing this bucket answered: only the high-water does.
    const r2 = replica('r2');
    const fresh = await r2.ask();
    expect(fresh.source).toBe('postgres');
    const rowsTop = Number((await db.query<{ v: string }>(`SELECT max(sched_version) AS v FROM accounts WHERE platform = 'openai'`)).rows[0]!.v);
    expect(rowsTop).toBeLessThan(served.epoch); // the rows alone would give an older epoch
    expect(fresh.epoch).toBeGreaterThanOrEqual(served.epoch);
    await r2.snapshot.settled();
    expectNeverBack();
  });

  it('a rebuild after Redis lost its data, racing a consumer batch and a change committed while it holds its rows', async () => {
    const r1 = replica('r1');
    const r2 = replica('r2');
    await r1.snapshot.builder.buildBucket(OPENAI, false);
    await r1.ask();
    await r2.ask();

    await dropRedisPrefix(prefix); // Redis restarted empty
    await change('e-2');
    // r1's consumer has read the batch (e-2) and not yet written it.
    r1.routing.afterByIds.hold();
    const batch = r1.consumer.poll();
    await r1.routing.afterByIds.arrived;
    // r2 misses: answers from PostgreSQL and repairs; the repair has read its rows and waits.
    r2.routing.pauseBucketCall = r2.routing.bucketCalls + 2; // the answer's own read, then the repair's
    r2.routing.afterBucket.hold();
    expect((await r2.ask()).source).toBe('postgres');
    await r2.routing.afterBucket.arrived;
    // Meanwhile a change to the bucket commits, and many elsewhere; r1 answers from PostgreSQL.
    await change('e-3');
    for (let i = 0; i < 5; i++) await change('e-8');
    expect((await r1.ask()).source).toBe('postgres');
    // The repair finishes with the rows it read before that change; both replicas read.
    r2.routing.afterBucket.release();
    await r2.snapshot.settled();
    await r1.snapshot.settled();
    await r1.ask();
    await r2.ask();
    // The consumer batch lands; its poll also runs the rebuild the lost marker asked for.
    r1.routing.afterByIds.release();
    await batch;
    await r1.consumer.poll();
    await r1.consumer.rebuildSettled();
    const last = await r2.ask();
    expect(last.source).toBe('snapshot');
    expect(last.ids).toEqual(await truth());
    await r1.ask();
    expectNeverBack();
  });

  it('two replicas rebuilding at once, Redis losing its data between them', async () => {
    const rA = replica('rA');
    const rB = replica('rB');
    await rB.snapshot.builder.buildBucket(OPENAI, false);
    await rA.ask();
    // A's full rebuild gets as far as opening the buckets and waits there.
    rA.buckets.beforeOpen.hold();
    const rebuildA = rA.snapshot.builder.rebuildAll(4, async () => undefined);
    await rA.buckets.beforeOpen.arrived;
    // Changes: one to the bucket, then many elsewhere.
    await change('e-1');
    for (let i = 0; i < 5; i++) await change('e-9');
    // B rebuilds in full, completes, and both replicas are served its bucket.
    await dropRedisPrefix(prefix);
    await rB.snapshot.builder.rebuildAll(4, async () => undefined);
    // An account leaves the bucket; B's consumer writes its tombstone (the bucket's newest version).
    await db.query(`UPDATE accounts SET platform = 'claude' WHERE name = 'e-5'`);
    await rB.buckets.claimMarker(); // (the store is not new to this consumer: no rebuild of its own)
    expect((await rB.consumer.poll()).applied).toBeGreaterThanOrEqual(1);
    expect((await rB.ask()).source).toBe('snapshot');
    expect((await rA.ask()).source).toBe('snapshot');
    // Redis loses its data again; A goes on and completes a fresh bucket.
    await dropRedisPrefix(prefix);
    rA.buckets.beforeOpen.release();
    await rebuildA;
    const a = await rA.ask();
    const b = await rB.ask();
    expect(a.ids).toEqual(await truth());
    expect(b.ids).toEqual(await truth());
    expectNeverBack();
  });

  it('a replica restarted while the bucket lags a PostgreSQL answer another gave does not serve the lagging bucket below it', async () => {
    const r1 = replica('r1');
    await r1.snapshot.builder.buildBucket(OPENAI, false);
    await r1.ask();
    // A change the consumer has read but not written; r1 cannot reach the bucket (deleted) and answers from PostgreSQL.
    await change('e-3');
    r1.routing.afterByIds.hold();
    const batch = r1.consumer.poll();
    await r1.routing.afterByIds.arrived;
    const key = r1.buckets.key(OPENAI);
    const redis = new Redis(REDIS_URL);
    redises.push(redis);
    const saved = await redis.dumpBuffer(key);
    await redis.del(key);
    r1.routing.pauseBucketCall = r1.routing.bucketCalls + 2;
    r1.routing.afterBucket.hold(); // keep the repair from rebuilding the bucket
    expect((await r1.ask()).source).toBe('postgres');
    await r1.routing.afterBucket.arrived;
    // The old bucket comes back (a failover to a replica that had it): complete, but behind.
    await redis.restore(key, 0, saved!, 'REPLACE');
    const r2 = replica('r2'); // a replica that started now
    await r2.ask();
    await r1.ask();
    r1.routing.afterBucket.release();
    r1.routing.afterByIds.release();
    await batch;
    await Promise.all([r1.snapshot.settled(), r2.snapshot.settled()]);
    const last = await r2.ask();
    expect(last.ids).toEqual(await truth());
    expectNeverBack();
  });
});
