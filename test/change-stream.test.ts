import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { SecretBox } from '../src/store/secret-box.js';
import { Billing } from '../src/areas/billing/store/billing.js';
import { PlatformQuota } from '../src/areas/usage/platform-quota.js';
import { QuotaUsage } from '../src/areas/usage/store/quota-usage.js';
import { MemoryQuotaCounters } from '../src/coordination/quota-counters.js';
import { DeadLetters } from '../src/store/dead-letters.js';
import { ChangeEvents, type ChangeEvent } from '../src/areas/change-stream/store/change-events.js';
import { RedisChangeStream } from '../src/areas/change-stream/store/redis-change-stream.js';
import { ChangePublisher } from '../src/areas/change-stream/change-publisher.js';
import { ChangeStreamMetrics } from '../src/areas/change-stream/metrics.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const creds = { access_token: 'at-secret', refresh_token: 'rt-secret' };

/** The stream's entries as objects, in stream order. */
async function readStream(redis: Redis, key: string): Promise<Array<Record<string, string>>> {
  const entries = await redis.xrange(key, '-', '+');
  return entries.map(([, kv]) => Object.fromEntries(Array.from({ length: kv.length / 2 }, (_, i) => [kv[2 * i]!, kv[2 * i + 1]!])));
}

describe('change stream: recorded with the change, published at least once in one order (real PostgreSQL and Redis)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let db: PgDb;
  let db2: PgDb;
  let redis: Redis;
  let events: ChangeEvents;
  let accounts: Accounts;
  let billing: Billing;
  const prefix = uniqueName('cs');

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
    db2 = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
    await migrate(db);
    redis = new Redis(REDIS_URL);
    events = new ChangeEvents(db);
    accounts = new Accounts(db, SecretBox.fromBase64(TEST_MASTER_KEY));
    billing = new Billing(db);
  });
  afterAll(async () => {
    await dropRedisPrefix(prefix);
    redis.disconnect();
    await db2.close();
    await db.close();
    await fresh.drop();
  });

  /** Unpublished events, oldest first (then marked published, so each test sees only its own). */
  const take = async (): Promise<ChangeEvent[]> => {
    const got: ChangeEvent[] = [];
    while ((await events.publish(1000, async (b) => void got.push(...b))).published > 0);
    return got;
  };

  it('records what a gateway caches, in the writing transaction, and nothing else', async () => {
    await take();
    const a = await accounts.create({ platform: 'openai', name: 'cs-a', credentials: creds, tokenExpiresAt: new Date(Date.now() + 3_600_000) });
    await accounts.update(a.id, { status: 'disabled' });
    await db.query(`UPDATE accounts SET last_refresh_attempt_at = clock_timestamp(), refresh_failures = refresh_failures + 1 WHERE id = $1`, [a.id]);
    await expect(
      db.tx(async (q) => {
        await q.query(`UPDATE accounts SET schedulable = false WHERE id = $1`, [a.id]);
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    const { rows: px } = await db.query<{ id: string }>(`INSERT INTO proxies (name, url_sealed, url_display) VALUES ('p', 'sealed', 'http://p') RETURNING id`);
    await db.query(`UPDATE proxies SET status = 'expired', expired_at = clock_timestamp() WHERE id = $1`, [px[0]!.id]);

    const got = await take();
    expect(got.map((e) => [e.type, e.id])).toEqual([
      ['account.created', String(a.id)],
      ['account.updated', String(a.id)],
      ['proxy.created', px[0]!.id],
      ['proxy.updated', px[0]!.id],
    ]);
    const disabled = got[1]!;
    expect(disabled).toMatchObject({ entity: 'account', changed: ['status'], fields: { status: 'disabled', schedulable: true, platform: 'openai' } });
    expect(JSON.stringify(got)).not.toMatch(/secret|sealed/);
    expect(got[3]).toMatchObject({ changed: ['status'], fields: { status: 'expired' } });
    expect(new Set(got.map((e) => e.event_id)).size).toBe(4);
  });

  it('subscription expiry, order paid and expired, and a quota reset each record one event', async () => {
    await take();
    const user = (await billing.createUser({ email: 'cs@example.com' }))!;
    const plan = await billing.createPlan({ name: 'cs', price: 100, durationDays: 30 });
    const sub = await billing.createSubscription({ userId: Number(user.id), planId: Number(plan!.id), startsAt: new Date(Date.now() - 60_000), expiresAt: new Date(Date.now() - 1000) });
    expect(await billing.expireSubscriptions()).toBeGreaterThanOrEqual(1);
    expect(await billing.expireSubscriptions()).toBe(0);
    const order = await billing.createOrder({
      userId: Number(user.id),
      amount: 500,
      currency: 'CNY',
      provider: 'fake',
      providerOrderId: null,
      purpose: 'balance',
      planId: null,
      expiresAt: new Date(Date.now() + 60_000),
    });
    await billing.markPaid(order.id, 'webhook', 500);
    await billing.markPaid(order.id, 'webhook', 500); // a second report changes nothing, records nothing
    const order2 = await billing.createOrder({
      userId: Number(user.id),
      amount: 700,
      currency: 'CNY',
      provider: 'fake',
      providerOrderId: null,
      purpose: 'balance',
      planId: null,
      expiresAt: new Date(Date.now() - 1000),
    });
    await db.query(`UPDATE payment_orders SET last_checked_at = clock_timestamp(), check_failures = 1 WHERE id = $1`, [order2.id]); // a check stamp: nothing
    await billing.expireOrder(order2.id, {});

    const quota = new PlatformQuota(new MemoryQuotaCounters(), new QuotaUsage(db), 100, new Metrics({ defaultMetrics: false }), silentLogger(), new DeadLetters(db));
    await quota.increment('u-cs', 'openai', 5);
    await quota.flushAll();
    await quota.increment('u-cs', 'openai', 5);
    await quota.flushAll(); // counting up: no event
    await quota.reset('u-cs', 'openai');
    await quota.flushAll();

    const got = await take();
    expect(got.map((e) => e.type)).toEqual([
      'subscription.created',
      'subscription.expired',
      'payment_order.created',
      'payment_order.paid',
      'payment_order.created',
      'payment_order.expired',
      'quota.reset',
    ]);
    expect(got[1]).toMatchObject({ entity: 'subscription', id: String(sub.id), changed: ['status'], fields: { status: 'expired', user_id: Number(user.id) } });
    expect(got[3]).toMatchObject({ entity: 'payment_order', id: String(order.id), fields: { status: 'paid', amount: 500 } });
    expect(got[6]).toMatchObject({ entity: 'quota', id: 'u-cs:openai', fields: { user_id: 'u-cs', platform: 'openai', used: 0, epoch: 1 } });
  });

  it('two publishers racing put every event on the stream exactly once, in seq order; the log pages by seq', async () => {
    await take();
    const key = `${prefix}:race`;
    const metrics = new Metrics({ defaultMetrics: false }).group(ChangeStreamMetrics);
    const pubs = [db, db2].map((d) => {
      const stream = new RedisChangeStream(redis, { prefix, env: 'race' }, 100_000);
      expect(stream.key).toBe(`${prefix}:race:changes`);
      return new ChangePublisher(new ChangeEvents(d), (b) => stream.add(b), systemClock, metrics, silentLogger(), { pollIntervalMs: 50, batchSize: 25, retentionMs: 3_600_000 });
    });
    const writes = (async () => {
      for (let i = 0; i < 10; i++) await db.query(`INSERT INTO proxies (name, url_sealed, url_display) SELECT 'race-' || g, 'sealed', 'http://r' FROM generate_series(1, 30) AS g`);
    })();
    const publishing = async (p: ChangePublisher) => {
      for (let i = 0; i < 400; i++) {
        await p.publishPending();
        if ((await events.backlog()).count === 0 && (await Promise.race([writes.then(() => true), Promise.resolve(false)]))) break;
      }
    };
    await Promise.all([writes, publishing(pubs[0]!), publishing(pubs[1]!)]);
    await pubs[0]!.publishPending();
    const entries = await readStream(redis, `${key}:changes`);
    expect(entries.length).toBe(300);
    expect(new Set(entries.map((e) => e.event_id)).size).toBe(300);
    const log = await events.after(0, 1000);
    const raced = log.events.filter((e) => e.type === 'proxy.created' && String(e.fields.name).startsWith('race-'));
    expect(raced.map((e) => e.event_id)).toEqual(entries.map((e) => e.event_id)); // the stream's order is the log's
    const seqs = log.events.map((e) => e.seq);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => seqs[0]! + i)); // no gaps
    const page = await events.after(seqs[9]!, 5);
    expect(page.events.map((e) => e.seq)).toEqual(seqs.slice(10, 15));
    expect(JSON.parse(entries[0]!.fields!)).toMatchObject({ status: 'active' });
  });

  it('a crash between XADD and the published mark sends the batch again with the same event ids', async () => {
    await take();
    const stream = new RedisChangeStream(redis, { prefix, env: 'crash' }, 1000);
    await db.query(`INSERT INTO proxies (name, url_sealed, url_display) SELECT 'crash-' || g, 'sealed', 'http://c' FROM generate_series(1, 3) AS g`);
    await expect(
      events.publish(100, async (b) => {
        await stream.add(b);
        throw new Error('killed after XADD');
      }),
    ).rejects.toThrow('killed after XADD');
    expect((await events.backlog()).count).toBe(3);
    expect((await events.publish(100, (b) => stream.add(b))).published).toBe(3);
    const entries = await readStream(redis, stream.key);
    expect(entries.map((e) => e.event_id)).toEqual([...entries.slice(0, 3), ...entries.slice(0, 3)].map((e) => e.event_id));
    expect(new Set(entries.map((e) => e.event_id)).size).toBe(3);
  });

  it('MAXLEN ~ caps the stream; pruning deletes only published events past retention', async () => {
    await take();
    const stream = new RedisChangeStream(redis, { prefix, env: 'cap' }, 10);
    await db.query(`INSERT INTO proxies (name, url_sealed, url_display) SELECT 'cap-' || g, 'sealed', 'http://c' FROM generate_series(1, 500) AS g`);
    while ((await events.publish(50, (b) => stream.add(b))).published > 0);
    expect(await redis.xlen(stream.key)).toBeLessThan(250);
    await db.query(`INSERT INTO proxies (name, url_sealed, url_display) VALUES ('unpublished', 'sealed', 'http://u')`);
    await db.query(`UPDATE change_events SET published_at = published_at - interval '2 days' WHERE seq IS NOT NULL`);
    expect(await events.prune(86_400_000, 1000, 20)).toBeGreaterThan(500);
    const left = await db.query<{ n: string; unpublished: string }>(`SELECT count(*) AS n, count(*) FILTER (WHERE seq IS NULL) AS unpublished FROM change_events`);
    expect(left.rows[0]).toEqual({ n: '1', unpublished: '1' });
    const after = await events.after(0, 10);
    expect(after.events).toEqual([]);
    expect(after.last).toBeGreaterThan(500);
  });
});
