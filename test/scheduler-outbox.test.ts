import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { Proxies } from '../src/areas/accounts/store/proxies.js';
import { SecretBox } from '../src/store/secret-box.js';
import { SchedulerOutbox } from '../src/areas/scheduler-snapshot/store/scheduler-outbox.js';
import type { RoutingRow } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';
import { RedisSnapshotBuckets, type SnapshotBuckets } from '../src/areas/scheduler-snapshot/store/snapshot-buckets.js';
import { MemorySnapshotBuckets } from '../src/areas/scheduler-snapshot/store/memory-snapshot-buckets.js';
import { RebuildTrigger, rebuildBackoffMs } from '../src/areas/scheduler-snapshot/rebuild-trigger.js';
import { accountExpiryJob } from '../src/areas/accounts/account-expiry.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import type { JobContext } from '../src/scheduler/job.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const creds = { access_token: 'at-secret', refresh_token: 'rt-secret' };

describe('scheduler outbox: recorded with the change, deduplicated, claimed (real PostgreSQL)', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let db: PgDb;
  let accounts: Accounts;
  let proxies: Proxies;
  let outbox: SchedulerOutbox;

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
    await migrate(db);
    const box = SecretBox.fromBase64(TEST_MASTER_KEY);
    accounts = new Accounts(db, box);
    proxies = new Proxies(db, box);
    outbox = new SchedulerOutbox(db);
  });
  afterAll(async () => {
    await db.close();
    await fresh.drop();
  });

  const pending = async (id: number) =>
    Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM scheduler_outbox WHERE dedup_key = $1 AND claim_token IS NULL AND consumed_at IS NULL`, [`account:${id}`])).rows[0]!.n);
  const version = async (id: number) => Number((await db.query<{ sched_version: string }>(`SELECT sched_version FROM accounts WHERE id = $1`, [id])).rows[0]!.sched_version);
  const drain = async () => {
    const batch = await outbox.claim('drain', 60_000, 10_000);
    await outbox.ack(
      batch.map((e) => e.id),
      'drain',
    );
  };
  const newAccount = (name: string, platform = 'openai') => accounts.create({ platform, name, credentials: creds, tokenExpiresAt: new Date(Date.now() + 3_600_000) });

  it('one pending event per account however often it changes; a claimed event lets the next change record a new one', async () => {
    const a = await newAccount('dedup');
    expect(await pending(a.id)).toBe(1);
    await accounts.update(a.id, { schedulable: false });
    await accounts.update(a.id, { schedulable: true });
    await accounts.coolDown(a.id, Date.now() + 60_000, 'oauth_401');
    expect(await pending(a.id)).toBe(1);
    const claimed = await outbox.claim('t1', 60_000, 200);
    expect(claimed.some((e) => e.payload.account_id === a.id)).toBe(true);
    expect(await pending(a.id)).toBe(0);
    await accounts.update(a.id, { schedulable: false });
    expect(await pending(a.id)).toBe(1);
    await outbox.ack(
      claimed.map((e) => e.id),
      't1',
    );
  });

  it('is written in the same transaction: a rolled-back change leaves no event', async () => {
    await drain();
    const before = Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM scheduler_outbox WHERE consumed_at IS NULL`)).rows[0]!.n);
    await expect(
      db.tx(async (q) => {
        await accounts.create({ platform: 'openai', name: 'rolled-back', credentials: creds, tokenExpiresAt: null }, q);
        throw new Error('abort the transaction');
      }),
    ).rejects.toThrow('abort the transaction');
    expect(Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM scheduler_outbox WHERE consumed_at IS NULL`)).rows[0]!.n)).toBe(before);
  });

  it('every write that changes schedulability records an event; writes routing does not see record none', async () => {
    const a = await newAccount('paths');
    const p1 = await proxies.create({ name: 'p1', url: 'http://127.0.0.1:1' });
    const p2 = await proxies.create({ name: 'p2', url: 'http://127.0.0.1:2' });
    const ctx = { db, log: silentLogger() } as unknown as JobContext;
    const writes: [string, () => Promise<unknown>][] = [
      ['disable', () => accounts.update(a.id, { status: 'disabled' })],
      ['enable', () => accounts.update(a.id, { status: 'active' })],
      ['unschedulable', () => accounts.update(a.id, { schedulable: false })],
      ['schedulable', () => accounts.update(a.id, { schedulable: true })],
      ['proxy', () => accounts.update(a.id, { proxyId: p1.id })],
      ['401 cooldown', () => accounts.coolDown(a.id, Date.now() + 600_000, 'oauth_401')],
      [
        'refresh success',
        async () => {
          const v = (await accounts.tokenVersion(a.id))!;
          await accounts.writeRefreshed(a.id, v, { access_token: 'new' }, new Date(Date.now() + 7_200_000));
        },
      ],
      ['permanent refresh failure', async () => accounts.recordFailure(a.id, (await accounts.tokenVersion(a.id))!, 'invalid_grant', { status: 'error', reason: 'revoked' })],
      ['admin credential fix', () => accounts.update(a.id, { credentials: { value: creds, tokenExpiresAt: new Date(Date.now() + 3_600_000) } })],
      ['proxy expiry fallback', () => db.tx((q) => proxies.moveAccounts(q, p1.id, p2.id))],
      ['proxy restore', () => db.tx((q) => proxies.returnAccounts(q, p1.id))],
      [
        'account expiry',
        async () => {
          await db.query(`UPDATE accounts SET auto_pause_on_expired = true, expires_at = now() - interval '1 minute' WHERE id = $1`, [a.id]);
          await drain();
          await accountExpiryJob.run(ctx, { metrics: new Metrics() }, {}, {} as never);
        },
      ],
    ];
    for (const [name, write] of writes) {
      await drain();
      const v = await version(a.id);
      await write();
      expect({ name, pending: await pending(a.id) }).toEqual({ name, pending: 1 });
      expect(await version(a.id)).toBeGreaterThan(v);
    }
    // A refresh in flight and a renamed account change nothing routing sees.
    await accounts.update(a.id, { schedulable: true, status: 'active' });
    await drain();
    const v = await version(a.id);
    await accounts.markRefreshing(a.id, (await accounts.tokenVersion(a.id))!);
    await accounts.update(a.id, { name: 'renamed' });
    expect(await pending(a.id)).toBe(0);
    expect(await version(a.id)).toBe(v);
  });

  it('remembers every bucket an account left while its event was pending', async () => {
    await drain();
    const a = await newAccount('mover', 'openai');
    await db.query(`UPDATE accounts SET platform = 'claude' WHERE id = $1`, [a.id]);
    await db.query(`UPDATE accounts SET sched_group = 'vip' WHERE id = $1`, [a.id]);
    const { rows } = await db.query<{ payload: unknown }>(`SELECT payload FROM scheduler_outbox WHERE dedup_key = $1 AND consumed_at IS NULL`, [`account:${a.id}`]);
    expect(rows).toHaveLength(1);
    expect((rows[0]!.payload as { left: unknown }).left).toEqual([
      ['openai', ''],
      ['claude', ''],
    ]);
  });

  it('replicas claiming at once get disjoint batches; a lost claim cannot acknowledge', async () => {
    await drain();
    await db.query(
      `INSERT INTO scheduler_outbox (event_type, payload, dedup_key) SELECT 'account_changed', jsonb_build_object('account_id', -g, 'left', '[]'::jsonb), 'test:' || g FROM generate_series(1, 1000) g`,
    );
    const [x, y, z] = await Promise.all([outbox.claim('x', 60_000, 200), outbox.claim('y', 60_000, 200), outbox.claim('z', 60_000, 200)]);
    const ids = [...x, ...y, ...z].map((e) => e.id);
    expect(ids).toHaveLength(600);
    expect(new Set(ids).size).toBe(600);
    expect(
      await outbox.ack(
        x.map((e) => e.id),
        'someone-else',
      ),
    ).toBe(0);
    const before = (await outbox.state()).watermark;
    expect(
      await outbox.ack(
        x.map((e) => e.id),
        'x',
      ),
    ).toBe(200);
    expect((await outbox.state()).watermark).toBeGreaterThanOrEqual(Math.max(before, ...x.map((e) => e.id)));
    await outbox.ack(
      y.map((e) => e.id),
      'y',
    );
    await outbox.ack(
      z.map((e) => e.id),
      'z',
    );
    await drain();
    expect(await outbox.deleteConsumed(50, 1000)).toBeGreaterThanOrEqual(1000);
    expect((await outbox.stats()).backlog).toBe(0);
  });

  it('full rebuild requests are coalesced; a failed one waits out its backoff', async () => {
    expect(await outbox.requestRebuild('lag')).toBe(true);
    expect(await outbox.requestRebuild('backlog')).toBe(false);
    const ev = (await outbox.claimRebuild('r1', 60_000))!;
    expect(ev.payload.reason).toBe('lag');
    expect(await outbox.requestRebuild('periodic')).toBe(false); // one is running
    await outbox.release([ev.id], 'r1', rebuildBackoffMs(ev.attempts, 5000, 300_000));
    expect(await outbox.claimRebuild('r2', 60_000)).toBeNull();
    await db.query(`UPDATE scheduler_outbox SET claimed_until = now() - interval '1 second' WHERE id = $1`, [ev.id]);
    const again = (await outbox.claimRebuild('r2', 60_000))!;
    expect(again.attempts).toBe(2);
    await outbox.finishRebuild(again.id, 'r2', 'lag', 42);
    expect(await outbox.state()).toMatchObject({ lastRebuildReason: 'lag', lastRebuildEpoch: 42 });
    expect(await outbox.requestRebuild('periodic')).toBe(true);
  });
});

describe('degradation latch and rebuild backoff', () => {
  it('requests once after 3 lagging polls, stays latched until lag and backlog recover', () => {
    const t = new RebuildTrigger({ lagBoundSeconds: 10, lagPolls: 3, backlogLimit: 10_000 });
    expect([t.observe(12, 5), t.observe(15, 5)]).toEqual([null, null]);
    expect(t.observe(11, 5)).toBe('lag');
    expect([t.observe(30, 5), t.observe(40, 20_000), t.observe(50, 5)]).toEqual([null, null, null]);
    expect(t.isLatched).toBe(true);
    expect(t.observe(1, 5)).toBeNull();
    expect(t.isLatched).toBe(false);
    expect(t.observe(1, 10_000)).toBe('backlog');
    expect(t.observe(1, 9_000)).toBeNull();
    expect(t.isLatched).toBe(false);
    // A lagging poll between good ones does not count towards three.
    expect([t.observe(12, 0), t.observe(1, 0), t.observe(12, 0), t.observe(12, 0)]).toEqual([null, null, null, null]);
  });

  it('backs off 5 s doubling to 5 min', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 20].map((a) => rebuildBackoffMs(a, 5000, 300_000))).toEqual([5000, 10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]);
  });
});

const row = (id: number, version: number, entry: boolean, priority = 50): RoutingRow => ({
  id,
  version,
  bucket: { platform: 'openai', group: '' },
  entry: entry ? { id, platform: 'openai', group: null, priority, concurrency: 3, proxy_id: null, status: 'active', temp_unschedulable_until: null, token_expires_at: null } : null,
});

describe.each(['redis', 'memory'] as const)('snapshot buckets (%s): the epoch rule', (kind) => {
  const prefix = uniqueName('rjsnap');
  let redis: Redis | null = null;
  let buckets: SnapshotBuckets;
  const b = { platform: 'openai', group: '' };
  beforeAll(() => {
    if (kind === 'redis') {
      redis = new Redis(REDIS_URL);
      buckets = new RedisSnapshotBuckets(redis, { prefix, env: 'test' });
    } else buckets = new MemorySnapshotBuckets();
  });
  afterAll(async () => {
    redis?.disconnect();
    if (kind === 'redis') await dropRedisPrefix(prefix);
  });

  it('an older version never replaces a newer one; tombstones hide; only complete buckets are served', async () => {
    expect(await buckets.apply(b, [row(1, 5, true)], 1)).toBe(-1); // not opened: nothing written
    const gen = await buckets.open(b, 'g1', false, 1, 0);
    expect(await buckets.open(b, 'g2', false, 1, 0)).toBe(gen);
    expect(await buckets.apply(b, [row(1, 5, true, 10), row(2, 3, true, 5)], 2)).toBe(2);
    expect((await buckets.read(b)).state).toBe('incomplete');
    expect(await buckets.complete(b, 'other-gen', 3, 0)).toBe(false);
    expect(await buckets.complete(b, gen, 3, 4)).toBe(true);
    expect(await buckets.apply(b, [row(1, 4, false), row(2, 3, false)], 4)).toBe(0); // older and equal: refused
    let r = await buckets.read(b);
    expect(r.state === 'ok' && r.entries.map((e) => e.id)).toEqual([2, 1]); // priority order
    expect(r.state === 'ok' && r.epoch).toBe(5);
    const head = await buckets.head(b);
    expect(await buckets.apply(b, [row(2, 9, false)], 5)).toBe(1);
    r = await buckets.read(b);
    expect(r.state === 'ok' && r.entries.map((e) => e.id)).toEqual([1]);
    expect(r.state === 'ok' && r.epoch).toBe(9);
    expect(await buckets.head(b)).not.toEqual(head);
    expect((await buckets.ids(b)).sort()).toEqual([1, 2]);
    expect(await buckets.known()).toEqual([b]);
  });

  it('a corrupt field makes the bucket unservable; reset discards it', async () => {
    const c = { platform: 'openai', group: 'corrupt' };
    const gen = await buckets.open(c, 'g1', false, 1, 0);
    await buckets.apply(c, [row(1, 1, true)], 1);
    await buckets.complete(c, gen, 1, 0);
    if (redis) await redis.hset((buckets as RedisSnapshotBuckets).key(c), 'a:7', 'not a version');
    else (buckets as MemorySnapshotBuckets).poke(c, 'a:7', 'not a version');
    expect((await buckets.read(c)).state).toBe('corrupt');
    await buckets.open(c, 'g2', true, 2, 0);
    expect((await buckets.read(c)).state).toBe('incomplete');
  });

  it('the data marker is claimed once', async () => {
    expect(await buckets.claimMarker()).toBe(true);
    expect(await buckets.claimMarker()).toBe(false);
  });
});
