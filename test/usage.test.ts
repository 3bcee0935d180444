import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { waitFor } from './helpers/wait.js';
import { buildHttpServer } from '../src/http/server.js';
import { ManualClock, systemClock } from '../src/time/clock.js';
import { UsageWriter, UsageQueueFull } from '../src/areas/usage/usage-writer.js';
import { UsageStore } from '../src/areas/usage/store/usage.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { captureLogs } from './helpers/log-capture.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { DeadLetters } from '../src/store/dead-letters.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { UsageMetrics } from '../src/areas/usage/metrics.js';
import { Deadline } from '../src/time/deadline.js';

const ADMIN = 'usage-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** Usage ingestion, rollups, cleanup, idempotency and platform quota on real PostgreSQL and Redis, with a manual clock. */
describe('usage data lifecycle (real PostgreSQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  let clock: ManualClock;
  const prefix = uniqueName('rjuse');
  const logs = captureLogs('use');
  let seq = 0;
  const ev = (over: Record<string, unknown> = {}) => ({ request_id: `req-${++seq}`, user_id: 'u1', platform: 'openai', model: 'gpt-5', input_tokens: 10, output_tokens: 20, cost: '0.1', ...over });
  const count = async (where = 'true') => Number((await sql.query(`SELECT count(*) AS n FROM usage_logs WHERE ${where}`)).rows[0].n);
  const post = (url: string, payload: unknown) => http.inject({ method: 'POST', url, headers: auth, payload: payload as object });

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    clock = new ManualClock(Math.floor(Date.now() / HOUR) * HOUR + 30 * 60_000); // half past the current hour
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'use-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__USAGE__MAX_EVENTS_PER_REQUEST: '50',
        RELAY_JOBS__USAGE__TIMEZONE: 'Asia/Shanghai',
        RELAY_JOBS__USAGE__DELETE_BATCH: '7',
      },
    });
    rt = await Runtime.create(config, { clock, logger: logs.logger });
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('stores a batch once: repeated request ids are skipped, ids may be numbers, cost is exact', async () => {
    const a = ev({ user_id: 42, account_id: 7, cost: '0.1', latency_ms: 120, status_code: 200 });
    const b = ev({ cost: 0.2, status_code: 500 });
    const res = await post('/api/v1/usage', { events: [a, b, a] });
    expect(res.statusCode, res.body).toBe(200);
    // The repeat of `a` in the batch is reported as a duplicate, not silently counted as stored.
    expect(res.json()).toMatchObject({ accepted: 3, stored: 2, duplicates: 1 });
    const again = await post('/api/v1/usage', { events: [a] });
    expect(again.statusCode).toBe(200);
    expect(again.json()).toMatchObject({ accepted: 1, stored: 0, duplicates: 1 });
    const { rows } = await sql.query(`SELECT user_id, account_id, cost::text FROM usage_logs WHERE request_id IN ($1, $2) ORDER BY request_id`, [a.request_id, b.request_id]);
    expect(rows).toEqual([
      { user_id: '42', account_id: '7', cost: '0.1000000000' },
      { user_id: 'u1', account_id: null, cost: '0.2000000000' },
    ]);
    expect((await sql.query(`SELECT sum(cost)::text AS s FROM usage_logs WHERE request_id IN ($1, $2)`, [a.request_id, b.request_id])).rows[0].s).toBe('0.3000000000');
    expect(await count(`request_id = '${a.request_id}'`)).toBe(1);
  });

  it('rejects malformed bodies with every field named and writes nothing of them', async () => {
    const before = await count();
    const cases: Array<[unknown, RegExp]> = [
      [{ events: [ev(), ev({ input_tokens: -1 })] }, /events\.1\.input_tokens: expected 0 or more/],
      [{ events: [ev({ input_tokens: '10' })] }, /events\.0\.input_tokens/],
      [{ events: [ev({ cost: '1e-3' })] }, /events\.0\.cost: expected a non-negative decimal/],
      [{ events: [ev({ cost: '0.12345678901' })] }, /at most 10 decimal places/],
      [{ events: [ev({ model: undefined })] }, /events\.0\.model/],
      [{ events: [ev({ colour: 'red' })] }, /events\.0\.colour: unknown field/],
      [{ events: [ev({ created_at: new Date(clock.now() - 100 * DAY).toISOString() })] }, /events\.0\.created_at: .*older than the usage retention/],
      [{ events: [ev({ created_at: new Date(clock.now() + 3 * DAY).toISOString() })] }, /more than a day in the future/],
      [{ events: Array.from({ length: 51 }, () => ev()) }, /events: expected at most 50 events per request/],
      [{ event: [] }, /event: unknown field|events/],
      [{ events: 'nope' }, /events: expected an array/],
    ];
    for (const [body, pattern] of cases) {
      const res = await post('/api/v1/usage', body);
      expect(res.statusCode, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(res.json().error.message).toMatch(pattern);
    }
    // An integer past 2^53 is one problem per field (zod reports it twice: unsafe, and past the maximum).
    const unsafe = await post('/api/v1/usage', { events: [ev({ user_id: 2 ** 53 + 2, input_tokens: 2 ** 53 + 2 })] });
    expect(unsafe.statusCode).toBe(400);
    expect(
      unsafe
        .json()
        .error.fields.map((f: { field: string }) => f.field)
        .sort(),
    ).toEqual(['events.0.input_tokens', 'events.0.user_id']);
    expect(await count()).toBe(before);
  });

  it('a database error keeps the batch and retries until it is stored; the request waits for the commit', async () => {
    await sql.query(`CREATE TABLE fail_usage (on_ boolean)`);
    await sql.query(
      `CREATE FUNCTION refuse_usage() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS (SELECT 1 FROM fail_usage) THEN RAISE EXCEPTION 'disk full (test)'; END IF; RETURN NULL; END $$`,
    );
    await sql.query(`CREATE TRIGGER refuse_usage BEFORE INSERT ON usage_request_ids FOR EACH STATEMENT EXECUTE FUNCTION refuse_usage()`);
    await sql.query(`INSERT INTO fail_usage VALUES (true)`);
    const failedBefore = (await rt.metrics.group(UsageMetrics).usageFailedBatches.get()).values[0]?.value ?? 0;
    try {
      const events = [ev(), ev(), ev()];
      let answered = false;
      const req = post('/api/v1/usage', { events }).then((r) => ((answered = true), r));
      // A batch has failed, and the request is still waiting for its commit.
      await waitFor(async () => ((await rt.metrics.group(UsageMetrics).usageFailedBatches.get()).values[0]?.value ?? 0) > failedBefore, { what: 'a failed usage batch' });
      expect(answered).toBe(false);
      expect((await rt.metrics.group(UsageMetrics).usageFailedBatches.get()).values[0]!.value).toBeGreaterThan(failedBefore);
      await sql.query(`DELETE FROM fail_usage`);
      expect((await req).statusCode).toBe(200);
      expect(await count(`request_id IN ('${events.map((e) => e.request_id).join("','")}')`)).toBe(3);
    } finally {
      await sql.query(`DROP TRIGGER refuse_usage ON usage_request_ids`);
    }
  });

  it('queue full: drop refuses and counts, sync writes inline; a stopped writer spills and the next start writes the spill', async () => {
    const store = new UsageStore(rt.db);
    const metrics = new Metrics();
    const { mkdtempSync, readdirSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'rj-spill-'));
    const rows = (n: number) => rt.services.usage.validate(Array.from({ length: n }, () => ev()));
    const drop = new UsageWriter(store, { batchSize: 10, queueLimit: 2, overflow: 'drop', spillDir: dir }, metrics, silentLogger(), new DeadLetters(rt.db));
    await expect(drop.write(rows(3))).rejects.toBeInstanceOf(UsageQueueFull);
    expect((await metrics.group(UsageMetrics).usageDropped.get()).values[0]!.value).toBe(3);
    const sync = new UsageWriter(store, { batchSize: 10, queueLimit: 2, overflow: 'sync', spillDir: dir }, metrics, silentLogger(), new DeadLetters(rt.db));
    const three = rows(3);
    expect(await sync.write(three)).toBe('sync_fallback');
    expect(await count(`request_id = '${three[2]!.request_id}'`)).toBe(1);
    // Spill: the database refuses everything, the deadline passes, the rows go to a file; replay writes them once.
    await sql.query(`CREATE TRIGGER refuse_usage BEFORE INSERT ON usage_request_ids FOR EACH STATEMENT EXECUTE FUNCTION refuse_usage()`);
    await sql.query(`INSERT INTO fail_usage VALUES (true)`);
    const spillRows = rows(2);
    const w = new UsageWriter(store, { batchSize: 10, queueLimit: 100, overflow: 'sync', spillDir: dir }, metrics, silentLogger(), new DeadLetters(rt.db));
    for (const r of spillRows) w.record(r);
    expect(await w.stop(Deadline.within(systemClock, 300))).toBe(2);
    expect(readdirSync(dir).length).toBe(1);
    await sql.query(`DELETE FROM fail_usage`);
    await sql.query(`DROP TRIGGER refuse_usage ON usage_request_ids`);
    const again = new UsageWriter(store, { batchSize: 10, queueLimit: 100, overflow: 'sync', spillDir: dir }, metrics, silentLogger(), new DeadLetters(rt.db));
    expect(await again.replaySpills()).toBe(2);
    expect(readdirSync(dir).length).toBe(0);
    expect(await count(`request_id IN ('${spillRows[0]!.request_id}', '${spillRows[1]!.request_id}')`)).toBe(2);
  });

  it('aggregates hourly and daily (in the configured zone) from a watermark, counts late events inside the lookback, and recompute fixes older hours', async () => {
    const now = clock.now();
    const h = (n: number) => new Date(Math.floor(now / HOUR) * HOUR - n * HOUR + 60_000).toISOString();
    const user = 'agg-user';
    await post('/api/v1/usage', {
      events: [
        ev({ user_id: user, created_at: h(3), cost: '1.25' }),
        ev({ user_id: user, created_at: h(1), latency_ms: 100, status_code: 429 }),
        ev({ user_id: user, created_at: h(1), latency_ms: 300 }),
      ],
    });
    expect((await rt.runNow('dashboard_aggregation')).ran).toBe(true);
    const wm = (await sql.query(`SELECT value FROM job_cursors WHERE job_name = 'dashboard_aggregation' AND key = 'watermark'`)).rows[0].value;
    expect(Date.parse(wm)).toBe(Math.floor(now / HOUR) * HOUR);
    const dash = async (granularity = 'hour') =>
      (
        await http.inject({
          url: `/api/v1/dashboard/usage?from=${new Date(now - 10 * HOUR).toISOString()}&to=${new Date(now + HOUR).toISOString()}&granularity=${granularity}&group_by=user&user_id=${user}`,
          headers: auth,
        })
      ).json();
    let points = (await dash()).points;
    expect(points.map((p: { t: string; requests: number }) => [p.t, p.requests])).toEqual([
      [new Date(Date.parse(h(3)) - 60_000).toISOString(), 1],
      [new Date(Date.parse(h(1)) - 60_000).toISOString(), 2],
    ]);
    expect(points[1]).toMatchObject({ key: user, errors: 1, avg_latency_ms: 200, cost: '0.2' });
    expect(points[0].cost).toBe('1.25');
    // Without a range: the last 24 hours by hour (a sensible default, not a 400).
    const byDefault = (await http.inject({ url: `/api/v1/dashboard/usage?group_by=user&user_id=${user}`, headers: auth })).json();
    expect(byDefault).toMatchObject({ from: new Date(now - 24 * HOUR).toISOString(), to: new Date(now).toISOString(), granularity: 'hour' });
    expect(byDefault.points.map((p: { requests: number }) => p.requests)).toEqual([1, 2]);
    // A late event one hour back (inside the 2 h lookback) is counted by the next round.
    await post('/api/v1/usage', { events: [ev({ user_id: user, created_at: h(1) })] });
    // One 5 hours back (outside the lookback) is not, until a recompute of its range.
    await post('/api/v1/usage', { events: [ev({ user_id: user, created_at: h(5) })] });
    await clock.advance(60_000);
    await rt.runNow('dashboard_aggregation');
    points = (await dash()).points;
    expect(points.find((p: { t: string }) => p.t === new Date(Date.parse(h(1)) - 60_000).toISOString()).requests).toBe(3);
    expect(points.find((p: { t: string }) => p.t === new Date(Date.parse(h(5)) - 60_000).toISOString())).toBeUndefined();
    const rc = await post('/api/v1/usage/recompute', { from: new Date(now - 6 * HOUR).toISOString(), to: new Date(now - 4 * HOUR).toISOString() });
    expect(rc.statusCode).toBe(202);
    await expect.poll(async () => (await http.inject({ url: rc.json().poll, headers: auth })).json().status).toBe('done');
    points = (await dash()).points;
    expect(points.find((p: { t: string }) => p.t === new Date(Date.parse(h(5)) - 60_000).toISOString()).requests).toBe(1);
    expect((await sql.query(`SELECT value FROM job_cursors WHERE job_name = 'dashboard_aggregation' AND key = 'watermark'`)).rows[0].value).toBe(wm);
    // Daily buckets are Shanghai days (UTC+8).
    const day = (await dash('day')).points as Array<{ t: string; requests: number }>;
    const local = (iso: string) => new Date(Date.parse(iso) + 8 * HOUR).toISOString().slice(0, 10);
    const expected = new Map<string, number>();
    for (const [t, n] of [
      [h(5), 1],
      [h(3), 1],
      [h(1), 3],
    ] as const)
      expected.set(local(t), (expected.get(local(t)) ?? 0) + n);
    expect(new Map(day.map((p) => [p.t, p.requests]))).toEqual(expected);
  });

  it('usage_cleanup refuses to delete raw rows the aggregation has not covered (failed round, red health), then drops whole days and deletes the partial day in batches', async () => {
    const now = clock.now();
    const cutoff = now - 90 * DAY;
    // Two rows in the cutoff's own day, before the cutoff (deleted in batches, not by a partition
    // drop): the clock is at half past an hour, so the cutoff is at least 30 min into its day.
    const cutoffDay = Math.floor(cutoff / DAY) * DAY;
    const old = [cutoff - 3 * DAY, cutoffDay + 10 * 60_000, cutoffDay + 20 * 60_000, cutoff + HOUR];
    await rt.services.usageStore.ensurePartitions(old.map((t) => Math.floor(t / DAY) * DAY));
    for (const [i, t] of old.entries()) {
      await sql.query(`INSERT INTO usage_logs (request_id, user_id, platform, model, input_tokens, output_tokens, cost, created_at) VALUES ($1, 'old', 'openai', 'm', 1, 1, 0, $2)`, [
        `old-${i}-${seq++}`,
        new Date(t),
      ]);
    }
    // The watermark is behind those rows: refused.
    await sql.query(`UPDATE job_cursors SET value = to_jsonb($1::text) WHERE job_name = 'dashboard_aggregation' AND key = 'watermark'`, [new Date(cutoff - 4 * DAY).toISOString()]);
    const refused = await rt.runNow('usage_cleanup');
    expect(refused, JSON.stringify(refused)).toMatchObject({ ran: true, outcome: { status: 'failed' } });
    const view = (await rt.jobViews()).find((j) => j.name === 'usage_cleanup')!;
    expect(view.health).toBe('failing');
    expect(view.last_run?.error).toMatch(/refusing to delete raw usage before .*dashboard_aggregation has only covered hours before/);
    expect(await count(`user_id = 'old'`)).toBe(4);
    // Aggregation catches up (a backfill, in day chunks), then the cleanup deletes.
    await rt.runNow('dashboard_aggregation');
    expect(logs.lines.some((l) => l.msg === 'aggregation backfill progress')).toBe(true);
    await sql.query(`INSERT INTO usage_hourly VALUES ($1, 'ancient', '', 'openai', 'm', 1, 1, 1, 0, 0, 0, 0, 0)`, [new Date(now - 200 * DAY)]);
    const ok = await rt.runNow('usage_cleanup');
    expect(ok).toMatchObject({ ran: true, outcome: { status: 'ok' } });
    expect(await count(`user_id = 'old'`)).toBe(1); // only the row after the cutoff is left
    const parts = (await rt.services.usageStore.partitions()).map((p) => p.dayStart);
    expect(parts).not.toContain(Math.floor((cutoff - 3 * DAY) / DAY) * DAY);
    expect(parts).toContain(Math.floor(now / DAY) * DAY + 3 * DAY); // created ahead
    expect((await sql.query(`SELECT count(*)::int AS n FROM usage_hourly WHERE user_id = 'ancient'`)).rows[0].n).toBe(0);
    const deleted = await rt.metrics.group(UsageMetrics).usageDeleted.get();
    expect(deleted.values.find((v) => v.labels.kind === 'raw_partition')!.value).toBeGreaterThanOrEqual(1);
    expect(deleted.values.find((v) => v.labels.kind === 'raw_batch')!.value).toBeGreaterThanOrEqual(1);
  });

  it("range cleanup tasks: claimed, deleted in batches, rollups rebuilt; cancellable; a dead replica's task is reclaimed", async () => {
    const now = clock.now();
    const t0 = new Date(Math.floor(now / HOUR) * HOUR - 2 * HOUR + 120_000).toISOString();
    await post('/api/v1/usage', { events: [...Array.from({ length: 20 }, () => ev({ user_id: 'victim', created_at: t0 })), ev({ user_id: 'bystander', created_at: t0 })] });
    await rt.runNow('dashboard_aggregation');
    const range = { from: new Date(now - 3 * HOUR).toISOString(), to: new Date(now).toISOString() };
    const cancelled = (await post('/api/v1/usage/cleanup-tasks', { ...range, user_id: 'bystander' })).json();
    expect((await post(`/api/v1/usage/cleanup-tasks/${cancelled.id}/cancel`, {})).json().status).toBe('cancelled');
    const task = (await post('/api/v1/usage/cleanup-tasks', { ...range, user_id: 'victim' })).json();
    expect(task.status).toBe('pending');
    await rt.runNow('usage_cleanup');
    const done = (await http.inject({ url: `/api/v1/usage/cleanup-tasks/${task.id}`, headers: auth })).json();
    expect(done).toMatchObject({ status: 'done', deleted_rows: 20 });
    expect(await count(`user_id = 'victim'`)).toBe(0);
    expect(await count(`user_id = 'bystander'`)).toBe(1);
    expect((await sql.query(`SELECT count(*)::int AS n FROM usage_hourly WHERE user_id = 'victim'`)).rows[0].n).toBe(0);
    expect((await sql.query(`SELECT count(*)::int AS n FROM usage_hourly WHERE user_id = 'bystander'`)).rows[0].n).toBe(1);
    // A task left running by a replica that died long ago is taken over.
    await post('/api/v1/usage', { events: [ev({ user_id: 'orphan', created_at: t0 })] });
    const { rows } = await sql.query(
      `INSERT INTO usage_cleanup_tasks (user_id, range_start, range_end, status, claimed_by, heartbeat_at) VALUES ('orphan', $1, $2, 'running', 'dead-replica', clock_timestamp() - interval '1 hour') RETURNING id`,
      [range.from, range.to],
    );
    await rt.runNow('usage_cleanup');
    expect((await http.inject({ url: `/api/v1/usage/cleanup-tasks/${rows[0].id}`, headers: auth })).json()).toMatchObject({ status: 'done', claimed_by: 'use-1', deleted_rows: 1 });
    expect((await post('/api/v1/usage/cleanup-tasks', { from: range.to, to: range.from })).json().error.message).toMatch(/to: to must be after from/);
  });

  it('idempotency: begin, in progress, complete, replay; another body under the key is a conflict; expired records are cleaned up', async () => {
    const body = { scope: 'payments', key: 'k-1', request: { amount: 5, currency: 'USD' } };
    expect((await post('/api/v1/idempotency/begin', body)).json()).toEqual({ state: 'started' });
    expect((await post('/api/v1/idempotency/begin', { ...body, request: { currency: 'USD', amount: 5 } })).json().state).toBe('in_progress');
    expect((await post('/api/v1/idempotency/complete', { ...body, response: { id: 'pay_1' }, status_code: 201 })).json()).toEqual({ completed: true });
    expect((await post('/api/v1/idempotency/begin', body)).json()).toEqual({ state: 'replay', response: { id: 'pay_1' }, status_code: 201 });
    const conflict = await post('/api/v1/idempotency/begin', { ...body, request: { amount: 6, currency: 'USD' } });
    expect(conflict.statusCode).toBe(409);
    expect(conflict.json().error.message).toMatch(/first used with a different request body/);
    expect((await post('/api/v1/idempotency/complete', { scope: 'payments', key: 'nope', request: {}, response: {} })).statusCode).toBe(409);
    expect((await post('/api/v1/idempotency/begin', { scope: 'x', key: 'y' })).json().error.message).toMatch(/exactly one of request/);
    await sql.query(`UPDATE idempotency_records SET expires_at = clock_timestamp() - interval '1 second' WHERE key = 'k-1'`);
    const r = await rt.runNow('idempotency_cleanup');
    expect(r, JSON.stringify(r)).toMatchObject({ ran: true, outcome: { status: 'ok' } });
    expect((await sql.query(`SELECT count(*)::int AS n FROM idempotency_records`)).rows[0].n).toBe(0);
  });

  it('platform quota: increments flushed as absolute values; a snapshot from before a reset cannot overwrite it; errors put keys back; a Redis that lost the key resumes from PostgreSQL', async () => {
    const inc = (user: string, amount: number, platform = 'openai') => post('/api/v1/quota/usage', { increments: [{ user_id: user, platform, amount }] });
    for (let i = 0; i < 5; i++) await inc('q1', 100);
    await inc('q1', 7, 'anthropic');
    const usage = async (u: string) =>
      Object.fromEntries(((await http.inject({ url: `/api/v1/quota/${u}`, headers: auth })).json().platforms as Array<{ platform: string; used: number }>).map((p) => [p.platform, p.used]));
    // Read through the counters: what POST /quota/usage answered is visible before any flush.
    expect(await usage('q1')).toEqual({ anthropic: 7, openai: 500 });
    expect((await http.inject({ url: '/api/v1/quota/q1', headers: auth })).json().platforms.every((p: { flushed: boolean }) => !p.flushed)).toBe(true);
    await rt.runNow('platform_quota_flusher');
    expect(await usage('q1')).toEqual({ anthropic: 7, openai: 500 });
    expect((await http.inject({ url: '/api/v1/quota/q1', headers: auth })).json().platforms.every((p: { flushed: boolean }) => p.flushed)).toBe(true);

    // Sub2API's race: a flusher reads 600, an admin resets, then the flusher writes 600. The epoch makes it lose.
    await inc('q1', 100);
    const { RedisQuotaCounters, quotaMember } = await import('../src/coordination/quota-counters.js');
    const counters = new RedisQuotaCounters(rt.redis!, { prefix, env: 'test' });
    const [snapshot] = await counters.read([quotaMember('q1', 'openai')]);
    expect(snapshot).toMatchObject({ used: 600, seeded: true });
    expect((await post('/api/v1/quota/q1/openai/reset', {})).json()).toMatchObject({ used: 0, epoch: 1 });
    expect(await rt.services.quota.store.upsert([{ user_id: 'q1', platform: 'openai', used: snapshot!.used, epoch: snapshot!.epoch }])).toBe(0);
    await rt.runNow('platform_quota_flusher');
    expect((await usage('q1')).openai).toBe(0);
    await inc('q1', 5);
    await rt.runNow('platform_quota_flusher');
    expect((await usage('q1')).openai).toBe(5);

    // PostgreSQL refuses the flush: the keys go back into the dirty set and are flushed later.
    await inc('q2', 9);
    await sql.query(`CREATE FUNCTION refuse_quota() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk full (test)'; END $$`);
    await sql.query(`CREATE TRIGGER refuse_quota BEFORE INSERT OR UPDATE ON platform_quota_usage FOR EACH STATEMENT EXECUTE FUNCTION refuse_quota()`);
    await expect(rt.services.quota.flushOnce()).rejects.toThrow(/disk full/);
    expect(await counters.dirtyCount()).toBe(1);
    await sql.query(`DROP TRIGGER refuse_quota ON platform_quota_usage`);
    await rt.services.quota.flushAll();
    expect(await usage('q2')).toEqual({ openai: 9 });
    const outcomes = Object.fromEntries((await rt.metrics.group(UsageMetrics).quotaFlush.get()).values.map((v) => [v.labels.outcome, v.value]));
    expect(outcomes.re_added).toBeGreaterThanOrEqual(1);
    expect(outcomes.errors).toBeGreaterThanOrEqual(1);

    // Redis lost the counter (a restart without persistence): the next increment is seeded from PostgreSQL.
    await rt.redis!.del(`${prefix}:test:quota:${quotaMember('q2', 'openai')}`);
    expect((await inc('q2', 1)).json().results[0].used).toBe(10);
    await rt.runNow('platform_quota_flusher');
    expect(await usage('q2')).toEqual({ openai: 10 });
    expect((await post('/api/v1/quota/usage', { increments: [{ user_id: 'q3', platform: 'openai', amount: -5 }] })).json().error.message).toMatch(/increments\.0\.amount: expected 0 or more/);
  });
});

describe('usage and quota in embedded mode (PGlite, in-process counters)', () => {
  it('stores usage in day partitions, aggregates it, and keeps quota counters across a clean restart', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-usage-')));
    const env = { RELAY_JOBS_DATA_DIR: dir };
    let rt = await Runtime.create(loadConfig({ env }), { logger: silentLogger() });
    try {
      const now = Date.now();
      const events = Array.from({ length: 30 }, (_, i) => ({
        request_id: `e-${i}`,
        user_id: 'emb',
        platform: 'openai',
        model: 'm',
        input_tokens: 1,
        output_tokens: 2,
        cost: '0.01',
        created_at: new Date(now - (i % 3) * HOUR).toISOString(),
      }));
      expect(await rt.services.usage.accept(events)).toMatchObject({ accepted: 30 });
      expect(await rt.services.usage.record({ ...events[0], request_id: 'e-lib' })).toBe('enqueued');
      await rt.services.quota.increment('emb', 'openai', 40);
      await rt.services.quota.increment('emb', 'openai', 2);
      expect(outcomeOf(await rt.runNow('dashboard_aggregation'))).toMatchObject({ status: 'ok' });
      const { rows } = await rt.db.query<{ n: string; cost: string }>(`SELECT sum(requests) AS n, sum(cost)::text AS cost FROM usage_hourly WHERE user_id = 'emb'`);
      expect(Number(rows[0]!.n)).toBe(31);
      expect(rows[0]!.cost).toBe('0.3100000000');
      await rt.shutdown(); // final flush of the in-process counters
      rt = await Runtime.create(loadConfig({ env }), { logger: silentLogger() });
      expect((await rt.services.quota.store.get('emb', 'openai'))?.used).toBe(42);
      // A fresh process seeds its counter from the stored value instead of counting from zero.
      expect(await rt.services.quota.increment('emb', 'openai', 1)).toEqual({ used: 43 });
    } finally {
      await rt.shutdown();
    }
    // Two cold PGlite opens: seconds on a quiet machine, much more on a loaded one.
  }, 180_000);
});
