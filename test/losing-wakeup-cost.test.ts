import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { SchedulerOutbox } from '../src/areas/scheduler-snapshot/store/scheduler-outbox.js';
import { RoutingAccounts } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { MemorySnapshotBuckets } from '../src/areas/scheduler-snapshot/store/memory-snapshot-buckets.js';
import { SchedulerSnapshot } from '../src/areas/scheduler-snapshot/scheduler-snapshot-service.js';
import { OutboxConsumer } from '../src/areas/scheduler-snapshot/outbox-consumer.js';
import { SchedulerMetrics } from '../src/areas/scheduler-snapshot/metrics.js';
import { ChangeEvents } from '../src/areas/change-stream/store/change-events.js';
import { ChangePublisher } from '../src/areas/change-stream/change-publisher.js';
import { ChangeStreamMetrics } from '../src/areas/change-stream/metrics.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { freshDatabase } from './helpers/services.js';
import { testConsumerOptions } from './helpers/outbox-consumer-options.js';

/**
 * Every replica hears every outbox notification (docs/scaling.md): the replicas that lose the race
 * for it must cost PostgreSQL as little as possible, since at N replicas each event wakes N - 1 of
 * them. A consumer's woken poll that claims nothing is its one claim statement; a publisher's tick
 * that finds the lock held reads no backlog. Their rounds still read lag and backlog.
 */
describe('a replica that loses a wake-up costs one statement (real PostgreSQL)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let admin: PgDb;
  let loser: PgDb;
  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    admin = await PgDb.connect({ url: fresh.url, poolSize: 2, connectTimeoutMs: 5000 });
    await migrate(admin);
    loser = await PgDb.connect({ url: fresh.url, poolSize: 2, connectTimeoutMs: 5000 });
  });
  afterAll(async () => {
    await loser.close();
    await admin.close();
    await fresh.drop();
  });
  const statements = async (work: () => Promise<unknown>): Promise<number> => {
    const before = loser.stats.queries;
    await work();
    return loser.stats.queries - before;
  };

  it("the outbox consumer: a woken poll whose events another replica claimed is one claim; its round's poll also deletes and reads the lag", async () => {
    await admin.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at) SELECT 'openai', 'l-' || g, 'x', false, now() + interval '1 day' FROM generate_series(1, 3) g`,
    );
    const held = await new SchedulerOutbox(admin).claim('the-winner', 60_000, 1000);
    expect(held.length).toBeGreaterThan(0);
    const metrics = new Metrics({ defaultMetrics: false });
    const routing = new RoutingAccounts(loser);
    const snapshot = new SchedulerSnapshot(new MemorySnapshotBuckets(), routing, systemClock, metrics.group(SchedulerMetrics), silentLogger(), 'loser');
    const consumer = new OutboxConsumer(new SchedulerOutbox(loser), routing, snapshot, systemClock, metrics.group(SchedulerMetrics), silentLogger(), 'loser', testConsumerOptions());
    await consumer.poll(true); // a new (empty) store: its first look claims the marker and asks for a rebuild
    let woken!: Awaited<ReturnType<OutboxConsumer['poll']>>;
    expect(await statements(async () => (woken = await consumer.poll(true)))).toBe(1);
    expect(woken.applied).toBe(0);
    let round!: Awaited<ReturnType<OutboxConsumer['poll']>>;
    expect(await statements(async () => (round = await consumer.poll(false)))).toBeGreaterThanOrEqual(3);
    expect(round.backlog, 'the round sees the events another replica holds').toBe(held.length);
    await consumer.rebuildSettled();
  });

  it('the change publisher: a tick that finds the lock held is its publish transaction alone; a round also reads the backlog', async () => {
    const metrics = new Metrics({ defaultMetrics: false }).group(ChangeStreamMetrics);
    const publisher = new ChangePublisher(new ChangeEvents(loser), async () => undefined, systemClock, metrics, silentLogger(), { pollIntervalMs: 1000, batchSize: 25, retentionMs: 3_600_000 });
    await publisher.publishPending(); // its first call also prunes: out of the way
    const holder = new pg.Client({ connectionString: fresh.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT seq FROM change_stream_state FOR UPDATE');
      let tick!: Awaited<ReturnType<ChangePublisher['publishPending']>>;
      const tickCost = await statements(async () => (tick = await publisher.publishPending(undefined, true)));
      expect(tick.busy).toBe(true);
      const roundCost = await statements(() => publisher.publishPending());
      expect(roundCost, 'the round reads the backlog; the losing tick did not').toBe(tickCost + 1);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });
});
