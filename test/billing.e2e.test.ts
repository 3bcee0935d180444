import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { FakePaymentProvider } from './fixtures/payment-provider.js';
import { TestSmtpServer } from './fixtures/smtp-server.js';
import { pace, waitFor } from './helpers/wait.js';
import { instanceAliveSql } from '../src/coordination/instance-alive.js';

/**
 * Billing with real processes: three replicas, 1,000 subscriptions inside a reminder window and
 * 1,000 orders (paid with a webhook, some replayed; paid with the webhook lost; paid at the moment
 * of closing; unpaid), replicas SIGKILLed during the rounds and restarted. Every reminder reaches
 * the SMTP server (one Message-ID each), every paid order is credited once, every unpaid one
 * expires, and the balances add up to the paid orders.
 */
const N = 1000;

describe('billing across three real replicas with SIGKILL', () => {
  let cluster: Cluster;
  let sql: pg.Client;
  let provider: FakePaymentProvider;
  let smtp: TestSmtpServer;
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    provider = await FakePaymentProvider.start();
    smtp = await TestSmtpServer.start();
  });
  afterAll(async () => {
    await cluster?.stop();
    await provider?.close();
    await smtp?.close();
  });

  it('reminders once, paid orders credited once, unpaid expired, money conserved', async () => {
    const env = {
      // The defaults for these, not the harness's.
      RELAY_JOBS__DATABASE__POOL_SIZE: undefined,
      RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined,
      RELAY_JOBS__PAYMENTS__PROVIDERS__FAKEPAY__BASE_URL: provider.url,
      RELAY_JOBS__PAYMENTS__PROVIDERS__FAKEPAY__WEBHOOK_SECRET: provider.secret,
      RELAY_JOBS__PAYMENTS__BATCH: '200',
      RELAY_JOBS__NOTIFY__SMTP__HOST: '127.0.0.1',
      RELAY_JOBS__NOTIFY__SMTP__PORT: String(smtp.port),
      RELAY_JOBS__NOTIFY__SMTP__FROM: 'billing@relay.test',
      RELAY_JOBS__NOTIFY__SEND_TIMEOUT: '300ms',
      RELAY_JOBS__NOTIFY__PER_SECOND: '1000',
      RELAY_JOBS__NOTIFY__BATCH: '150',
      RELAY_JOBS__JOBS__SUBSCRIPTION_EXPIRY__EVERY: '1s',
      RELAY_JOBS__JOBS__PAYMENT_ORDER_EXPIRY__EVERY: '1s',
      RELAY_JOBS__JOBS__SUBSCRIPTION_EXPIRY__TIMEOUT: '5s',
      RELAY_JOBS__JOBS__PAYMENT_ORDER_EXPIRY__TIMEOUT: '5s',
      RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '300ms',
      RELAY_JOBS__LOGGING__LEVEL: 'warn',
    };
    // Schema first (one replica migrates), then the data, then the cluster.
    // A PostgreSQL server of its own: three replicas at the default pool hold over 30 connections,
    // too many to take from the machine's shared server while other files run clusters beside this one.
    cluster = await startCluster({ replicas: ['b0'], migrate: false, waitStarted: false, env, database: 'private' });
    sql = await cluster.sql();
    const ports = [cluster.replica(0).port];
    replicas[0] = cluster.replica(0).proc;
    await cluster.replica(0).waitHealthy();
    await sql.query(`INSERT INTO plans (name, price, duration_days) VALUES ('Pro', 9900, 30)`);
    await sql.query(`INSERT INTO billing_users (email) SELECT 'user' || g || '@example.test' FROM generate_series(1, $1) g`, [N]);
    // Each subscription ends inside exactly one reminder window (0.2 to 6.8 days from now).
    await sql.query(
      `INSERT INTO subscriptions (user_id, plan_id, starts_at, expires_at)
       SELECT g, 1, clock_timestamp() - interval '20 days', clock_timestamp() + (0.2 + (g % 67) * 0.1) * interval '1 day' FROM generate_series(1, $1) g`,
      [N],
    );
    const kinds = ['webhook', 'lost', 'unpaid', 'on_close'] as const;
    const orders = Array.from({ length: N }, (_, i) => ({ id: `po-${i}`, user: (i % N) + 1, amount: 100 + ((i * 37) % 900), kind: kinds[i % 10 < 4 ? 0 : i % 10 < 6 ? 1 : i % 10 < 9 ? 2 : 3] }));
    for (const o of orders) provider.open(o.id, o.amount);
    await sql.query(
      `INSERT INTO payment_orders (user_id, amount, currency, provider, provider_order_id, purpose, expires_at)
       SELECT (x->>'user')::bigint, (x->>'amount')::bigint, 'CNY', 'fakepay', x->>'id', 'balance', clock_timestamp() + (2 + (row_number() OVER ()) % 5) * interval '1 second'
       FROM jsonb_array_elements($1::jsonb) x`,
      [JSON.stringify(orders)],
    );
    for (const o of orders) {
      if (o.kind === 'webhook' || o.kind === 'lost') provider.pay(o.id);
      if (o.kind === 'on_close') provider.payOnClose.add(o.id);
    }
    for (let i = 1; i < 3; i++) {
      const r = await cluster.addReplica(`b${i}`);
      ports[i] = r.port;
      replicas[i] = r.proc;
    }
    await Promise.all([1, 2].map((i) => cluster.replica(i).waitHealthy()));

    // Webhooks arrive over time at random replicas, a fifth of them twice.
    const hooks = (async () => {
      const w = orders.filter((o) => o.kind === 'webhook');
      for (const [k, o] of w.entries()) {
        const url = `http://127.0.0.1:${ports[k % 3]}/api/v1/payments/webhook/fakepay`;
        for (let t = 0; t < (k % 5 === 0 ? 2 : 1); t++) await provider.sendWebhook(url, o.id).catch(() => undefined);
        if (k % 20 === 0) await pace(50);
      }
    })();

    // SIGKILL replicas in the middle of their rounds, restart them a moment later.
    /** The cluster's own liveness test (a replica's liveness session gone, or its beat three 300 ms beats stale). */
    const seenDead = async (id: string) => (await sql.query(`SELECT NOT ${instanceAliveSql('m', '$2')} AS dead FROM instances m WHERE instance_id = $1`, [id, 3 * 300])).rows[0]?.dead === true;
    let kills = 0;
    for (const victim of [1, 2, 0]) {
      await pace(1500); // the kill cadence (the shape of the fault load): the replicas work 1.5 s between kills
      replicas[victim]!.proc.kill('SIGKILL');
      await replicas[victim]!.exited;
      kills++;
      // Back once the cluster counts the old process dead: survivors take over from a dead replica, not a live one.
      await waitFor(() => seenDead(`b${victim}`), { what: `the cluster to count the killed replica b${victim} dead` });
      await cluster.replica(victim).restart(false);
      replicas[victim] = cluster.replica(victim).proc;
      await cluster.replica(victim).waitHealthy();
    }
    await hooks;

    // Wait for the work to finish: no pending order, every reminder sent.
    // A margin for a loaded two-core machine (quiet, the work ends within seconds of the last kill);
    // past it, the assertions below say what is missing.
    await waitFor(
      async () => {
        const { rows } = await sql.query(
          `SELECT (SELECT count(*) FROM payment_orders WHERE status = 'pending')::int AS pending,
                  (SELECT count(*) FROM notification_deliveries WHERE status = 'sent')::int AS sent`,
        );
        return rows[0].pending === 0 && rows[0].sent === N;
      },
      { what: 'no pending order and every reminder sent', timeoutMs: 150_000, intervalMs: 500 },
    ).catch(() => undefined);
    const stats = await sql.query(`SELECT status, count(*)::int AS n, max(last_error) AS err, max(attempts) AS attempts FROM notification_deliveries GROUP BY status`);
    const runs = await sql.query(`SELECT job_name, status, count(*)::int AS n, max(error) AS err FROM job_runs GROUP BY 1, 2 ORDER BY 1, 2`);
    console.log(JSON.stringify(stats.rows), JSON.stringify(runs.rows));
    for (const r of replicas) r.proc.kill('SIGTERM');
    const codes = await Promise.all(replicas.map((r) => r.exited));
    expect(codes).toEqual([0, 0, 0]);

    // Reminders: one Message-ID per subscription; a resend after a kill between SMTP accept and
    // the "sent" record carries the same Message-ID (counted, bounded by the kills).
    const ids = smtp.received.map((m) => m.messageId);
    const distinct = new Set(ids);
    expect(distinct.size).toBe(N);
    const dupes = ids.length - distinct.size;
    expect(dupes).toBeLessThanOrEqual(kills);
    const perSub = await sql.query(`SELECT (params->>'subscription_id')::int AS s, count(*)::int AS n FROM notification_deliveries WHERE status = 'sent' GROUP BY 1 HAVING count(*) <> 1`);
    expect(perSub.rows).toEqual([]);

    // Orders: paid exactly when the provider says so, each credited once, the rest expired.
    const { rows } = await sql.query(`SELECT provider_order_id AS id, status FROM payment_orders`);
    const status = new Map(rows.map((r) => [r.id, r.status]));
    for (const o of orders) expect(status.get(o.id), `${o.id} (${o.kind})`).toBe(o.kind === 'unpaid' ? 'expired' : 'paid');
    const credits = await sql.query(`SELECT order_id, count(*)::int AS n FROM payment_order_events WHERE event IN ('paid', 'paid_after_expiry') GROUP BY order_id HAVING count(*) <> 1`);
    expect(credits.rows).toEqual([]);
    const money = await sql.query(
      `SELECT (SELECT coalesce(sum(balance), 0) FROM billing_users)::bigint AS balances, (SELECT coalesce(sum(amount), 0) FROM payment_orders WHERE status = 'paid')::bigint AS paid`,
    );
    expect(Number(money.rows[0].balances)).toBe(Number(money.rows[0].paid));
    const expectedPaid = orders.filter((o) => o.kind !== 'unpaid').reduce((s, o) => s + o.amount, 0);
    expect(Number(money.rows[0].paid)).toBe(expectedPaid);
    console.log(`billing e2e: ${smtp.received.length} mails (${dupes} resent after a kill), ${orders.filter((o) => o.kind !== 'unpaid').length} orders paid, ${kills} SIGKILLs`);
  }, 300_000);
});
