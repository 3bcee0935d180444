import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { createServer, type Server } from 'node:http';
import pg from 'pg';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { FencedWriteRefused } from '../src/coordination/fenced-cursor.js';
import { outcomeOf } from './helpers/rounds.js';
import { ChatUpstream } from './fixtures/chat-upstream.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';
import { systemClock } from '../src/time/clock.js';

const ADMIN = 'monitor-alerts-admin-token-0123456789';
const auth = { authorization: `Bearer ${ADMIN}` };
interface Event {
  id: number;
  rule_id: number;
  rule_name: string;
  series: string;
  state: string;
  value: number | null;
  labels: Record<string, string>;
}

/**
 * Ops alert rules over channel monitors, on real PostgreSQL with real probes against the loopback
 * chat-completions upstream. `ops.bucket` is 1 s, so each evaluation that sees a newer probe is a
 * new bucket; evaluator rounds are run by hand, and every wait polls for its condition.
 */
describe('alerting on monitors (real PostgreSQL, loopback upstream)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  let up: ChatUpstream;
  let rt: Runtime;
  let http: FastifyInstance;
  let hookServer: Server;
  const hooks: Array<{ key: string; subject: string; text: string }> = [];
  const prefix = uniqueName('rjmonalert');
  const ids: Record<string, number> = {};
  const api = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: unknown) => http.inject({ method, url: `/api/v1${url}`, headers: auth, payload: payload as object });
  const fields = (res: { json: () => { error: { fields: Array<{ field: string }> } } }) => res.json().error.fields.map((f) => f.field);
  const evaluate = async () => expect(outcomeOf(await rt.runNow('ops_alert_evaluator'))?.status).not.toBe('failed');
  const events = async (ruleId: number): Promise<Event[]> => (await api('GET', '/ops/alert-events?limit=1000')).json().events.filter((e: Event) => e.rule_id === ruleId);
  const states = async (ruleId: number) =>
    Object.fromEntries((await sql.query(`SELECT series, streak FROM ops_alert_state WHERE rule_id = $1`, [ruleId])).rows.map((r) => [r.series as string, Number(r.streak)]));
  const dbNow = async () => (await sql.query(`SELECT now() AS t`)).rows[0].t as Date;
  const newestResult = async (monitor: number, ok?: boolean) =>
    (await sql.query(`SELECT max(started_at) AS t FROM monitor_results WHERE monitor_id = $1 AND ($2::boolean IS NULL OR ok = $2)`, [monitor, ok ?? null])).rows[0].t as Date | null;
  const rule = (name: string, extra: Record<string, unknown>) => ({ name, metric: 'monitor_availability', operator: '<', threshold: 95, window: '5s', sustained: 2, severity: 'critical', ...extra });

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    up = await ChatUpstream.start();
    up.addApiKey('ka', 'kb', 'kc'); // the monitors' keys, below: the fake refuses a key it was not told of
    hookServer = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        hooks.push(JSON.parse(body));
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => hookServer.listen(0, '127.0.0.1', r));
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'monalert-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__OPS__BUCKET: '1s',
        RELAY_JOBS__CHANNEL_MONITOR__MIN_INTERVAL: '1s',
        RELAY_JOBS__CHANNEL_MONITOR__POLL_INTERVAL: '100ms',
        RELAY_JOBS__CHANNEL_MONITOR__LEASE_GRACE: '1s',
        RELAY_JOBS__NOTIFY__WEBHOOK__URL: `http://127.0.0.1:${(hookServer.address() as { port: number }).port}/hook`,
        RELAY_JOBS__NOTIFY__PER_SECOND: '100',
        RELAY_JOBS__NOTIFY__SEND_TIMEOUT: '2s',
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
    const monitors: Array<[string, string, Record<string, string>, string]> = [
      ['mon-a', 'ka', { tier: 'paid', region: 'eu' }, '1s'],
      ['mon-b', 'kb', { tier: 'paid', region: 'us' }, '1s'],
      ['mon-c', 'kc', { tier: 'free' }, '1h'],
    ];
    for (const [name, key, labels, interval] of monitors) {
      const res = await api('POST', '/monitors', { name, base_url: up.url, model: 'gpt-probe', api_key: key, interval, timeout: '800ms', labels });
      expect(res.statusCode, res.body).toBe(201);
      ids[name] = res.json().id;
    }
  });
  afterAll(async () => {
    await rt.services.monitorRunner.stop(Deadline.within(systemClock, 2000));
    await rt.shutdown();
    await http.close();
    await up.close();
    await sql.end();
    await new Promise((r) => hookServer.close(r));
    await db.drop();
    await dropRedisPrefix(prefix);
  });

  it('refuses bad monitor rules with 400 naming the field; a label selector may match nothing yet', async () => {
    const cases: Array<[object, string]> = [
      [rule('r', { metric: 'error_rate', selector: { monitor: 'mon-a' } }), 'selector'],
      [rule('r', { metric: 'monitor_uptime' }), 'metric'],
      [rule('r', { selector: { monitor: 'no-such-monitor' } }), 'selector.monitor'],
      [rule('r', { selector: { monitor_id: 999_999 } }), 'selector.monitor_id'],
      [rule('r', { selector: { monitor_id: ids['mon-a'], monitor: 'mon-b' } }), 'selector.monitor'],
      [rule('r', { selector: { monitor_id: 1.5 } }), 'selector.monitor_id'],
      [rule('r', { selector: { colour: 'red' } }), 'selector.colour'],
      [rule('r', { selector: { labels: { 'not a label': 'x' } } }), 'selector.labels'],
      [rule('r', { labels: { monitor: 'mon-a' } }), 'labels.monitor'],
      [rule('r', { window: '60d' }), 'window'],
    ];
    for (const [body, field] of cases) {
      const res = await api('POST', '/ops/alert-rules', body);
      expect(res.statusCode, `${JSON.stringify(body)} → ${res.body}`).toBe(400);
      expect(fields(res).join(' '), JSON.stringify(body)).toContain(field);
    }
    expect(Number((await sql.query(`SELECT count(*) AS n FROM ops_alert_rules`)).rows[0].n)).toBe(0);

    const later = await api('POST', '/ops/alert-rules', rule('mars', { selector: { labels: { region: 'mars' } } }));
    expect(later.statusCode, later.body).toBe(201);
    expect(later.json().selector).toEqual({ labels: { region: 'mars' } });
    const id = later.json().id as number;
    for (const [patch, field] of [
      [{ metric: 'error_rate' }, 'selector'],
      [{ selector: { monitor: 'no-such-monitor' } }, 'selector.monitor'],
      [{ labels: { monitor_id: '3' } }, 'labels.monitor_id'],
    ] as Array<[object, string]>) {
      const res = await api('PATCH', `/ops/alert-rules/${id}`, patch);
      expect(res.statusCode, res.body).toBe(400);
      expect(fields(res)).toContain(field);
    }
    expect((await api('PATCH', `/ops/alert-rules/${id}`, { metric: 'error_rate', selector: null, window: '1m' })).statusCode).toBe(200);
    expect((await api('DELETE', `/ops/alert-rules/${id}`)).statusCode).toBe(204);
  });

  it('fires per monitor after `sustained` rounds, naming the monitor; resolves on recovery; rules for another monitor stay quiet', async () => {
    const mk = async (body: object) => {
      const res = await api('POST', '/ops/alert-rules', body);
      expect(res.statusCode, res.body).toBe(201);
      return res.json().id as number;
    };
    const aDown = await mk(rule('a-down', { selector: { monitor: 'mon-a' } }));
    const bDown = await mk(rule('b-down', { selector: { monitor_id: ids['mon-b'] } }));
    const paidDown = await mk(rule('paid-down', { selector: { labels: { tier: 'paid' } }, labels: { team: 'relay' } }));
    const A = `monitor:${ids['mon-a']}`;
    const B = `monitor:${ids['mon-b']}`;

    rt.services.monitorRunner.start();
    await waitFor(async () => (await newestResult(ids['mon-a']!, true)) && (await newestResult(ids['mon-b']!, true)), { what: 'healthy probes of both monitors' });
    await evaluate();
    expect(await states(paidDown)).toEqual({});
    for (const r of [aDown, bDown, paidDown]) expect(await events(r)).toHaveLength(0);

    // mon-a's upstream starts failing: wait for a stored failure, then the first round.
    const broke = await dbNow();
    up.set('ka', { mode: 503 });
    await waitFor(async () => ((await newestResult(ids['mon-a']!, false)) ?? new Date(0)) > broke, { what: 'a stored failure of mon-a' });
    await evaluate();
    expect(await states(aDown)).toEqual({ [A]: 1 });
    expect(await states(paidDown)).toEqual({ [A]: 1 });
    expect(await states(bDown)).toEqual({});
    expect(await events(aDown)).toHaveLength(0);

    // The second round must see a probe in a newer bucket (1 s) than the first counted.
    const counted = (await sql.query(`SELECT last_bucket FROM ops_alert_state WHERE rule_id = $1`, [aDown])).rows[0].last_bucket as Date;
    await waitFor(async () => ((await newestResult(ids['mon-a']!))?.getTime() ?? 0) >= counted.getTime() + 1000, { what: 'a probe of mon-a in a newer bucket' });
    await evaluate();
    const [fired] = await events(aDown);
    expect(fired).toMatchObject({ state: 'firing', series: A, labels: { monitor: 'mon-a', monitor_id: String(ids['mon-a']) } });
    expect(fired!.value).toBeLessThan(95);
    const paid = await events(paidDown);
    expect(paid.map((e) => [e.series, e.state])).toEqual([[A, 'firing']]);
    expect(paid[0]!.labels).toMatchObject({ monitor: 'mon-a', team: 'relay', tier: 'paid', region: 'eu' });
    expect(await events(bDown)).toHaveLength(0);
    expect(await states(paidDown)).toEqual({ [A]: 2 }); // mon-b, selected too, never breached: no streak
    expect(await states(paidDown)).not.toHaveProperty(B);
    const firingHook = await waitFor(async () => hooks.find((h) => h.key === `ops-alert:${fired!.id}:firing:webhook:ops`), { what: 'the firing webhook' });
    expect(firingHook.subject).toContain('monitor mon-a');
    expect(firingHook.text).toContain('monitor=mon-a');

    // A round older than the newest token cannot write a monitor's state.
    const token = Number((await sql.query(`SELECT fencing_token FROM job_state WHERE job_name = 'ops_alert_evaluator'`)).rows[0].fencing_token);
    await expect(
      rt.services.ops.alerts.apply({ job: 'ops_alert_evaluator', token: token - 1, ruleId: aDown, series: A, streak: 0, lastBucket: null, resolvedAt: null }, null, () => []),
    ).rejects.toBeInstanceOf(FencedWriteRefused);
    await expect(rt.services.ops.alerts.applyStreaks('ops_alert_evaluator', token - 1, [{ ruleId: aDown, series: A, streak: 0, lastBucket: null }])).rejects.toBeInstanceOf(FencedWriteRefused);
    expect(await states(aDown)).toEqual({ [A]: 2 });

    // Recovery: once every probe in the window passes (and a passing probe newer than the
    // failures is stored, so no failure is still on its way), the next round resolves.
    const healed = await dbNow();
    up.set('ka', { mode: 'ok' });
    await waitFor(
      async () => {
        const [w] = await rt.services.ops.monitorWindows.window({ monitor: 'mon-a' }, 5000);
        return w && w.probes > 0 && w.ok === w.probes && ((await newestResult(ids['mon-a']!, true)) ?? new Date(0)) > healed;
      },
      { what: 'a clean window for mon-a' },
    );
    await evaluate();
    expect((await events(aDown)).map((e) => e.state)).toEqual(['resolved']);
    expect((await events(paidDown)).map((e) => e.state)).toEqual(['resolved']);
    const resolvedHook = await waitFor(async () => hooks.find((h) => h.key === `ops-alert:${fired!.id}:resolved:webhook:ops`), { what: 'the resolved webhook' });
    expect(resolvedHook.subject).toContain('monitor mon-a');
    expect(await events(bDown)).toHaveLength(0);
    expect(hooks.filter((h) => h.subject.includes('mon-b'))).toHaveLength(0);
  });

  it('monitor_p95_latency_ms; a monitor the rule no longer selects resolves, the newly selected one fires on its own', async () => {
    const res = await api('POST', '/ops/alert-rules', { ...rule('slow', { selector: { monitor: 'mon-b' } }), metric: 'monitor_p95_latency_ms', operator: '>=', threshold: 0, sustained: 1 });
    expect(res.statusCode, res.body).toBe(201);
    const slow = res.json().id as number;
    await evaluate();
    const [b] = await events(slow);
    expect(b).toMatchObject({ state: 'firing', series: `monitor:${ids['mon-b']}`, labels: { monitor: 'mon-b' } });
    expect(b!.value).toBeGreaterThanOrEqual(0);
    expect((await api('PATCH', `/ops/alert-rules/${slow}`, { selector: { monitor: 'mon-a' } })).statusCode).toBe(200);
    await evaluate();
    const after = await events(slow);
    expect(after.find((e) => e.id === b!.id)).toMatchObject({ state: 'resolved', value: b!.value });
    expect(after.filter((e) => e.state === 'firing').map((e) => e.labels.monitor)).toEqual(['mon-a']);
    await waitFor(async () => hooks.find((h) => h.key === `ops-alert:${b!.id}:resolved:webhook:ops` && h.subject.includes('mon-b')), { what: 'the resolved webhook of the deselected monitor' });
    // Disabling a firing rule resolves its events (and resets its streaks) instead of leaving them firing.
    const a = after.find((e) => e.state === 'firing')!;
    expect((await api('PATCH', `/ops/alert-rules/${slow}`, { enabled: false })).statusCode).toBe(200);
    await evaluate();
    expect((await events(slow)).filter((e) => e.state === 'firing')).toEqual([]);
    expect(Object.values(await states(slow)).filter((streak) => streak > 0)).toEqual([]);
    await waitFor(async () => hooks.find((h) => h.key === `ops-alert:${a.id}:resolved:webhook:ops`), { what: 'the resolved webhook of the disabled rule' });
    await api('DELETE', `/ops/alert-rules/${slow}`);
  });

  it('a window reads rolled-up minutes from the rollups and the rest from raw probes, each probe once', async () => {
    const c = ids['mon-c']!;
    rt.services.monitorRunner.start();
    await waitFor(() => newestResult(c), { what: 'the first probe of mon-c' });
    // Two whole minutes of older probes (6 of 8 ok) and two in the open minute (1 of 2 ok).
    await sql.query(
      `INSERT INTO monitor_results (monitor_id, fence, scheduled_for, started_at, ok, status, latency_ms, instance_id)
       SELECT $1, 0, t, t, ok, 200, 10 * n, 'synthetic' FROM (
         SELECT date_trunc('minute', now()) - interval '3 minutes' + n * interval '10 seconds' AS t, n % 4 <> 0 AS ok, n FROM generate_series(0, 3) n
         UNION ALL SELECT date_trunc('minute', now()) - interval '2 minutes' + n * interval '10 seconds', true, n FROM generate_series(0, 3) n
         UNION ALL SELECT now() - interval '1 second' * n, n = 1, n FROM generate_series(1, 2) n) x`,
      [c],
    );
    const truth = async () =>
      (await sql.query(`SELECT count(*)::int AS probes, count(*) FILTER (WHERE ok)::int AS ok FROM monitor_results WHERE monitor_id = $1 AND started_at >= now() - interval '10 minutes'`, [c]))
        .rows[0] as { probes: number; ok: number };
    const read = async () => {
      const [w] = await rt.services.ops.monitorWindows.window({ monitor: 'mon-c' }, 600_000);
      return { probes: w!.probes, ok: w!.ok };
    };
    const expected = await truth();
    expect(expected.probes).toBeGreaterThanOrEqual(10);
    expect(await read()).toEqual(expected); // no watermark yet: all raw
    const h = rt.services.monitorHistory;
    await h.rollUp(1, { trailingMs: 600_000, bootstrapMs: 3_600_000, maxSpanMs: 86_400_000 });
    expect(await read()).toEqual(expected); // rolled minutes from rollups, the open minute raw: nothing twice
    await sql.query(`UPDATE probe_watermarks SET upto = upto - interval '2 minutes'`);
    expect(await read()).toEqual(expected); // a lagging rollup: the minutes after it come from raw
    await h.rollUp(1, { trailingMs: 600_000, bootstrapMs: 3_600_000, maxSpanMs: 86_400_000 });
    // Raw probes of rolled-up minutes are no longer read: deleting them changes nothing.
    await sql.query(`DELETE FROM monitor_results WHERE monitor_id = $1 AND started_at < (SELECT upto FROM probe_watermarks) AND started_at >= now() - interval '9 minutes'`, [c]);
    expect(await read()).toEqual(expected);
  });
});
