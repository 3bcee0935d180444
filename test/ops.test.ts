import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createServer, type Server } from 'node:http';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { FencedWriteRefused } from '../src/coordination/fenced-cursor.js';
import { percentile } from '../src/areas/ops/catalogue.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { SteppedClock } from './helpers/stepped-clock.js';

const ADMIN = 'ops-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
const HOUR = 3_600_000;
/** The ops plane in one process against real PostgreSQL and Redis, with a loopback webhook receiver. */
describe('ops plane', () => {
  const prefix = uniqueName('rjops');
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let rt: Runtime;
  // The jobs read this clock: the reports test steps it past cron occurrences instead of sleeping through them.
  const clock = new SteppedClock();
  let http: FastifyInstance;
  let hookServer: Server;
  const hooks: Array<{ key: string; subject: string; text: string }> = [];
  const api = (method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE', url: string, payload?: unknown) => http.inject({ method, url: `/api/v1${url}`, headers: auth, payload: payload as object });

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    hookServer = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        hooks.push(JSON.parse(body));
        res.writeHead(204);
        res.end();
      });
    });
    await new Promise<void>((r) => hookServer.listen(0, '127.0.0.1', r));
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'ops-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__OPS__BUCKET: '1h',
        RELAY_JOBS__NOTIFY__WEBHOOK__URL: `http://127.0.0.1:${(hookServer.address() as { port: number }).port}/hook`,
        RELAY_JOBS__NOTIFY__PER_SECOND: '100',
        RELAY_JOBS__NOTIFY__SEND_TIMEOUT: '2s',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger(), clock });
    http = buildHttpServer(rt);
    await http.ready();
  });
  afterAll(async () => {
    await rt.shutdown();
    await http.close();
    await sql.end();
    await new Promise((r) => hookServer.close(r));
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('ops_metrics records the previous bucket: counts, 5xx and 429 apart, percentiles equal to a reference', async () => {
    // Stay clear of an hour boundary so the manual round's bucket is the one the rows are in.
    await waitFor(() => clock.now() % HOUR <= HOUR - 10_000 && clock.now() % HOUR >= 2000, { what: 'a moment clear of an hour boundary', intervalMs: 500 });
    const bucket = Math.floor(Date.now() / HOUR) * HOUR - HOUR;
    const latencies = Array.from({ length: 301 }, (_, i) => ((i * 7919) % 2000) + 1);
    const rows = latencies.map((l, i) => ({
      request_id: `r${i}`,
      user_id: 'u1',
      api_key_id: null,
      account_id: `a${i % 3}`,
      platform: 'claude',
      model: 'm',
      input_tokens: 10,
      output_tokens: 20,
      cache_tokens: 0,
      cost: '0.01',
      latency_ms: l,
      status_code: i % 10 === 0 ? 500 : i % 10 === 1 ? 429 : 200,
      created_at: new Date(bucket + ((i * 1000) % HOUR)).toISOString(),
    }));
    rows.push({ ...rows[0]!, request_id: 'outside', created_at: new Date(bucket - 1).toISOString() });
    await rt.services.usageStore.insert(rows);
    expect(outcomeOf(await rt.runNow('ops_metrics'))?.status).toBe('ok');
    const { rows: got } = await sql.query(`SELECT metrics FROM ops_metrics_minute WHERE bucket = $1`, [new Date(bucket)]);
    const m = got[0].metrics;
    const sorted = [...latencies].sort((a, b) => a - b);
    expect(m.request_count).toBe(301);
    expect(m.error_count).toBe(31);
    expect(m.rate_limit_count).toBe(30);
    expect(m.error_rate).toBeCloseTo(31 / 301);
    expect(m.input_tokens).toBe(3010);
    expect(m.p50_latency_ms).toBeCloseTo(percentile(sorted, 0.5)!, 2);
    expect(m.p95_latency_ms).toBeCloseTo(percentile(sorted, 0.95)!, 2);
    expect(m.p99_latency_ms).toBeCloseTo(percentile(sorted, 0.99)!, 2);
    expect(m.jobs_failing).toBeTypeOf('number');
    expect(m.redis_latency_ms).toBeTypeOf('number');
    const res = await api('GET', `/ops/metrics?from=${new Date(bucket - HOUR).toISOString()}&to=${new Date(bucket + HOUR).toISOString()}`);
    expect(res.json().step).toBe('minute');
    expect(res.json().points).toHaveLength(1);
  });

  it('bad rules, silences, reports and retention are refused with the field named, nothing stored', async () => {
    const ok = { name: 'r', metric: 'error_rate', operator: '>', threshold: 0.1, window: '1h', severity: 'warning' };
    const cases: Array<[string, object, string]> = [
      ['/ops/alert-rules', { ...ok, metric: 'nope' }, 'metric'],
      ['/ops/alert-rules', { ...ok, operator: '=>' }, 'operator'],
      ['/ops/alert-rules', { ...ok, window: '5m' }, 'window'],
      ['/ops/alert-rules', { ...ok, window: '30d' }, 'window'],
      ['/ops/alert-rules', { ...ok, sustained: 1.5 }, 'sustained'],
      ['/ops/alert-rules', { ...ok, extra: 1 }, 'extra'],
      ['/ops/silences', { rule_id: null, matchers: { team: 'x' }, starts_at: '2026-12-01T10:00:00Z', ends_at: '2026-12-01T09:00:00Z', reason: 'r', author: 'a' }, 'ends_at'],
      ['/ops/silences', { ends_at: '2099-12-01T09:00:00Z', reason: 'r', author: 'a' }, 'matchers'],
      ['/ops/reports', { name: 'x', kind: 'daily_summary', cron: '0 0 30 2 *', recipients: ['webhook'] }, 'cron'],
      ['/ops/reports', { name: 'x', kind: 'daily_summary', cron: '0 9 * * *', timezone: 'Mars/Base', recipients: ['webhook'] }, 'timezone'],
      ['/ops/reports', { name: 'x', kind: 'weekly', cron: '0 9 * * *', recipients: ['webhook'] }, 'kind'],
    ];
    for (const [url, body, field] of cases) {
      const res = await api('POST', url, body);
      expect(res.statusCode, `${url} ${JSON.stringify(body)}`).toBe(400);
      expect(
        res
          .json()
          .error.fields.map((f: { field: string }) => f.field)
          .join(' '),
        JSON.stringify(body),
      ).toContain(field);
    }
    for (const bad of [{ ops_metrics_minute: -2 }, { ops_metrics_minute: 1.5 }, { nope: 3 }]) {
      const res = await api('PUT', '/ops/retention', bad);
      expect(res.statusCode).toBe(400);
      expect(res.json().error.fields[0].field).toContain(Object.keys(bad)[0]);
    }
    const counts = await sql.query(
      `SELECT (SELECT count(*) FROM ops_alert_rules) + (SELECT count(*) FROM ops_silences) + (SELECT count(*) FROM ops_reports) + (SELECT count(*) FROM ops_retention) AS n`,
    );
    expect(Number(counts.rows[0].n)).toBe(0);
  });

  it('a rule fires after its sustain, once, with one webhook per transition; silences hold notices; stale tokens are fenced', async () => {
    await sql.query(`DELETE FROM ops_metrics_minute`);
    const rule = (
      await api('POST', '/ops/alert-rules', { name: 'errors', metric: 'error_rate', operator: '>', threshold: 0.2, window: '1h', sustained: 3, severity: 'critical', labels: { team: 'relay' } })
    ).json();
    expect(rule.id).toBeTypeOf('number');
    await api('POST', '/ops/alert-rules', { name: 'quiet', metric: 'request_count', operator: '>', threshold: 0, window: '1h', sustained: 1, severity: 'warning', labels: { team: 'muted' } });
    expect((await api('POST', '/ops/silences', { matchers: { team: 'muted' }, ends_at: new Date(Date.now() + HOUR).toISOString(), reason: 'maintenance', author: 'ops' })).statusCode).toBe(201);
    const b0 = Math.floor(Date.now() / HOUR) * HOUR - HOUR;
    const put = (i: number, errors: number) =>
      sql.query(`INSERT INTO ops_metrics_minute (bucket, bucket_seconds, metrics, fencing_token) VALUES ($1, 3600, $2, 0)`, [new Date(b0 + i * HOUR), { request_count: 100, error_count: errors }]);
    const evaluate = async () => outcomeOf(await rt.runNow('ops_alert_evaluator'));
    const streak = async () => Number((await sql.query(`SELECT streak FROM ops_alert_state WHERE rule_id = $1`, [rule.id])).rows[0]?.streak ?? 0);
    await put(0, 50);
    await evaluate();
    await evaluate(); // same bucket again: not counted twice
    expect(await streak()).toBe(1);
    await put(1, 50);
    await evaluate();
    expect(await streak()).toBe(2);
    expect((await api('GET', '/ops/alert-events?state=firing')).json().events.filter((e: { rule_id: number }) => e.rule_id === rule.id)).toHaveLength(0);
    await put(2, 50);
    await evaluate();
    await evaluate();
    const firing = (await api('GET', '/ops/alert-events?state=firing')).json().events;
    expect(firing.map((e: { rule_name: string }) => e.rule_name).sort()).toEqual(['errors', 'quiet']);
    expect(firing.find((e: { rule_name: string }) => e.rule_name === 'quiet').silenced).toBe(true);
    const event = firing.find((e: { rule_name: string }) => e.rule_name === 'errors');
    await waitFor(async () => hooks.some((h) => h.key === `ops-alert:${event.id}:firing:webhook:ops`), { what: 'the firing webhook' });
    expect(hooks.filter((h) => h.key.startsWith('ops-alert:')).map((h) => h.key)).toEqual([`ops-alert:${event.id}:firing:webhook:ops`]);
    expect(hooks[0]!.subject).toContain('FIRING');

    // A round with a token older than the job's newest cannot write the state.
    const { rows } = await sql.query(`SELECT fencing_token FROM job_state WHERE job_name = 'ops_alert_evaluator'`);
    await expect(
      rt.services.ops.alerts.apply({ job: 'ops_alert_evaluator', token: Number(rows[0].fencing_token) - 1, ruleId: rule.id, streak: 0, lastBucket: null, resolvedAt: null }, null, () => []),
    ).rejects.toBeInstanceOf(FencedWriteRefused);
    await expect(rt.services.ops.alerts.applyStreaks('ops_alert_evaluator', Number(rows[0].fencing_token) - 1, [{ ruleId: rule.id, streak: 0, lastBucket: null }])).rejects.toBeInstanceOf(
      FencedWriteRefused,
    );
    expect(await streak()).toBe(3);

    await put(3, 1);
    await evaluate();
    const ev = (await api('GET', '/ops/alert-events?state=resolved')).json().events.find((e: { id: number }) => e.id === event.id);
    expect(ev.resolved_at).toBeTruthy();
    await waitFor(async () => hooks.some((h) => h.key === `ops-alert:${event.id}:resolved:webhook:ops`), { what: 'the resolved webhook' });
    await evaluate();
    expect(hooks.filter((h) => h.key.startsWith('ops-alert:')).length).toBe(2);
    const o = (await api('GET', '/ops/overview')).json();
    expect(o.firing_alerts.map((e: { rule_name: string }) => e.rule_name)).toEqual(['quiet']);
    expect(o.health_parts).toHaveProperty('jobs');
    // The channel view carries the outbox backlog and the (unset, so unlimited) cluster-wide rate limit.
    expect((await api('GET', '/notifications/channels')).json().channels.webhook).toMatchObject({ up: true, rate_limit: null, backlog: 0, rate_limited: 0 });
  });

  it('scheduled reports: each occurrence recorded once, downtime coalesced into one, empty ones skipped', async () => {
    // A daily summary reads hourly rollups (a long range reads rollups only).
    expect(outcomeOf(await rt.runNow('ops_aggregation'))?.status).toBe('ok');
    const digest = (await api('POST', '/ops/reports', { name: 'digest', kind: 'error_digest', cron: '* * * * * *', recipients: ['webhook'], params: { min_count: 1_000_000 } })).json();
    const daily = (await api('POST', '/ops/reports', { name: 'daily', kind: 'daily_summary', cron: '* * * * * *', recipients: ['webhook', 'ops@example.test'] })).json();
    clock.advance(1100); // past at least one per-second occurrence since the reports were created
    await rt.runNow('scheduled_reports');
    clock.advance(3100); // three more: the newest is queued, the ones before it coalesced
    await rt.runNow('scheduled_reports');
    const runs = (id: number) => sql.query(`SELECT occurrence, status FROM ops_report_runs WHERE report_id = $1 ORDER BY occurrence`, [id]).then((r) => r.rows);
    const d = await runs(daily.id);
    expect(d.filter((r) => r.status === 'queued')).toHaveLength(2);
    expect(d.filter((r) => r.status === 'coalesced').length).toBeGreaterThanOrEqual(1);
    expect((await runs(digest.id)).filter((r) => r.status !== 'coalesced').map((r) => r.status)).toEqual(['skipped_empty', 'skipped_empty']);
    const queued = d.filter((r) => r.status === 'queued').map((r) => `ops-report:${daily.id}:${new Date(r.occurrence).toISOString()}:webhook:webhook`);
    await waitFor(async () => queued.every((k) => hooks.some((h) => h.key === k)), { what: 'report webhooks' });
    expect(
      hooks
        .filter((h) => h.key.startsWith(`ops-report:${daily.id}:`))
        .map((h) => h.key)
        .sort(),
    ).toEqual(queued.sort());
    expect(hooks.filter((h) => h.key.startsWith(`ops-report:${digest.id}:`))).toHaveLength(0);
    // E-mail is not configured: no intent was recorded for the mail recipient.
    expect(Number((await sql.query(`SELECT count(*) AS n FROM notification_deliveries WHERE channel = 'email'`)).rows[0].n)).toBe(0);
    await api('PATCH', `/ops/reports/${daily.id}`, { enabled: false });
    await api('PATCH', `/ops/reports/${digest.id}`, { enabled: false });
  });

  it('ops_aggregation rolls minutes up; ops_cleanup honours API retention and reports a failing target', async () => {
    expect(outcomeOf(await rt.runNow('ops_aggregation'))?.status).toBe('ok');
    expect(Number((await sql.query(`SELECT count(*) AS n FROM ops_metrics_hourly`)).rows[0].n)).toBeGreaterThan(0);
    expect((await api('PUT', '/ops/retention', { ops_metrics_minute: 0, ops_metrics_hourly: -1 })).statusCode).toBe(200);
    await sql.query(`ALTER TABLE canary_runs RENAME TO canary_runs_moved`);
    try {
      const out = outcomeOf(await rt.runNow('ops_cleanup'));
      expect(out?.status).toBe('failed');
      expect(out?.error).toMatch(/canary_runs: FAILED/);
      expect(out?.error).toMatch(/ops_metrics_hourly: skipped/);
    } finally {
      await sql.query(`ALTER TABLE canary_runs_moved RENAME TO canary_runs`);
    }
    // 0 empties what the aggregation covered, never past its watermark: only minutes not rolled up yet stay.
    const { rows: left } = await sql.query<{ covered: number; uncovered: number }>(
      `SELECT count(*) FILTER (WHERE bucket < (SELECT (value #>> '{}')::timestamptz FROM job_cursors WHERE job_name = 'ops_aggregation' AND key = 'hourly_watermark'))::int AS covered,
              count(*) FILTER (WHERE bucket >= (SELECT (value #>> '{}')::timestamptz FROM job_cursors WHERE job_name = 'ops_aggregation' AND key = 'hourly_watermark'))::int AS uncovered
         FROM ops_metrics_minute`,
    );
    expect(left[0]!.covered).toBe(0);
    expect(Number((await sql.query(`SELECT count(*) AS n FROM ops_metrics_hourly`)).rows[0].n)).toBeGreaterThan(0);
    expect(outcomeOf(await rt.runNow('ops_cleanup'))?.status).not.toBe('failed');
  });
});
