import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { loadConfig } from '../src/app/config-schema.js';
import { ConfigError } from '../src/config/errors.js';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import type { Db } from '../src/store/db.js';
import { Notifications } from '../src/areas/notifications/store/notifications.js';
import { ChannelBudget } from '../src/areas/notifications/store/channel-budget.js';
import { OpsMetricsStore } from '../src/areas/ops/store/ops-metrics.js';
import { Notifier } from '../src/areas/notifications/notifier.js';
import { WebhookChannel } from '../src/areas/notifications/channels.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { BACKENDS } from './helpers/backends.js';
import { freshDatabase } from './helpers/services.js';
import { pace, waitFor } from './helpers/wait.js';
import { NotificationMetrics } from '../src/areas/notifications/metrics.js';

function configProblems(env: Record<string, string>): string {
  try {
    loadConfig({ env });
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems.join('\n');
  }
  throw new Error('expected a ConfigError');
}

describe('notify.rate_limit config', () => {
  it('defaults to unlimited per channel; a bad count or period is refused naming the key', () => {
    expect(loadConfig({ env: {} }).notify.rate_limit).toEqual({ email: { count: 0, period: 60_000 }, webhook: { count: 0, period: 60_000 } });
    expect(loadConfig({ env: { RELAY_JOBS__NOTIFY__RATE_LIMIT__WEBHOOK__COUNT: '3', RELAY_JOBS__NOTIFY__RATE_LIMIT__WEBHOOK__PERIOD: '2s' } }).notify.rate_limit.webhook).toEqual({
      count: 3,
      period: 2000,
    });
    expect(configProblems({ RELAY_JOBS__NOTIFY__RATE_LIMIT__WEBHOOK__COUNT: '-1' })).toMatch(/notify\.rate_limit\.webhook\.count .*expected 0 \(unlimited\) or a positive whole number/);
    expect(configProblems({ RELAY_JOBS__NOTIFY__RATE_LIMIT__EMAIL__COUNT: '2.5' })).toMatch(/notify\.rate_limit\.email\.count .*expected a whole number/);
    expect(configProblems({ RELAY_JOBS__NOTIFY__RATE_LIMIT__EMAIL__COUNT: 'many' })).toMatch(/notify\.rate_limit\.email\.count/);
    expect(configProblems({ RELAY_JOBS__NOTIFY__RATE_LIMIT__WEBHOOK__PERIOD: '0s' })).toMatch(/notify\.rate_limit\.webhook\.period .*greater than zero/);
    expect(configProblems({ RELAY_JOBS__NOTIFY__RATE_LIMIT__SMS__COUNT: '1' })).toMatch(/notify\.rate_limit\.sms .*unknown key/);
  });
});

describe.each(BACKENDS)('channel budget ($name)', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => ({ db, cleanup } = await backend.open()));
  afterAll(() => cleanup());

  it('gives out count slots; a slot frees one period after its send is settled, or when a dead sender’s hold lapses', async () => {
    const budget = new ChannelBudget(db);
    const a = await budget.take('webhook', 2, 60_000);
    const b = await budget.take('webhook', 2, 300);
    expect('token' in a && 'token' in b).toBe(true);
    const full = await budget.take('webhook', 2, 60_000);
    expect(full).toEqual({ retryAt: expect.any(Date) });
    expect(await budget.take('email', 2, 60_000)).toHaveProperty('token'); // channels do not share a budget
    // b's sender "died" without settling: its slot comes back when its hold lapses, at the time the refusal named.
    const c = await waitFor(
      async () => {
        const t = await budget.take('webhook', 2, 60_000);
        return 'token' in t ? t : null;
      },
      { what: 'the dead sender’s slot' },
    );
    expect(c).toHaveProperty('token');
    // a settles: its slot is held for one more period from now, not freed.
    await budget.settle('webhook', (a as { token: string }).token, 60_000);
    expect(await budget.take('webhook', 2, 60_000)).toHaveProperty('retryAt');
  });
});

/** Two delivery loops ("replicas") on one database share the limit; a loopback webhook server counts what arrives. */
describe('cluster-wide rate limit across replicas (PostgreSQL)', () => {
  const COUNT = 3;
  const PERIOD = 2000;
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  let server: Server;
  let url: string;
  const arrivals: Array<{ key: string; at: number }> = [];
  const replicas: Array<{ db: PgDb; notifier: Notifier; notifications: Notifications; metrics: Metrics }> = [];

  beforeAll(async () => {
    fresh = await freshDatabase({ migrated: true });
    server = createServer((req, res) => {
      const at = Date.now(); // arrival: after the sender took its slot, before it settles it
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        arrivals.push({ key: JSON.parse(body).key, at });
        // Answer after a varying delay, so sends of the two replicas overlap.
        setTimeout(
          () => {
            res.writeHead(204);
            res.end();
          },
          (arrivals.length * 37) % 120,
        );
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`;
    for (let i = 0; i < 2; i++) {
      const db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
      if (i === 0) await migrate(db);
      const notifications = new Notifications(db);
      const metrics = new Metrics({ defaultMetrics: false });
      const notifier = new Notifier(
        notifications,
        new ChannelBudget(db),
        new Map([['webhook', new WebhookChannel({ url }, 2000)]]),
        { perSecond: 100, rateLimits: { webhook: { count: COUNT, periodMs: PERIOD } }, maxAttempts: 5, retryBaseMs: 1000, batch: 100, sendTimeoutMs: 2000 },
        systemClock,
        metrics,
        silentLogger(),
      );
      replicas.push({ db, notifier, notifications, metrics });
    }
  });
  afterAll(async () => {
    for (const r of replicas) await r.db.close();
    await new Promise((r) => server.close(r));
    await fresh.drop();
  });

  it(`never more than ${COUNT} per ${PERIOD} ms across both replicas; all 10 arrive, once each; refusals are deferrals, not attempts`, async () => {
    const [a, b] = replicas;
    const keys = Array.from({ length: 10 }, (_, i) => `rl-${i}`);
    for (const key of keys) {
      await a!.db.query(`INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params) VALUES ($1, 'webhook', 'ops', 'ops_alert', $2)`, [key, { subject: key, text: 'x' }]);
    }
    // One round of one replica: the budget lets 3 through and puts the rest back as rate-limited.
    const first = await a!.notifier.deliverDue('replica-a', async () => null);
    expect(first).toMatchObject({ sent: COUNT, failed: 0, rate_limited: 10 - COUNT });
    expect((await a!.notifications.backlog()).webhook).toEqual({ backlog: 10 - COUNT, rate_limited: 10 - COUNT });
    expect((await new OpsMetricsStore(a!.db).stateCounts()).notification_rate_limited).toBe(10 - COUNT);

    // Both replicas deliver in loops until the outbox is empty (bounded by the wait's deadline).
    let stop = false;
    const loop = async (r: (typeof replicas)[number], owner: string) => {
      while (!stop) {
        await r.notifier.deliverDue(owner, async () => null);
        await pace(25);
      }
    };
    const loops = [loop(a!, 'replica-a'), loop(b!, 'replica-b')];
    try {
      await waitFor(async () => Number((await a!.db.query<{ n: string }>(`SELECT count(*) AS n FROM notification_deliveries WHERE status = 'sent'`)).rows[0]!.n) === 10, {
        what: 'every delivery sent',
        timeoutMs: 60_000,
      });
    } finally {
      stop = true;
      await Promise.all(loops);
    }

    // Exactly once each.
    expect(arrivals.map((x) => x.key).sort()).toEqual([...keys].sort());
    // No PERIOD-long interval saw more than COUNT arrivals: any COUNT+1 consecutive arrivals span at least PERIOD.
    const at = arrivals.map((x) => x.at).sort((x, y) => x - y);
    for (let i = 0; i + COUNT < at.length; i++) expect(at[i + COUNT]! - at[i]!, `arrivals ${i}..${i + COUNT}`).toBeGreaterThanOrEqual(PERIOD);
    // Deferred by the limit, never counted as attempts or failures.
    const rows = (await a!.db.query<{ attempts: number; deferrals: number; rate_limited: boolean }>(`SELECT attempts, deferrals, rate_limited FROM notification_deliveries`)).rows;
    expect(rows.every((r) => Number(r.attempts) === 1 && r.rate_limited === false)).toBe(true);
    expect(rows.reduce((n, r) => n + Number(r.deferrals), 0)).toBeGreaterThanOrEqual(10 - COUNT);
    const deferred = async (m: Metrics) => (await m.group(NotificationMetrics).notifyDeferred.get()).values.filter((v) => v.labels.reason === 'rate_limit').reduce((n, v) => n + v.value, 0);
    expect((await deferred(a!.metrics)) + (await deferred(b!.metrics))).toBeGreaterThanOrEqual(10 - COUNT);
    expect((await a!.metrics.group(NotificationMetrics).notifyFailures.get()).values.reduce((n, v) => n + v.value, 0)).toBe(0);
  }, 90_000);
});
