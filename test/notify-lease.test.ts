import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { Notifications } from '../src/areas/notifications/store/notifications.js';
import { ChannelBudget } from '../src/areas/notifications/store/channel-budget.js';
import { Notifier, type NotifierSettings } from '../src/areas/notifications/notifier.js';
import { WebhookChannel } from '../src/areas/notifications/channels.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { freshDatabase } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

/**
 * A sender whose claim lapses while it is still alive and working through its chunk (here: its
 * per-process smoothing makes the chunk outlast the lease) must not send a row another replica
 * has taken over since: it re-takes each row under its claim just before the POST, and a row
 * taken over is dropped, not sent a second time. Real PostgreSQL, a loopback webhook receiver.
 */
describe('notification outbox: a lapsed claim is fenced (PostgreSQL)', () => {
  const SEND_TIMEOUT = 150; // the chunk's lease: 12 × 150 ms = 1.8 s
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let server: Server;
  const arrivals: string[] = [];
  const dbs: PgDb[] = [];
  const notifier = (db: PgDb, perSecond: number) =>
    new Notifier(
      new Notifications(db),
      new ChannelBudget(db),
      new Map([['webhook', new WebhookChannel({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook` }, 5000)]]),
      { perSecond, rateLimits: {}, maxAttempts: 5, retryBaseMs: 1000, batch: 10, sendTimeoutMs: SEND_TIMEOUT } satisfies NotifierSettings,
      systemClock,
      new Metrics({ defaultMetrics: false }),
      silentLogger(),
    );

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        arrivals.push(String(req.headers['idempotency-key']));
        res.writeHead(204);
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    for (let i = 0; i < 2; i++) dbs.push(await PgDb.connect({ url: fresh.url, poolSize: 2, connectTimeoutMs: 5000 }));
    await migrate(dbs[0]!);
  });
  afterAll(async () => {
    for (const db of dbs) await db.close();
    await new Promise((r) => server.close(r));
    await fresh.drop();
  });

  it('a row taken over after the lease lapsed is sent once: the slow first claimer drops it', async () => {
    const [dbA, dbB] = dbs as [PgDb, PgDb];
    const keys = Array.from({ length: 10 }, (_, i) => `lease-${i}`);
    for (const key of keys)
      await dbA.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ($1, 'webhook', 'ops', 'ops_alert', $2)`, [key, { subject: key, text: 'x' }]);
    // A: 2 sends a second (a burst of 2, then one every 500 ms): its chunk of 10 takes about 4 s, past its 1.8 s lease.
    const a = notifier(dbA, 2).deliverDue('replica-a', async () => null);
    // B claims what A still holds the moment A's lease has lapsed (A is alive: no crash, only a slow chunk).
    await waitFor(async () => (await dbB.query(`SELECT 1 FROM notification_deliveries WHERE status = 'sending' AND claimed_until <= clock_timestamp()`)).rowCount > 0, {
      what: 'A’s lease lapsed',
      timeoutMs: 10_000,
    });
    const b = await notifier(dbB, 100).deliverDue('replica-b', async () => null);
    const outA = await a;
    expect(b.sent).toBeGreaterThan(0); // B did take rows over
    // Every key arrived exactly once, and both senders' counts add up to the ten deliveries.
    const dup = arrivals.filter((k, i) => arrivals.indexOf(k) !== i);
    expect(dup, `arrivals: ${arrivals.join(',')}`).toEqual([]);
    expect([...arrivals].sort()).toEqual([...keys].sort());
    expect(outA.sent + b.sent).toBe(10);
    const rows = (await dbA.query<{ status: string; attempts: number }>(`SELECT status, attempts FROM notification_deliveries`)).rows;
    expect(rows.every((r) => r.status === 'sent' && Number(r.attempts) === 1)).toBe(true);
  }, 30_000);

  it('a stale holder’s failure, release or record writes nothing over the row’s new holder', async () => {
    const [dbA, dbB] = dbs as [PgDb, PgDb];
    await dbA.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ('stale-1', 'webhook', 'ops', 'ops_alert', '{}')`);
    const a = new Notifications(dbA);
    const b = new Notifications(dbB);
    const [mine] = await a.claim('replica-a', 1, 100, null, []);
    await waitFor(async () => (await dbB.query(`SELECT 1 FROM notification_deliveries WHERE id = $1 AND claimed_until <= clock_timestamp()`, [mine!.id])).rowCount > 0, {
      what: 'A’s lease lapsed',
    });
    const [theirs] = await b.claim('replica-a', 1, 60_000, null, []);
    expect(theirs!.id).toBe(mine!.id);
    // Same owner name (two jobs of one replica), a new claim: the token still tells them apart.
    expect(await a.hold(mine!.id, mine!.claim, 60_000)).toBe(false);
    expect(await a.failed(mine!.id, mine!.claim, 'timed out', 1000, 5)).toBe('lost');
    await a.release(mine!.id, mine!.claim, 0);
    expect(await b.sent(theirs!.id, theirs!.claim)).toBe(true);
    expect(await a.sent(mine!.id, mine!.claim)).toBe(false);
    const row = (await dbA.query<{ status: string; attempts: number; last_error: string | null }>(`SELECT status, attempts, last_error FROM notification_deliveries WHERE id = $1`, [mine!.id]))
      .rows[0]!;
    expect({ ...row, attempts: Number(row.attempts) }).toEqual({ status: 'sent', attempts: 1, last_error: null });
  });
});
