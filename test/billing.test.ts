import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { createServer } from 'node:http';
import { createHmac } from 'node:crypto';
import { FakePaymentProvider } from './fixtures/payment-provider.js';
import { TestSmtpServer } from './fixtures/smtp-server.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { BillingMetrics } from '../src/areas/billing/metrics.js';

const ADMIN = 'billing-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const DAY = 86_400_000;

/** Subscriptions, payment orders and notifications against real PostgreSQL, Redis, a loopback payment provider and a real SMTP server. */
describe('billing: subscriptions, payment orders, reminders', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  let http: FastifyInstance;
  let provider: FakePaymentProvider;
  let smtp: TestSmtpServer;
  const prefix = uniqueName('rjbill');
  const post = (url: string, payload: unknown) => http.inject({ method: 'POST', url, headers: auth, payload: payload as object });
  const get = async (url: string) => (await http.inject({ url, headers: auth })).json();
  const webhookUrl = () => `${http.listeningOrigin}/api/v1/payments/webhook/fakepay`;
  // Time passing for payment orders, without waiting for it: expiry, the reconcile window and the
  // provider-check backoff all compare an order's own times with the database clock, so moving
  // those times back by `ms` is `ms` passing for that order (the job's runs stay real).
  const ageOrders = (ids: number[], ms: number) =>
    sql.query(
      `UPDATE payment_orders SET created_at = created_at - $2 * interval '1 millisecond', expires_at = expires_at - $2 * interval '1 millisecond',
         last_checked_at = last_checked_at - $2 * interval '1 millisecond' WHERE id = ANY($1::bigint[])`,
      [ids, ms],
    );
  let userId: number;
  let hookServer: import('node:http').Server;
  const hooks: Array<{ headers: import('node:http').IncomingHttpHeaders; body: { key: string; to: string; subject: string } }> = [];

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    // A server whose zone has daylight saving (many run on local time): periods must not follow it.
    // Set before the runtime connects; this connection keeps UTC.
    await sql.query(`ALTER DATABASE ${db.name} SET timezone = 'America/New_York'`);
    provider = await FakePaymentProvider.start();
    smtp = await TestSmtpServer.start();
    hookServer = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        hooks.push({ headers: req.headers, body: JSON.parse(body) });
        res.writeHead(204);
        res.end();
      });
    });
    await new Promise<void>((r) => hookServer.listen(0, '127.0.0.1', r));
    const hookPort = (hookServer.address() as { port: number }).port;
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'bill-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__PAYMENTS__PROVIDERS__FAKEPAY__BASE_URL: provider.url,
        RELAY_JOBS__PAYMENTS__PROVIDERS__FAKEPAY__WEBHOOK_SECRET: provider.secret,
        RELAY_JOBS__NOTIFY__SMTP__HOST: '127.0.0.1',
        RELAY_JOBS__NOTIFY__SMTP__PORT: String(smtp.port),
        RELAY_JOBS__NOTIFY__SMTP__FROM: 'billing@relay.test',
        RELAY_JOBS__NOTIFY__SEND_TIMEOUT: '2s',
        RELAY_JOBS__NOTIFY__PER_SECOND: '100',
        RELAY_JOBS__NOTIFY__WEBHOOK__URL: `http://127.0.0.1:${hookPort}/hook`,
        RELAY_JOBS__NOTIFY__WEBHOOK__SECRET: 'notify-hook-secret-0123456789',
        RELAY_JOBS__PAYMENTS__RETRY_BASE: '1500ms',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.listen({ port: 0, host: '127.0.0.1' });
    userId = (await post('/api/v1/billing/users', { email: 'alice@example.test' })).json().id;
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await provider.close();
    await smtp.close();
    await new Promise((r) => hookServer.close(r));
    await sql.end();
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  const order = async (amount: number, extra: Record<string, unknown> = {}) => {
    const o = (await post('/api/v1/billing/orders', { user_id: userId, amount, provider: 'fakepay', purpose: 'balance', ...extra })).json();
    provider.open(o.provider_order_id, amount);
    return o as { id: number; provider_order_id: string; status: string };
  };
  const balance = async () => (await get(`/api/v1/billing/users/${userId}`)).balance as number;

  it('a signed webhook marks the order paid and credits the balance exactly once; replays change nothing', async () => {
    const before = await balance();
    const o = await order(1999);
    provider.pay(o.provider_order_id);
    const first = await provider.sendWebhook(webhookUrl(), o.provider_order_id);
    expect(first).toMatchObject({ status: 200, body: { result: 'paid' } });
    const again = await provider.sendWebhook(webhookUrl(), o.provider_order_id);
    expect(again).toMatchObject({ status: 200, body: { result: 'already_paid' } });
    expect(await balance()).toBe(before + 1999);
    const view = await get(`/api/v1/billing/orders/${o.id}`);
    expect(view.status).toBe('paid');
    expect(view.events.map((e: { event: string }) => e.event)).toEqual(['created', 'paid', 'paid_again_ignored']);
  });

  it('refuses unsigned, mis-signed, stale, unknown and mismatched webhooks with a reason, changing nothing but the audit trail', async () => {
    const rejectedBefore = (await sql.query(`SELECT count(*)::int AS n FROM payment_order_events WHERE event = 'webhook_rejected'`)).rows[0].n as number;
    const before = await balance();
    const o = await order(500);
    provider.pay(o.provider_order_id);
    const raw = await fetch(webhookUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ provider_order_id: o.provider_order_id, status: 'paid', amount: 500, event_id: 'x' }),
    });
    expect(raw.status).toBe(401);
    expect((await raw.json()).error.message).toMatch(/missing X-Timestamp or X-Signature/);
    expect(await provider.sendWebhook(webhookUrl(), o.provider_order_id, { secret: 'forged-secret-0123456789' })).toMatchObject({ status: 401, body: { error: { message: 'bad signature' } } });
    expect(await provider.sendWebhook(webhookUrl(), o.provider_order_id, { timestamp: Math.floor(Date.now() / 1000) - 3600 })).toMatchObject({
      status: 401,
      body: { error: { message: expect.stringMatching(/outside the 300s tolerance/) } },
    });
    expect(await provider.sendWebhook(webhookUrl(), 'ro_does_not_exist', { amount: 5 })).toMatchObject({ status: 404, body: { error: { code: 'unknown_order' } } });
    expect(await provider.sendWebhook(webhookUrl(), o.provider_order_id, { amount: 5000 })).toMatchObject({ status: 400, body: { error: { code: 'amount_mismatch' } } });
    expect(await provider.sendWebhook(`${http.listeningOrigin}/api/v1/payments/webhook/nopay`, o.provider_order_id)).toMatchObject({ status: 404 });
    expect(await balance()).toBe(before);
    const view = await get(`/api/v1/billing/orders/${o.id}`);
    expect(view.status).toBe('pending');
    expect(view.events.map((e: { event: string }) => e.event)).toContain('amount_mismatch');
    const rejected = await sql.query(`SELECT count(*)::int AS n FROM payment_order_events WHERE event = 'webhook_rejected'`);
    // Only the signed one is in the audit trail: unsigned, forged, stale and unknown-provider requests store nothing (issue 10).
    expect(rejected.rows[0].n - rejectedBefore).toBe(1);
  });

  it('reconcile credits a paid order whose webhook was lost; expiry closes and expires unpaid ones; a payment at the moment of closing wins', async () => {
    await rt.runNow('payment_order_expiry'); // settles what earlier tests left (their order paid at the provider is credited now)
    const before = await balance();
    const lost = await order(300);
    provider.pay(lost.provider_order_id); // webhook never sent
    const unpaid = await order(400, { expires_at: new Date(Date.now() + 1500).toISOString() });
    const racing = await order(700, { expires_at: new Date(Date.now() + 1500).toISOString() });
    provider.payOnClose.add(racing.provider_order_id);
    expect(outcomeOf(await rt.runNow('payment_order_expiry'))).toMatchObject({ status: 'ok' });
    expect((await get(`/api/v1/billing/orders/${lost.id}`)).status).toBe('paid');
    expect((await get(`/api/v1/billing/orders/${unpaid.id}`)).status).toBe('pending');
    await ageOrders([unpaid.id, racing.id], 1600); // both now 100 ms past their expiry
    await rt.runNow('payment_order_expiry');
    expect((await get(`/api/v1/billing/orders/${unpaid.id}`)).status).toBe('expired');
    expect(provider.orders.get(unpaid.provider_order_id)!.status).toBe('closed');
    const r = await get(`/api/v1/billing/orders/${racing.id}`);
    expect(r.status).toBe('paid');
    expect(r.events.map((e: { source: string }) => e.source)).toContain('expiry_check');
    expect(await balance()).toBe(before + 300 + 700);
    // A webhook for the order we expired is a late payment the provider took: credited, audited, not both.
    provider.orders.get(unpaid.provider_order_id)!.status = 'paid';
    expect((await provider.sendWebhook(webhookUrl(), unpaid.provider_order_id)).body).toMatchObject({ result: 'paid' });
    const late = await get(`/api/v1/billing/orders/${unpaid.id}`);
    expect(late.status).toBe('paid');
    expect(late.events.map((e: { event: string }) => e.event)).toContain('paid_after_expiry');
    expect(await balance()).toBe(before + 300 + 700 + 400);
  });

  it('an order paid by webhook during the round is not counted as a provider error in the round note', async () => {
    await rt.runNow('payment_order_expiry'); // nothing pending left behind by earlier tests
    const first = await order(110);
    const second = await order(120);
    // While the round asks the provider about the first order, the second one's webhook arrives.
    provider.onQuery = async (id) => {
      if (id !== first.provider_order_id) return;
      provider.onQuery = null;
      provider.pay(second.provider_order_id);
      expect((await provider.sendWebhook(webhookUrl(), second.provider_order_id)).body).toMatchObject({ result: 'paid' });
    };
    // The round itself credited nothing (the webhook did), so it is a no_work round, not a failing one.
    expect(outcomeOf(await rt.runNow('payment_order_expiry'))).toMatchObject({ status: 'no_work' });
    expect(provider.onQuery, 'the webhook arrived during the round').toBeNull();
    const [round] = await rt.records.recent('payment_order_expiry', 1);
    expect(round!.note).toContain('0 provider errors');
    expect(round!.note).toContain('1 settled meanwhile (webhook)');
    expect((await get(`/api/v1/billing/orders/${second.id}`)).status).toBe('paid');
    provider.pay(first.provider_order_id); // settled now, so the next test starts with nothing pending
    expect((await provider.sendWebhook(webhookUrl(), first.provider_order_id)).body).toMatchObject({ result: 'paid' });
  });

  it('never expires an order the provider could not confirm unpaid (failures, garbage); retried next round', async () => {
    const o = await order(250, { expires_at: new Date(Date.now() - 1000).toISOString() });
    provider.failQueries = 10;
    const r = await rt.runNow('payment_order_expiry');
    expect(outcomeOf(r)?.status).toBe('failed');
    expect((await get(`/api/v1/billing/orders/${o.id}`)).status).toBe('pending');
    // Backoff: the next round, right away, does not ask again (retry_base 1.5 s).
    const queries = provider.queries;
    await rt.runNow('payment_order_expiry');
    expect(provider.queries).toBe(queries);
    await ageOrders([o.id], 1600); // past the first backoff (1.5 s)
    provider.failQueries = 0;
    provider.garbageQueries = 10;
    await rt.runNow('payment_order_expiry');
    expect(provider.queries).toBe(queries + 1);
    expect((await get(`/api/v1/billing/orders/${o.id}`)).status).toBe('pending');
    provider.garbageQueries = 0;
    await ageOrders([o.id], 3100); // past the second backoff (3 s)
    const failures = (await rt.metrics.group(BillingMetrics).providerFailures.get()).values.find((v) => v.labels.provider === 'fakepay')!.value;
    expect(failures).toBeGreaterThanOrEqual(2);
    await rt.runNow('payment_order_expiry');
    expect((await get(`/api/v1/billing/orders/${o.id}`)).status).toBe('expired');
  });

  it('a subscription order activates a subscription, the next one extends it', async () => {
    const plan = (await post('/api/v1/billing/plans', { name: 'Pro', price: 9900, duration_days: 30 })).json();
    const u = (await post('/api/v1/billing/users', { email: 'bob@example.test' })).json();
    const pay = async () => {
      const o = (await post('/api/v1/billing/orders', { user_id: u.id, amount: 9900, provider: 'fakepay', purpose: 'subscription', plan_id: plan.id })).json();
      provider.open(o.provider_order_id, 9900);
      provider.pay(o.provider_order_id);
      expect((await provider.sendWebhook(webhookUrl(), o.provider_order_id)).status).toBe(200);
    };
    await pay();
    let subs = (await get(`/api/v1/billing/users/${u.id}`)).subscriptions;
    expect(subs).toHaveLength(1);
    // Ending the day before a DST change (11 March 2040 in New York): 30 days on is 30 × 24 hours,
    // as the admin API counts a plan's days, not 30 local days (an hour short across the change).
    await rt.db.query(`UPDATE subscriptions SET expires_at = '2040-03-10T12:00:00Z' WHERE id = $1`, [subs[0].id]);
    const firstEnd = Date.parse('2040-03-10T12:00:00Z');
    expect((await rt.db.query<{ tz: string }>(`SELECT current_setting('TimeZone') AS tz`)).rows[0]!.tz).toBe('America/New_York');
    await pay();
    subs = (await get(`/api/v1/billing/users/${u.id}`)).subscriptions;
    expect(subs).toHaveLength(1);
    expect(Date.parse(subs[0].expires_at) - firstEnd).toBe(30 * DAY);
    expect((await post('/api/v1/billing/orders', { user_id: u.id, amount: 1.5, provider: 'fakepay', purpose: 'balance' })).json().error.message).toMatch(
      /amount: expected an integer amount in minor units/,
    );
    expect((await post('/api/v1/billing/orders', { user_id: u.id, amount: 100, provider: 'fakepay', purpose: 'subscription' })).json().error.message).toMatch(
      /plan_id: a subscription order needs plan_id/,
    );
    expect((await post('/api/v1/billing/orders', { user_id: 999999, amount: 100, provider: 'nopay', purpose: 'balance' })).json().error.fields.map((f: { field: string }) => f.field)).toEqual([
      'provider',
      'user_id',
    ]);
  });

  it('subscription_expiry expires ended subscriptions and sends one reminder per window, once, skipping renewed ones; a broken SMTP server backs off', async () => {
    const plan = (await post('/api/v1/billing/plans', { name: 'Basic', price: 100, duration_days: 30 })).json();
    const u = (await post('/api/v1/billing/users', { email: 'carol@example.test' })).json();
    const sub = async (endsInMs: number) =>
      (
        await post('/api/v1/billing/subscriptions', {
          user_id: u.id,
          plan_id: plan.id,
          starts_at: new Date(Date.now() - 20 * DAY).toISOString(),
          expires_at: new Date(Date.now() + endsInMs).toISOString(),
        })
      ).json();
    const ended = await sub(-60_000 + 20 * DAY - 20 * DAY + 1000);
    const in5 = await sub(5 * DAY);
    const in2 = await sub(2 * DAY);
    const in12h = await sub(DAY / 2);
    const in10 = await sub(10 * DAY);
    const mails = () => smtp.received.filter((m) => m.to.includes('carol@example.test'));
    const first = await rt.runNow('subscription_expiry');
    expect((await get(`/api/v1/billing/subscriptions/${ended.id}`)).status, JSON.stringify(first)).toBe('expired');
    expect(
      mails()
        .map((m) => m.subject)
        .sort(),
      JSON.stringify(first),
    ).toEqual(['Your Basic subscription expires in 1 day(s)', 'Your Basic subscription expires in 3 day(s)', 'Your Basic subscription expires in 7 day(s)']);
    expect(new Set(mails().map((m) => m.messageId)).size).toBe(3);
    await rt.runNow('subscription_expiry');
    expect(mails()).toHaveLength(3);
    void in5;
    void in2;
    void in12h;
    void in10;

    // SMTP breaks: the reminder fails once, backs off, and is not retried every round.
    smtp.broken = true;
    const in6 = await sub(6 * DAY);
    const attemptsBefore = smtp.attempts;
    const r1 = await rt.runNow('subscription_expiry');
    expect(outcomeOf(r1)?.note).toMatch(/email down/);
    expect(smtp.attempts).toBe(attemptsBefore + 1);
    await rt.runNow('subscription_expiry');
    expect(smtp.attempts).toBe(attemptsBefore + 1);
    expect((await get('/api/v1/notifications/channels')).channels.email).toMatchObject({ up: false });
    const failing = (await get('/api/v1/notifications?status=pending')).deliveries.find((d: { params: { subscription_id: number } }) => d.params.subscription_id === in6.id);
    expect(failing).toMatchObject({ attempts: 1, last_error: expect.stringMatching(/451/) });
    // Renewed while the reminder waits: it is skipped, never sent.
    await sql.query(`UPDATE subscriptions SET expires_at = expires_at + interval '30 days' WHERE id = $1`, [in6.id]);
    smtp.broken = false;
    await sql.query(`UPDATE notification_deliveries SET next_attempt_at = clock_timestamp() WHERE status = 'pending'`);
    await rt.runNow('subscription_expiry');
    expect(mails()).toHaveLength(3);
    expect((await get('/api/v1/notifications?status=skipped')).deliveries.some((d: { params: { subscription_id: number } }) => d.params.subscription_id === in6.id)).toBe(true);

    // The webhook channel got the same three reminders, plus the one for the 6-day subscription
    // (sent before the renewal: only e-mail was down), each once, signed, keyed.
    const mine = hooks.filter((h) => h.body.to === String(u.id));
    expect(mine).toHaveLength(4);
    expect(new Set(mine.map((h) => h.body.key)).size).toBe(4);
    expect(mine.some((h) => h.body.key.startsWith(`reminder:${in6.id}:7d:`))).toBe(true);
    for (const h of mine) {
      expect(h.headers['idempotency-key']).toBe(h.body.key);
      const raw = JSON.stringify(h.body);
      expect(h.headers['x-signature']).toBe(createHmac('sha256', 'notify-hook-secret-0123456789').update(`${h.headers['x-timestamp']}.${raw}`).digest('hex'));
    }

    // Settings: reminders switched off by an admin queue nothing new.
    const put = await http.inject({ method: 'PUT', url: '/api/v1/notifications/settings', headers: auth, payload: { reminders_enabled: false } });
    expect(put.json()).toEqual({ reminders_enabled: false, reminder_days: [7, 3, 1] });
    expect((await http.inject({ method: 'PUT', url: '/api/v1/notifications/settings', headers: auth, payload: { reminder_days: [0] } })).json().error.message).toMatch(/reminder_days\.0/);
    await sub(4 * DAY);
    const queued = await sql.query(`SELECT count(*)::int AS n FROM notification_deliveries`);
    await rt.runNow('subscription_expiry');
    expect((await sql.query(`SELECT count(*)::int AS n FROM notification_deliveries`)).rows[0].n).toBe(queued.rows[0].n);
    await http.inject({ method: 'PUT', url: '/api/v1/notifications/settings', headers: auth, payload: { reminders_enabled: true } });
  });

  it('lists users, subscriptions and orders with filters and a cursor, and names a bad filter', async () => {
    const emails = ['list-a@relay.test', 'list-b@relay.test', 'list-c@relay.test'];
    const ids: number[] = [];
    for (const email of emails) ids.push((await post('/api/v1/billing/users', { email })).json().id);
    // Page through every user two at a time: no row twice, none skipped, the last page says so.
    const seen: number[] = [];
    let cursor: string | null = null;
    do {
      const page = await get(`/api/v1/billing/users?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
      expect(page.users.length).toBeLessThanOrEqual(2);
      seen.push(...page.users.map((u: { id: number }) => u.id));
      cursor = page.next_cursor;
    } while (cursor);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).toEqual(expect.arrayContaining(ids));
    expect((await get('/api/v1/billing/users?email=list-b@relay.test')).users.map((u: { id: number }) => u.id)).toEqual([ids[1]]);
    const plan = (await post('/api/v1/billing/plans', { name: 'list plan', price: 100, duration_days: 30 })).json();
    await post('/api/v1/billing/subscriptions', { user_id: ids[0], plan_id: plan.id });
    const subs = await get(`/api/v1/billing/subscriptions?user_id=${ids[0]}&status=active`);
    expect(subs.subscriptions).toHaveLength(1);
    expect(subs).toMatchObject({ subscriptions: [{ user_id: ids[0], plan_id: plan.id, status: 'active' }], next_cursor: null });
    const orders = await get(`/api/v1/billing/orders?user_id=${ids[2]}`);
    expect(orders).toEqual({ orders: [], next_cursor: null });
    const bad = await http.inject({ url: '/api/v1/billing/orders?status=lost&colour=red', headers: auth });
    expect(bad.statusCode).toBe(400);
    expect(bad.body).toMatch(/status/);
    expect(bad.body).toMatch(/colour/);
  });
});
