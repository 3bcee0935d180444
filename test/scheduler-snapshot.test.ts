import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Redis } from 'ioredis';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { RedisSnapshotBuckets } from '../src/areas/scheduler-snapshot/store/snapshot-buckets.js';
import { SchedulerOutbox } from '../src/areas/scheduler-snapshot/store/scheduler-outbox.js';
import { RoutingAccounts } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { OutboxConsumer } from '../src/areas/scheduler-snapshot/outbox-consumer.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { testConsumerOptions } from './helpers/outbox-consumer-options.js';
import { SchedulerMetrics } from '../src/areas/scheduler-snapshot/metrics.js';

const TOKEN = 'test-admin-token-snapshot-0123';
const auth = { authorization: `Bearer ${TOKEN}` };
describe('scheduler snapshot: consumer, read API, repair (cluster runtime, real PostgreSQL and Redis)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let rt: Runtime;
  let http: FastifyInstance;
  let redis: Redis;
  const prefix = uniqueName('rjsched');
  const get = (query: string) => http.inject({ url: `/api/v1/scheduler/accounts${query}`, headers: auth });
  const ids = (body: { accounts: { id: number }[] }) => body.accounts.map((a) => a.id);
  /** What PostgreSQL says a bucket is, in routing order. */
  const truth = async (platform: string, group = '') =>
    (
      await rt.db.query(
        `SELECT id FROM accounts WHERE platform = $1 AND COALESCE(sched_group, '') = $2 AND schedulable AND scheduler_routing_status(status, status_before_refresh) = 'active'
         AND (temp_unschedulable_until IS NULL OR temp_unschedulable_until <= now()) ORDER BY priority, id`,
        [platform, group],
      )
    ).rows.map((r) => Number(r.id));
  const consumer = () => rt.services.snapshotConsumer;
  const settle = async () => {
    await consumer().poll();
    await consumer().rebuildSettled();
    await rt.services.schedulerSnapshot.settled();
  };

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    const config = loadConfig({
      env: {
        DATABASE_URL: fresh.url,
        REDIS_URL,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_ADMIN_TOKEN: TOKEN,
        RELAY_JOBS_INSTANCE_ID: 'snap-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '5',
        // Every read checks the bucket's head: these tests are about what one read sees right after a write (the read cache's own test: snapshot-read-cache.test.ts).
        RELAY_JOBS__SNAPSHOT__READ_MAX_AGE: '0',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    redis = new Redis(REDIS_URL);
    const { accounts } = rt.services;
    for (let i = 0; i < 30; i++) {
      await accounts.create({ platform: i % 3 === 0 ? 'claude' : 'openai', name: `acc-${i}`, credentials: { access_token: `secret-${i}` }, tokenExpiresAt: new Date(Date.now() + 3_600_000) });
    }
    await rt.db.query(`UPDATE accounts SET priority = 100 - id WHERE id % 5 = 0`);
    await rt.db.query(`UPDATE accounts SET sched_group = 'vip' WHERE id IN (2, 4)`);
  });
  afterAll(async () => {
    redis.disconnect();
    await rt.shutdown();
    await dropRedisPrefix(prefix);
    await fresh.drop();
  });

  it('a first poll finds an empty store, rebuilds once, and serves every bucket from the snapshot in routing order', async () => {
    await settle();
    expect(await rt.db.query(`SELECT last_rebuild_reason FROM scheduler_snapshot_state`)).toMatchObject({ rows: [{ last_rebuild_reason: 'redis_lost' }] });
    for (const [platform, group] of [
      ['openai', ''],
      ['claude', ''],
      ['openai', 'vip'],
    ] as const) {
      const res = await get(`?platform=${platform}${group ? `&group=${group}` : ''}`);
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(body).toMatchObject({ platform, group, source: 'snapshot' });
      expect(ids(body)).toEqual(await truth(platform, group));
      expect(body.epoch).toBeGreaterThan(0);
      expect(body.age_seconds).toBeGreaterThanOrEqual(0);
      expect(JSON.stringify(body)).not.toMatch(/secret-/);
    }
    // The library call answers the same.
    expect(ids(await rt.services.schedulerSnapshot.accounts('openai'))).toEqual(await truth('openai'));
  });

  it('changes reach the snapshot through the outbox; the epoch only rises; the watermark moves and consumed rows go', async () => {
    const before = (await get('?platform=openai')).json();
    const { accounts } = rt.services;
    await accounts.update(7, { schedulable: false });
    await accounts.update(8, { status: 'disabled' });
    await accounts.coolDown(10, Date.now() + 600_000, 'oauth_401');
    await rt.db.query(`UPDATE accounts SET platform = 'claude' WHERE id = 11`);
    const maxId = Number((await rt.db.query(`SELECT max(id) AS m FROM scheduler_outbox`)).rows[0]!.m);
    const r = await consumer().poll();
    expect(r.applied).toBeGreaterThanOrEqual(4);
    const after = (await get('?platform=openai')).json();
    expect(after.source).toBe('snapshot');
    expect(after.epoch).toBeGreaterThan(before.epoch);
    expect(ids(after)).toEqual(await truth('openai'));
    expect(ids(after)).not.toContain(11);
    expect(ids((await get('?platform=claude')).json())).toEqual(await truth('claude'));
    expect(ids((await get('?platform=claude')).json())).toContain(11);
    const st = await rt.services.schedulerOutbox.state();
    expect(st.watermark).toBeGreaterThanOrEqual(maxId);
    expect(Number((await rt.db.query(`SELECT count(*) AS n FROM scheduler_outbox`)).rows[0]!.n)).toBe(0);
    const m = await rt.metrics.registry.getSingleMetricAsString('relay_jobs_scheduler_outbox_applied_total');
    expect(m).toMatch(/type="account_changed"/);
  });

  it('bad input: unknown platform or group is an empty 200; a malformed query is a 400 naming the parameter', async () => {
    const unknown = await get('?platform=nosuch');
    expect(unknown.statusCode).toBe(200);
    expect(unknown.json()).toMatchObject({ accounts: [], count: 0 });
    expect((await get('?platform=openai&group=nobody')).json()).toMatchObject({ accounts: [], count: 0 });
    expect(await rt.services.schedulerSnapshot.buckets.known()).not.toContainEqual({ platform: 'nosuch', group: '' });
    for (const [query, field] of [
      ['', 'platform'],
      ['?platform=', 'platform'],
      ['?platform=Open%20AI', 'platform'],
      ['?platform=openai&group=%3Cx%3E', 'group'],
      ['?platform=openai&sort=id', 'sort'],
      ['?platform=a&platform=b', 'platform'],
    ] as const) {
      const res = await get(query);
      expect({ query, status: res.statusCode }).toEqual({ query, status: 400 });
      expect(res.json().error.fields.map((f: { field: string }) => f.field)).toContain(field);
    }
    expect((await http.inject('/api/v1/scheduler/accounts?platform=openai')).statusCode).toBe(401);
  });

  it('a corrupt or foreign value in a bucket is a miss: answered from PostgreSQL, never served, and repaired', async () => {
    const key = (rt.services.schedulerSnapshot.buckets as RedisSnapshotBuckets).key({ platform: 'openai', group: '' });
    await get('?platform=openai'); // cached on this replica
    await redis.hset(key, 'a:9', '{"id":9,"platform":"openai"'); // no version, truncated JSON
    // Writers go through the scripts, which move _rev; an out-of-band HSET that leaves _rev alone is
    // invisible to the head check, and a replica keeps serving its last valid decode until it moves.
    await redis.hincrby(key, '_rev', 1);
    const miss = (await get('?platform=openai')).json();
    expect(miss.source).toBe('postgres');
    expect(ids(miss)).toEqual(await truth('openai'));
    await rt.services.schedulerSnapshot.settled();
    const repaired = (await get('?platform=openai')).json();
    expect(repaired.source).toBe('snapshot');
    expect(ids(repaired)).toEqual(await truth('openai'));
    // A foreign type under the key (another program's string).
    await redis.del(key);
    await redis.set(key, 'hello');
    expect((await get('?platform=openai')).json().source).toBe('postgres');
    await rt.services.schedulerSnapshot.settled();
    const again = (await get('?platform=openai')).json();
    expect(again.source).toBe('snapshot');
    expect(ids(again)).toEqual(await truth('openai'));
    // A well-formed entry of the wrong shape is corrupt too.
    await redis.hset(key, 'a:9', '99|{"id":12345}');
    await redis.hincrby(key, '_rev', 1);
    expect((await get('?platform=openai')).json().source).toBe('postgres');
    await rt.services.schedulerSnapshot.settled();
  });

  it('a Redis that lost its data: reads fall back and repair; the next poll rebuilds once', async () => {
    await dropRedisPrefix(prefix);
    const res = (await get('?platform=claude')).json();
    expect(res.source).toBe('postgres');
    expect(ids(res)).toEqual(await truth('claude'));
    await settle();
    expect((await rt.services.schedulerOutbox.state()).lastRebuildReason).toBe('redis_lost');
    for (const p of ['openai', 'claude']) expect((await get(`?platform=${p}`)).json()).toMatchObject({ source: 'snapshot', accounts: (await truth(p)).map((id) => expect.objectContaining({ id })) });
  });

  it('the round fails (health failing) while the outbox lag is past snapshot.lag_bound, and passes again once it is consumed', async () => {
    // An event held by a claim that has not expired, 20 s old: nobody may consume it yet.
    await rt.db.query(
      `INSERT INTO scheduler_outbox (event_type, payload, created_at, claim_token, claimed_until) VALUES ('account_changed', '{"account_id": 1, "left": []}', now() - interval '20 seconds', 'stuck', now() + interval '1 hour')`,
    );
    const failed = await rt.runNow('scheduler_snapshot');
    expect(failed.ran && failed.outcome).toMatchObject({ status: 'failed' });
    expect(JSON.stringify(failed)).toMatch(/lag .* is at or past snapshot.lag_bound/);
    await rt.db.query(`UPDATE scheduler_outbox SET claimed_until = now() - interval '1 second' WHERE claim_token = 'stuck'`);
    const ok = await rt.runNow('scheduler_snapshot');
    expect(ok.ran && ok.outcome.status).toMatch(/ok|no_work/);
    expect((await rt.services.schedulerOutbox.stats()).backlog).toBe(0);
  });

  it('a batch that fails to apply leaves the watermark and is retried; the acknowledgement is retried on a fresh deadline', async () => {
    const key = (rt.services.schedulerSnapshot.buckets as RedisSnapshotBuckets).key({ platform: 'openai', group: '' });
    const watermark = (await rt.services.schedulerOutbox.state()).watermark;
    await redis.del(key);
    await redis.set(key, 'not a hash'); // every apply to this bucket fails with WRONGTYPE
    await rt.services.accounts.update(14, { schedulable: false }); // an openai account
    await expect(consumer().poll()).rejects.toThrow(/WRONGTYPE/);
    expect((await rt.services.schedulerOutbox.state()).watermark).toBe(watermark);
    expect((await rt.services.schedulerOutbox.stats()).backlog).toBe(1);
    await redis.del(key);

    // A consumer whose first acknowledgement fails: the batch is applied once, acknowledged on the retry.
    const signals: AbortSignal[] = [];
    class FlakyOutbox extends SchedulerOutbox {
      override async ack(ids: number[], token: string, signal?: AbortSignal): Promise<number> {
        signals.push(signal!);
        if (signals.length === 1) throw new Error('connection reset during acknowledgement');
        return super.ack(ids, token, signal);
      }
    }
    await rt.db.query(`UPDATE scheduler_outbox SET claimed_until = now() - interval '1 second'`); // skip the release delay
    const flaky = new OutboxConsumer(
      new FlakyOutbox(rt.db),
      new RoutingAccounts(rt.db),
      rt.services.schedulerSnapshot,
      rt.clock,
      rt.metrics.group(SchedulerMetrics),
      silentLogger(),
      'flaky',
      testConsumerOptions({ rules: { lagBoundSeconds: 10, lagPolls: 3, backlogLimit: 10_000 }, rebuildEveryMs: 3_600_000, rebuildChunk: 1000 }),
    );
    const r = await flaky.poll();
    expect(r.applied).toBe(1);
    expect(signals).toHaveLength(2);
    expect(signals[1]).not.toBe(signals[0]);
    expect(signals[1]!.aborted).toBe(false);
    expect((await rt.services.schedulerOutbox.state()).watermark).toBeGreaterThan(watermark);
    expect((await rt.services.schedulerOutbox.stats()).backlog).toBe(0);
    await waitFor(async () => (await get('?platform=openai')).json().source === 'snapshot' || (await rt.services.schedulerSnapshot.settled(), false), { what: 'the openai bucket repaired' });
    expect(ids((await get('?platform=openai')).json())).toEqual(await truth('openai'));
  });

  it('a poll applies a pending change before it checks the store marker: the change is not behind that Redis round trip (issue 26)', async () => {
    const buckets = rt.services.schedulerSnapshot.buckets;
    await waitFor(async () => (await get('?platform=openai')).json().source === 'snapshot' || (await rt.services.schedulerSnapshot.settled(), false), { what: 'the openai bucket open' });
    const apply = vi.spyOn(buckets, 'apply');
    const marker = vi.spyOn(buckets, 'claimMarker');
    try {
      await rt.services.accounts.update(14, { schedulable: true }); // an openai account
      await rt.services.accounts.update(14, { schedulable: false });
      const r = await consumer().poll();
      expect(r.applied).toBeGreaterThan(0);
      expect(apply).toHaveBeenCalled();
      expect(marker).toHaveBeenCalled();
      expect(apply.mock.invocationCallOrder[0]).toBeLessThan(marker.mock.invocationCallOrder[0]!);
      expect(ids((await get('?platform=openai')).json())).toEqual(await truth('openai'));
    } finally {
      apply.mockRestore();
      marker.mockRestore();
    }
  });

  it('idle, a round reads the outbox once and claims nothing; a rebuild request another replica wrote is claimed at the next round (issue 26)', async () => {
    await settle();
    await consumer().rebuildSettled();
    const seen: string[] = [];
    const query = rt.db.query.bind(rt.db);
    rt.db.query = ((text: string, params?: unknown[]) => {
      if (/scheduler_outbox|scheduler_snapshot_state/.test(text)) seen.push(text.replace(/\s+/g, ' ').trim());
      return query(text, params);
    }) as typeof rt.db.query;
    try {
      const r = await consumer().observe();
      expect(r).toMatchObject({ applied: 0, backlog: 0, rebuildPending: false, consumed: 0 });
      expect(seen.filter((q) => /FOR UPDATE SKIP LOCKED|^DELETE/.test(q))).toEqual([]); // no claim, no delete
      expect(seen.filter((q) => /^SELECT count\(\*\) FILTER/.test(q))).toHaveLength(1);
      // Another replica asks for a full rebuild: the next round's read shows it claimable, and this replica claims and runs it.
      const before = (await rt.services.schedulerOutbox.state()).lastRebuildAt;
      await new SchedulerOutbox(rt.db).requestRebuild('manual_test', false);
      expect((await rt.services.schedulerOutbox.stats()).rebuildPending).toBe(true);
      seen.length = 0;
      await consumer().observe();
      await consumer().rebuildSettled();
      expect(seen.some((q) => /FOR UPDATE SKIP LOCKED/.test(q))).toBe(true);
      const after = await rt.services.schedulerOutbox.state();
      expect(after.lastRebuildReason).toBe('manual_test');
      expect(after.lastRebuildAt!.getTime()).toBeGreaterThan(before?.getTime() ?? 0);
    } finally {
      rt.db.query = query;
    }
  });
});
