import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { RoutingAccounts, type BucketId } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { RedisSnapshotBuckets } from '../src/areas/scheduler-snapshot/store/snapshot-buckets.js';
import { SchedulerSnapshot } from '../src/areas/scheduler-snapshot/scheduler-snapshot-service.js';
import { SchedulerMetrics } from '../src/areas/scheduler-snapshot/metrics.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { PrivateRedis, REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

/**
 * Issue 53, soak finding 2: the epoch across replicas. A replica whose Redis is unreadable answers
 * from PostgreSQL at the newest epoch while the snapshot the other replicas read lags (its builder
 * stopped: no consumer runs here). The bound (docs/scheduler-snapshot.md): an answer is at or above
 * every epoch any replica answered `snapshot.read_max_age` (100 ms) before the read began.
 * Real PostgreSQL and Redis (a private redis-server, killed, is the unreadable one); the replicas'
 * monotonic clock is one number the test moves, so the bound is checked exactly and nothing waits.
 */
const MAX_AGE = 100;

/** A pause point: `hold()` arms it, the code under test waits in `pass()` until `release()`. */
class Gate {
  private held: Promise<void> | null = null;
  private unblock: () => void = () => undefined;
  private arrive: () => void = () => undefined;
  arrived: Promise<void> = Promise.resolve();
  hold(): void {
    this.held = new Promise((r) => (this.unblock = r));
    this.arrived = new Promise((r) => (this.arrive = r));
  }
  async pass(): Promise<void> {
    const h = this.held;
    this.held = null;
    if (h) this.arrive();
    await h;
  }
  release(): void {
    this.unblock();
  }
}

/** Real Redis buckets whose next head check can be held (a slow Redis); counts the head checks done. */
class GatedBuckets extends RedisSnapshotBuckets {
  readonly gate = new Gate();
  heads = 0;
  override async head(b: BucketId) {
    await this.gate.pass();
    const h = await super.head(b);
    this.heads++;
    return h;
  }
}

/** The real routing store, whose next high-water query can be held before it is sent. */
class GatedRouting extends RoutingAccounts {
  readonly gate = new Gate();
  override async epochsOf(bs: BucketId[]) {
    await this.gate.pass();
    return super.epochsOf(bs);
  }
}
const OPENAI: BucketId = { platform: 'openai', group: '' };
const CLAUDE: BucketId = { platform: 'claude', group: '' };

describe('scheduler snapshot epoch across replicas (real PostgreSQL and Redis)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let db: PgDb;
  const servers: PrivateRedis[] = [];
  let prefix: string;
  let now = 0;
  const clients: Redis[] = [];
  const dbs: PgDb[] = [];
  const replicas: SchedulerSnapshot[] = [];
  let answers: { replica: string; source: string; epoch: number; at: number }[];

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    db = await PgDb.connect({ url: fresh.url, poolSize: 6, connectTimeoutMs: 5000 });
  }, 60_000);
  afterAll(async () => {
    for (const r of servers) await r.stop();
    await db?.close();
    await fresh?.drop();
  });
  beforeEach(async () => {
    prefix = uniqueName('rjepochx');
    answers = [];
    now = 1000;
    await db.query(`DELETE FROM accounts`);
    await db.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at, priority)
       SELECT CASE WHEN g <= 6 THEN 'openai' ELSE 'claude' END, 'e-' || g, 'x', false, now() + interval '30 days', g FROM generate_series(1, 9) g`,
    );
    await db.query(`DELETE FROM scheduler_outbox`);
  });
  afterEach(async () => {
    await Promise.all(replicas.splice(0).map((r) => r.settled()));
    for (const c of clients.splice(0)) c.disconnect();
    for (const d of dbs.splice(0)) await d.close().catch(() => undefined);
    await dropRedisPrefix(prefix);
  });

  const change = async (name: string) => Number((await db.query<{ v: string }>(`UPDATE accounts SET priority = priority + 1 WHERE name = $1 RETURNING sched_version AS v`, [name])).rows[0]!.v);

  /** A replica: its own Redis client (the shared server, or `url`) and, if asked, its own PostgreSQL pool. */
  async function replica(name: string, opts: { url?: string; ownDb?: boolean } = {}) {
    const redis = opts.url ? new Redis(opts.url, { maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null }) : new Redis(REDIS_URL);
    redis.on('error', () => undefined);
    clients.push(redis);
    if (opts.url) await waitFor(() => redis.status === 'ready', { what: `${name}'s Redis connection` });
    const rdb = opts.ownDb ? await PgDb.connect({ url: fresh.url, poolSize: 2, connectTimeoutMs: 5000 }) : db;
    if (opts.ownDb) dbs.push(rdb);
    const buckets = new GatedBuckets(redis, { prefix, env: 'test' });
    const routing = new GatedRouting(rdb);
    const snapshot = new SchedulerSnapshot(buckets, routing, systemClock, new Metrics().group(SchedulerMetrics), silentLogger(), name, MAX_AGE, () => now);
    replicas.push(snapshot);
    const ask = async (b: BucketId = OPENAI) => {
      const at = now;
      const a = await snapshot.accounts(b.platform, b.group);
      if (b === OPENAI) answers.push({ replica: name, source: a.source, epoch: a.epoch, at });
      return a;
    };
    return { snapshot, ask, db: rdb, redis, buckets, routing };
  }

  /** A replica whose Redis is gone (its private server killed): every read of the snapshot fails. */
  async function cutOff(name: string) {
    const server = await PrivateRedis.start();
    servers.push(server);
    const r = await replica(name, { url: server.url });
    await server.stop();
    await waitFor(() => r.redis.status === 'end', { what: `${name}'s Redis connection to end` });
    return r;
  }

  /**
   * The bound, on every answer: per replica never back (in the order given); across replicas at or
   * above every answer whose read began MAX_AGE or more before this one's (reads that return
   * without waiting begin and end at one moment of the test's clock).
   */
  function expectBound(): void {
    const broken: string[] = [];
    for (const [i, a] of answers.entries())
      for (const [j, p] of answers.entries())
        if (p.epoch > a.epoch && ((p.replica === a.replica && j < i) || a.at - p.at >= MAX_AGE))
          broken.push(`${a.replica} answered ${a.epoch} (${a.source}) at ${a.at} ms, below ${p.replica}'s ${p.epoch} (${p.source}) at ${p.at} ms`);
    expect(broken, JSON.stringify(answers)).toEqual([]);
  }

  it('a replica whose Redis is down answers from PostgreSQL; a replica reading the lagging snapshot is at or above it read_max_age later', async () => {
    const b = await replica('b');
    const c = await replica('c');
    await b.snapshot.builder.buildBucket(OPENAI, false);
    const before = await b.ask();
    expect(before.source).toBe('snapshot');
    expect((await c.ask()).epoch).toBe(before.epoch);

    // Replica a lost its Redis (its server is gone: every read fails).
    const a = await cutOff('a');

    // A change to the bucket; no consumer applies it (the builders are down), so the snapshot lags.
    const version = await change('e-2');
    const fromPg = await a.ask();
    expect(fromPg.source).toBe('postgres');
    expect(fromPg.epoch).toBeGreaterThanOrEqual(version);
    expect(fromPg.epoch).toBeGreaterThan(before.epoch);

    // Within read_max_age of b's last check: its copy in memory, no round trip (what the bound allows).
    now += MAX_AGE / 2;
    const queries = b.snapshot.highWater.queries;
    const cached = await b.ask();
    expect(cached).toMatchObject({ source: 'snapshot', epoch: before.epoch });
    expect(b.snapshot.highWater.queries).toBe(queries);

    // read_max_age after a answered: b and c read the high-water again; the snapshot lags it, so
    // b answers from PostgreSQL and writes the rows into the bucket, and c is served them from it.
    now += MAX_AGE / 2;
    const caught = await b.ask();
    expect(caught.epoch).toBeGreaterThanOrEqual(fromPg.epoch);
    expect(caught.source).toBe('postgres');
    const other = await c.ask();
    expect(other.source).toBe('snapshot');
    expect(other.epoch).toBeGreaterThanOrEqual(fromPg.epoch);
    expect(other.accounts.map((x) => x.id)).toEqual(caught.accounts.map((x) => x.id));
    await b.snapshot.settled();
    now += MAX_AGE;
    expect(await b.ask()).toMatchObject({ source: 'snapshot' });
    expect((await a.ask()).source).toBe('postgres');
    now += MAX_AGE;
    await c.ask();
    expectBound();
  });

  it('reads one high-water query per replica per read_max_age, whatever the reads and buckets', async () => {
    const r = await replica('r');
    await r.snapshot.builder.buildBucket(OPENAI, false);
    await r.snapshot.builder.buildBucket(CLAUDE, false);
    const burst = () => Promise.all(Array.from({ length: 40 }, (_, i) => r.ask(i % 2 ? OPENAI : CLAUDE)));
    await burst();
    const first = r.snapshot.highWater.queries;
    expect(first).toBeGreaterThanOrEqual(1);
    expect(first).toBeLessThanOrEqual(2); // the first read of each bucket
    for (const step of [10, 40, 49]) {
      now = 1000 + step;
      await burst();
      for (let i = 0; i < 20; i++) await r.ask(i % 2 ? OPENAI : CLAUDE);
    }
    expect(r.snapshot.highWater.queries).toBe(first);
    now = 1000 + MAX_AGE; // both buckets' high-water in one query
    await burst();
    for (let i = 0; i < 20; i++) await r.ask(i % 2 ? OPENAI : CLAUDE);
    expect(r.snapshot.highWater.queries).toBe(first + 1);
    expect(answers.every((a) => a.source === 'snapshot')).toBe(true);
    expectBound();
  });

  it('a replica that cannot read PostgreSQL keeps serving its snapshot, held to the last high-water it read', async () => {
    const r = await replica('r', { ownDb: true });
    await r.snapshot.builder.buildBucket(OPENAI, false);
    const first = await r.ask();
    expect(first.source).toBe('snapshot');
    await r.db.close(); // this replica's PostgreSQL is gone; Redis is there
    now += MAX_AGE;
    const during = await r.ask();
    expect(during).toMatchObject({ source: 'snapshot', epoch: first.epoch });
    now += MAX_AGE;
    expect((await r.ask()).source).toBe('snapshot');
    expectBound();
  });

  it('a read that joins a check begun longer than read_max_age before it is held to the high-water as of its own start', async () => {
    const b = await replica('b');
    await b.snapshot.builder.buildBucket(OPENAI, false);
    const before = await b.ask();
    expect(before.source).toBe('snapshot');
    const a = await cutOff('a');
    // b's check of the bucket begins and reads the high-water; its head check then hangs (a slow Redis).
    now = 1150;
    b.buckets.gate.hold();
    const slow = b.ask();
    await b.buckets.gate.arrived;
    await b.snapshot.highWater.floor(OPENAI, 'openai/', now);
    // Meanwhile a change, and a answers it from PostgreSQL.
    now = 1160;
    await change('e-2');
    const fromPg = await a.ask();
    expect(fromPg.epoch).toBeGreaterThan(before.epoch);
    // read_max_age after a's answer, a read of b arrives while the slow check still runs, and shares it.
    now = 1300;
    const joined = b.ask();
    b.buckets.gate.release();
    expect((await slow).epoch).toBe(before.epoch); // began before a answered: allowed
    expect((await joined).epoch).toBeGreaterThanOrEqual(fromPg.epoch);
    expectBound();
  });

  it("a writer's high-water seen before its write lands: the bucket is read once more, not answered from PostgreSQL", async () => {
    const r = await replica('r');
    await r.snapshot.builder.buildBucket(OPENAI, false);
    expect((await r.ask()).source).toBe('snapshot');
    const version = await change('e-2');
    // r's next check: its head check runs (the bucket unchanged) while its high-water query waits.
    now += MAX_AGE;
    r.routing.gate.hold();
    const heads = r.buckets.heads;
    const read = r.ask();
    await r.routing.gate.arrived;
    await waitFor(() => r.buckets.heads > heads, { what: "r's head check" });
    // A writer (a consumer batch) raises the high-water, then writes: r reads the high-water between the two.
    const rows = await new RoutingAccounts(db).byIds([Number((await db.query<{ id: string }>(`SELECT id FROM accounts WHERE name = 'e-2'`)).rows[0]!.id)]);
    await new RoutingAccounts(db).raiseEpoch(OPENAI, version);
    r.buckets.gate.hold(); // r's second look waits until the write landed
    r.routing.gate.release();
    await Promise.race([r.buckets.gate.arrived, read]);
    await r.buckets.apply(OPENAI, rows, Date.now());
    r.buckets.gate.release();
    expect(await read).toMatchObject({ source: 'snapshot', epoch: version });
    expectBound();
  });
});
