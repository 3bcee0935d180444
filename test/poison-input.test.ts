import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { UsageWriter } from '../src/areas/usage/usage-writer.js';
import { UsageStore, type UsageRow } from '../src/areas/usage/store/usage.js';
import { DeadLetters } from '../src/store/dead-letters.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { RedisQuotaCounters, quotaMember } from '../src/coordination/quota-counters.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { Deadline } from '../src/time/deadline.js';
import { systemClock } from '../src/time/clock.js';
import { InvalidInput } from '../src/errors/app-error.js';

const ADMIN = 'poison-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const NUL = 'a\u0000b';
const LONE = 'x\ud800y';

/**
 * Poison input (issue 10): text PostgreSQL cannot store is refused at the edge with a 400 naming
 * the field; independently, a batch the database refuses for one row's content is split so only
 * that row is set aside in dead_letters, for the usage writer, spill replay and the quota flusher.
 */
describe('poison input never stops a pipeline (real PostgreSQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  const prefix = uniqueName('rjpoison');
  let seq = 0;
  const ev = (over: Record<string, unknown> = {}) => ({ request_id: `p-${++seq}`, user_id: 'u1', platform: 'openai', model: 'gpt-5', input_tokens: 1, output_tokens: 2, cost: '0.1', ...over });
  const row = (over: Partial<UsageRow> = {}): UsageRow => ({ ...rt.services.usage.validate([ev()])[0]!, ...over });
  const req = (method: 'POST' | 'PUT' | 'PATCH' | 'GET', url: string, payload?: unknown) =>
    http.inject({ method, url, headers: auth, ...(payload === undefined ? {} : { payload: payload as object }) });
  const count = async (table: string, where = 'true') => Number((await sql.query(`SELECT count(*) AS n FROM ${table} WHERE ${where}`)).rows[0].n);

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'poison-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__PAYMENTS__PROVIDERS__DEMO__BASE_URL: 'http://127.0.0.1:9',
        RELAY_JOBS__PAYMENTS__PROVIDERS__DEMO__WEBHOOK_SECRET: 'demo-webhook-secret-0123456789',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('refuses NUL and lone surrogates in every text field of every JSON API with a 400 naming the field', async () => {
    const cases: Array<[string, 'POST' | 'PUT' | 'PATCH' | 'GET', string, unknown, string]> = [
      ['usage model NUL', 'POST', '/api/v1/usage', { events: [ev({ model: NUL })] }, 'events.0.model'],
      ['usage user surrogate', 'POST', '/api/v1/usage', { events: [ev(), ev({ user_id: LONE })] }, 'events.1.user_id'],
      ['quota user NUL', 'POST', '/api/v1/quota/usage', { increments: [{ user_id: NUL, platform: 'openai', amount: 1 }] }, 'increments.0.user_id'],
      ['quota platform surrogate', 'POST', '/api/v1/quota/usage', { increments: [{ user_id: 'u', platform: LONE, amount: 1 }] }, 'increments.0.platform'],
      ['account name', 'POST', '/api/v1/accounts', { platform: 'openai', name: NUL, credentials: { access_token: 'x' } }, 'name'],
      ['account token', 'POST', '/api/v1/accounts', { platform: 'openai', name: 'n', credentials: { access_token: LONE } }, 'credentials.access_token'],
      ['import', 'POST', '/api/v1/accounts/import', { accounts: [{ platform: 'openai', name: NUL, credentials: { access_token: 'x' } }] }, 'accounts.0.name'],
      ['proxy name', 'POST', '/api/v1/proxies', { name: NUL, url: 'http://127.0.0.1:3128' }, 'name'],
      ['billing user', 'POST', '/api/v1/billing/users', { external_id: NUL }, 'external_id'],
      ['plan', 'POST', '/api/v1/billing/plans', { name: LONE, price: 1, duration_days: 1 }, 'name'],
      ['order', 'POST', '/api/v1/billing/orders', { user_id: 1, amount: 1, provider: 'demo', provider_order_id: NUL, purpose: 'balance' }, 'provider_order_id'],
      ['idempotency scope', 'POST', '/api/v1/idempotency/begin', { scope: NUL, key: 'k', request: {} }, 'scope'],
      ['idempotency request', 'POST', '/api/v1/idempotency/begin', { scope: 's', key: 'k', request: { deep: [LONE] } }, 'request.deep.0'],
      ['idempotency response', 'POST', '/api/v1/idempotency/complete', { scope: 's', key: 'k', request: {}, response: { m: NUL } }, 'response.m'],
      ['cleanup user', 'POST', '/api/v1/usage/cleanup-tasks', { from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z', user_id: NUL }, 'user_id'],
      ['a key', 'POST', '/api/v1/billing/users', { [`e${NUL}`]: 'x' }, 'ea\\u0000b'],
      ['query', 'GET', '/api/v1/dashboard/usage?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&model=a%00b', undefined, 'query.model'],
      ['path', 'POST', '/api/v1/quota/a%00b/openai/reset', undefined, 'params.user'],
      ['path get', 'GET', '/api/v1/quota/a%00b', undefined, 'params.user'],
      // A reset names what an increment could have written: user ids up to 128 characters, platforms up to 64.
      ['long user', 'POST', `/api/v1/quota/${'u'.repeat(129)}/openai/reset`, undefined, 'params.user'],
      ['long platform', 'POST', `/api/v1/quota/u1/${'p'.repeat(65)}/reset`, undefined, 'params.platform'],
    ];
    const dirtyBefore = await rt.services.quota.dirtyCount();
    for (const [name, method, url, payload, field] of cases) {
      const res = await req(method, url, payload);
      expect(res.statusCode, `${name}: ${res.body}`).toBe(400);
      expect(
        res.json().error.fields.map((f: { field: string }) => f.field),
        name,
      ).toContain(field);
    }
    // The longest user id an increment takes is read and reset by path too (fastify's default 100-character parameter limit answered 404).
    const longest = 'u'.repeat(128);
    expect((await req('GET', `/api/v1/quota/${longest}`)).json()).toEqual({ user_id: longest, platforms: [] });
    // Nothing of those requests was written anywhere: no counter moved, no row appeared.
    expect(await rt.services.quota.dirtyCount()).toBe(dirtyBefore);
    expect(await count('usage_logs')).toBe(0);
    expect(await count('accounts')).toBe(0);
    expect(await count('billing_users')).toBe(0);
    expect(await count('idempotency_records')).toBe(0);
    // The library's hot path refuses the same text.
    expect(() => rt.services.usage.record(ev({ platform: NUL }))).toThrow(/event\.0\.platform|NUL/);
    await expect(rt.services.quota.increment(NUL, 'openai', 1)).rejects.toThrow(/NUL/);
    // And the amounts the API refuses: a NaN, a fraction, a negative or a string counted would make the
    // counter null or text, which the flush sets aside and a restart forgets.
    for (const amount of [Number.NaN, Infinity, 1.5, -100, 2e15, '5' as unknown as number]) {
      const err = await rt.services.quota.increment('lib-user', 'openai', amount).catch((e: unknown) => e);
      expect(err, String(amount)).toBeInstanceOf(InvalidInput);
      expect((err as InvalidInput).fields!.map((f) => f.field)).toEqual(['amount']);
    }
    expect(await rt.services.quota.increment('lib-user', 'openai', 10)).toEqual({ used: 10 });
  });

  it('deeply nested JSON in idempotency request/response is a 400, not a stack overflow', async () => {
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    for (const [url, body] of [
      ['/api/v1/idempotency/begin', `{"scope":"s","key":"k","request":${deep(100_000)}}`],
      ['/api/v1/idempotency/complete', `{"scope":"s","key":"k","request":{},"response":${deep(100_000)}}`],
    ] as const) {
      const res = await http.inject({ method: 'POST', url, headers: { ...auth, 'content-type': 'application/json' }, payload: body });
      expect(res.statusCode, res.body).toBe(400);
      expect(res.json().error.message).toMatch(/nested deeper than/);
    }
    expect((await http.inject('/healthz')).statusCode).toBe(200);
  });

  it('a duplicate provider_order_id is a 409 and a malformed proxy URL a 400, not a 500', async () => {
    const user = (await req('POST', '/api/v1/billing/users', { external_id: 'dup-user' })).json();
    const order = { user_id: user.id, amount: 100, provider: 'demo', provider_order_id: 'ord-1', purpose: 'balance' };
    expect((await req('POST', '/api/v1/billing/orders', order)).statusCode).toBe(201);
    const dup = await req('POST', '/api/v1/billing/orders', order);
    expect(dup.statusCode, dup.body).toBe(409);
    for (const url of ['http://[::1:bad', 'http://host:99999', 'http://exa mple.com', 'http://user:PXSECRET%ZZ@h:80']) {
      const res = await req('POST', '/api/v1/proxies', { name: 'bad', url });
      expect(res.statusCode, `${url}: ${res.body}`).toBe(400);
      expect(res.json().error.fields[0].field).toBe('url');
      expect(res.body).not.toContain('PXSECRET');
    }
    // A password that does not decode would fail every refresh through the proxy (bad_proxy_url, retried for ever): refused when stored.
    const pct = await req('POST', '/api/v1/proxies', { name: 'bad', url: 'http://user:PXSECRET%ZZ@h:80' });
    expect(pct.json().error.fields[0].message).toMatch(/the password has a bad percent-encoding/);
    const good = await req('POST', '/api/v1/proxies', { name: 'good', url: 'http://user:p%40ss@h:80' });
    expect(good.statusCode, good.body).toBe(201);
    const patched = await req('PATCH', `/api/v1/proxies/${good.json().id}`, { url: 'http://user:PXSECRET%ZZ@h:80' });
    expect(patched.statusCode, patched.body).toBe(400);
    expect(patched.body).not.toContain('PXSECRET');
  });

  it('the usage writer sets poison rows aside in dead_letters; the rest of the batch is stored and later writes are not blocked', async () => {
    const metrics = new Metrics();
    const dir = mkdtempSync(join(tmpdir(), 'rj-poison-'));
    const writer = new UsageWriter(new UsageStore(rt.db), { batchSize: 50, queueLimit: 1000, overflow: 'sync', spillDir: dir }, metrics, silentLogger(), new DeadLetters(rt.db));
    // Straight to the writer, past the edge validation: the writer must hold on its own.
    const good = Array.from({ length: 20 }, () => row());
    const bad = [row({ model: NUL }), row({ user_id: LONE }), row({ platform: `p${NUL}` })];
    const mixed = [...good.slice(0, 7), bad[0]!, ...good.slice(7, 15), bad[1]!, ...good.slice(15), bad[2]!];
    await writer.write(mixed);
    await writer.write([row(), row()]);
    expect(await count('usage_logs', `request_id = ANY($1)`.replace('$1', `'{${good.map((g) => g.request_id).join(',')}}'`))).toBe(20);
    const letters = (await sql.query(`SELECT source, reason, payload FROM dead_letters WHERE source = 'usage' ORDER BY id`)).rows;
    expect(letters.map((l) => JSON.parse(l.payload).request_id).sort()).toEqual(bad.map((b) => b.request_id).sort());
    expect(letters[0].reason).toMatch(/^22/);
    expect((await metrics.integrity.deadLetters.get()).values.find((v) => v.labels.source === 'usage')?.value).toBe(3);
    expect(await writer.stop(Deadline.within(systemClock, 1000))).toBe(0);
    expect(readdirSync(dir)).toEqual([]);
    const api = await req('GET', '/api/v1/dead-letters?source=usage');
    expect(api.statusCode).toBe(200);
    expect(api.json().dead_letters).toHaveLength(3);
    expect(api.json().dead_letters[0].payload).toContain('\\u0000');
  });

  it('spill replay dead-letters poison and unreadable lines instead of crashing the start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rj-poison-spill-'));
    const good = [row(), row()];
    const bad = row({ model: NUL });
    writeFileSync(join(dir, 'usage-1-1.jsonl'), [JSON.stringify(good[0]), JSON.stringify(bad), '{not json', JSON.stringify(good[1])].join('\n') + '\n');
    const writer = new UsageWriter(new UsageStore(rt.db), { batchSize: 50, queueLimit: 1000, overflow: 'sync', spillDir: dir }, new Metrics(), silentLogger(), new DeadLetters(rt.db));
    expect(await writer.replaySpills()).toBe(3);
    expect(readdirSync(dir)).toEqual([]);
    expect(await count('usage_logs', `request_id IN ('${good[0]!.request_id}', '${good[1]!.request_id}')`)).toBe(2);
    const letters = (await sql.query(`SELECT reason, payload FROM dead_letters WHERE source = 'usage_spill' ORDER BY id`)).rows;
    expect(letters).toHaveLength(2);
    expect(letters.some((l) => /unreadable/.test(l.reason))).toBe(true);
    expect(letters.some((l) => l.payload.includes(bad.request_id))).toBe(true);
  });

  it('the quota flusher sets a poison counter aside and flushes every other one; later rounds and the final flush succeed', async () => {
    // Counters written past the edge (an older version, another writer): the flusher must hold on its own.
    const redis = new Redis(REDIS_URL);
    try {
      const counters = new RedisQuotaCounters(redis, { prefix, env: 'test' });
      const poisonSeeded = quotaMember(`s${NUL}`, 'openai');
      const poisonUnseeded = quotaMember(`n${NUL}`, 'openai');
      await counters.increment(poisonSeeded, 1);
      await counters.seed(poisonSeeded, 0, 0);
      await counters.increment(poisonSeeded, 5);
      await counters.increment(poisonUnseeded, 3);
      for (let i = 0; i < 5; i++) expect((await req('POST', '/api/v1/quota/usage', { increments: [{ user_id: `good-${i}`, platform: 'openai', amount: 2 }] })).statusCode).toBe(200);
      const r = await rt.services.quota.flushAll();
      expect(r.flushed).toBeGreaterThanOrEqual(5);
      expect(await count('platform_quota_usage', `user_id LIKE 'good-%' AND used = 2`)).toBe(5);
      const letters = (await sql.query(`SELECT payload FROM dead_letters WHERE source = 'quota_flush'`)).rows;
      expect(letters).toHaveLength(2);
      // Nothing poisoned is left dirty: the next rounds (and the final flush at shutdown) have nothing to fail on.
      expect(await rt.services.quota.dirtyCount()).toBe(0);
      expect((await rt.services.quota.flushAll()).dirty).toBe(0);
      const job = await req('POST', '/api/v1/jobs/platform_quota_flusher/run');
      expect(job.statusCode).toBe(202);
    } finally {
      redis.disconnect();
    }
  });
});
