import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import pg from 'pg';
import { ServiceProcess, runCli } from './helpers/cli.js';
import { PrivateRedis, TEST_MASTER_KEY, freePort, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';

/**
 * The ops plane with real processes: three replicas, `ops.bucket` 2 s, a rule on `error_rate`
 * fed by usage events with status 500. The replica that ran the last evaluator round is SIGKILLed
 * in the middle of the streak. The alert fires once, at the sustain the rule asks (the stored
 * streak never went back), with one webhook per transition, and resolves once traffic is
 * healthy. Then a report every 3 s through more kills: every occurrence recorded once, every
 * queued one delivered once.
 */
const ADMIN = 'e2e-ops-admin-token-0123';
const BUCKET_S = 2;
const SUSTAINED = 4;
async function waitHealthy(port: number): Promise<void> {
  await waitFor(
    async () =>
      fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      ),
    { what: `replica on ${port} ready`, timeoutMs: 90_000 },
  );
}

describe('ops plane across three real replicas with SIGKILL', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let redis: PrivateRedis;
  let sql: pg.Client;
  let hookServer: Server;
  const hooks: string[] = [];
  const replicas: ServiceProcess[] = [];

  beforeAll(async () => {
    db = await freshDatabase();
    redis = await PrivateRedis.start();
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    hookServer = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        hooks.push(String(req.headers['idempotency-key']));
        res.writeHead(204);
        res.end();
      });
    });
    await new Promise<void>((r) => hookServer.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    for (const r of replicas) if (r.proc.exitCode === null) r.proc.kill('SIGKILL');
    await sql.end();
    await new Promise((r) => hookServer.close(r));
    await redis.stop();
    await db.drop();
  });

  it('fires once at its sustain through a kill of the evaluator, one webhook per transition; reports once per occurrence', async () => {
    const prefix = uniqueName('rjopse2e');
    const ports = await Promise.all([0, 1, 2].map(() => freePort()));
    const hookPort = (hookServer.address() as { port: number }).port;
    const env = (i: number) => ({
      DATABASE_URL: db.url,
      REDIS_URL: redis.url,
      RELAY_JOBS_INSTANCE_ID: `o${i}`,
      RELAY_JOBS_ENV: 'e2e',
      RELAY_JOBS_HTTP_PORT: String(ports[i]),
      RELAY_JOBS_ADMIN_TOKEN: ADMIN,
      RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
      RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      RELAY_JOBS__DATABASE__POOL_SIZE: '4',
      RELAY_JOBS__OPS__BUCKET: `${BUCKET_S}s`,
      RELAY_JOBS__OPS__ALERT_INTERVAL: '1s',
      RELAY_JOBS__NOTIFY__WEBHOOK__URL: `http://127.0.0.1:${hookPort}/hook`,
      RELAY_JOBS__NOTIFY__PER_SECOND: '100',
      RELAY_JOBS__NOTIFY__SEND_TIMEOUT: '2s',
      RELAY_JOBS__USAGE__BATCH_SIZE: '50',
      RELAY_JOBS__JOBS__OPS_METRICS__LOCK_TTL: '2s',
      RELAY_JOBS__JOBS__OPS_METRICS__TIMEOUT: '1500ms',
      RELAY_JOBS__JOBS__OPS_ALERT_EVALUATOR__LOCK_TTL: '2s',
      RELAY_JOBS__JOBS__OPS_ALERT_EVALUATOR__TIMEOUT: '1500ms',
      RELAY_JOBS__JOBS__SCHEDULED_REPORTS__EVERY: '1s',
      RELAY_JOBS__JOBS__SCHEDULED_REPORTS__LOCK_TTL: '2s',
      RELAY_JOBS__JOBS__SCHEDULED_REPORTS__TIMEOUT: '1500ms',
      RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '500ms',
      RELAY_JOBS__LOGGING__LEVEL: 'warn',
    });
    replicas[0] = ServiceProcess.start('o0', env(0));
    await waitHealthy(ports[0]!);
    replicas[1] = ServiceProcess.start('o1', env(1));
    replicas[2] = ServiceProcess.start('o2', env(2));
    await Promise.all([1, 2].map((i) => waitHealthy(ports[i]!)));
    const alive = () => replicas.map((r, i) => ({ r, i })).filter(({ r }) => r.proc.exitCode === null && r.proc.signalCode === null);
    const call = async (method: string, path: string, body?: unknown) => {
      for (let attempt = 0; ; attempt++) {
        const { i } = alive()[attempt % alive().length]!;
        try {
          const res = await fetch(`http://127.0.0.1:${ports[i]}/api/v1${path}`, {
            method,
            headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
            body: body === undefined ? undefined : JSON.stringify(body),
          });
          if (res.status < 500) return res;
        } catch {
          /* that replica just died: try another */
        }
        if (attempt > 20) throw new Error(`${method} ${path} failed on every replica`);
      }
    };

    // Traffic: a few events every 200 ms, all 500s until told otherwise.
    let errorShare = 1;
    let seq = 0;
    let feeding = true;
    const feeder = (async () => {
      while (feeding) {
        const events = Array.from({ length: 5 }, () => {
          const n = seq++;
          return {
            request_id: `e2e-${n}`,
            user_id: 'u1',
            account_id: `a${n % 4}`,
            platform: 'claude',
            model: 'm',
            input_tokens: 1,
            output_tokens: 1,
            cost: '0',
            latency_ms: 100 + (n % 50),
            status_code: (n % 100) / 100 < errorShare ? 500 : 200,
            created_at: new Date().toISOString(),
          };
        });
        await call('POST', '/usage', { events }).catch(() => undefined);
        await new Promise((r) => setTimeout(r, 200));
      }
    })();

    const rule = await (await call('POST', '/ops/alert-rules', {
      name: 'errors-e2e',
      metric: 'error_rate',
      operator: '>',
      threshold: 0.5,
      window: `${BUCKET_S}s`,
      sustained: SUSTAINED,
      severity: 'critical',
    }))!.json();
    const state = async () => (await sql.query(`SELECT streak, event_id FROM ops_alert_state WHERE rule_id = $1`, [rule.id])).rows[0] as { streak: number; event_id: string | null } | undefined;
    const streaks: number[] = [];
    const watch = setInterval(
      () =>
        void state().then(
          (s) => s && s.event_id === null && streaks.push(s.streak),
          () => undefined,
        ),
      50,
    );

    await waitFor(async () => ((await state())?.streak ?? 0) >= 2, { what: 'streak 2' });
    const victimId = (await sql.query(`SELECT instance_id FROM job_runs WHERE job_name = 'ops_alert_evaluator' AND status <> 'skipped_not_leader' ORDER BY id DESC LIMIT 1`)).rows[0]
      .instance_id as string;
    const victim = Number(victimId.slice(1));
    replicas[victim]!.proc.kill('SIGKILL');
    await replicas[victim]!.exited;

    const event = await waitFor(async () => (await sql.query(`SELECT * FROM ops_alert_events WHERE rule_id = $1`, [rule.id])).rows[0], { what: 'the alert firing' });
    clearInterval(watch);
    // The stored streak never went back while the rule was breaching (a restart would show a drop).
    const drops = streaks.filter((s, i) => i > 0 && s < streaks[i - 1]!);
    expect(drops, `streaks seen: ${streaks.join(',')}`).toEqual([]);
    // Fired at the sustain: the breaching buckets the evaluator saw up to the firing are SUSTAINED in a row.
    const breached = (await sql.query(`SELECT bucket FROM ops_metrics_minute WHERE bucket <= $1 AND (metrics->>'error_rate')::float8 > 0.5 ORDER BY bucket`, [event.fired_bucket])).rows.map((r) =>
      new Date(r.bucket).getTime(),
    );
    const span = (breached.at(-1)! - breached[0]!) / 1000 / BUCKET_S;
    expect(span).toBeGreaterThanOrEqual(SUSTAINED - 1);
    expect(span, `a restarted streak would need ${SUSTAINED + 1} or more buckets`).toBeLessThanOrEqual(SUSTAINED);
    replicas[victim] = ServiceProcess.start(`o${victim}`, env(victim));
    await waitHealthy(ports[victim]!);
    // The CLI's overview shows the firing alert.
    const status = await runCli(['ops', 'status', '--json'], { ...env(0), RELAY_JOBS_INSTANCE_ID: 'ocli', RELAY_JOBS_HTTP_PORT: '0' }, 90_000);
    expect(JSON.parse(status.stdout).firing_alerts.map((e: { rule_name: string }) => e.rule_name)).toContain('errors-e2e');

    // Healthy traffic: it resolves, once.
    errorShare = 0;
    await waitFor(async () => (await sql.query(`SELECT 1 FROM ops_alert_events WHERE id = $1 AND state = 'resolved'`, [event.id])).rowCount, { what: 'the alert resolved' });
    const keys = [`ops-alert:${event.id}:firing:webhook:ops`, `ops-alert:${event.id}:resolved:webhook:ops`];
    await waitFor(async () => keys.every((k) => hooks.includes(k)), { what: 'both webhooks' });
    await new Promise((r) => setTimeout(r, 3000));
    expect(Number((await sql.query(`SELECT count(*) AS n FROM ops_alert_events WHERE rule_id = $1`, [rule.id])).rows[0].n)).toBe(1);
    expect(hooks.filter((h) => h.startsWith('ops-alert:')).sort()).toEqual(keys.sort());

    // A report every 3 s through two more kills.
    errorShare = 0.2;
    const report = await (await call('POST', '/ops/reports', { name: 'digest-e2e', kind: 'error_digest', cron: '*/3 * * * * *', recipients: ['webhook'], params: { min_count: 1 } }))!.json();
    const started = Date.now();
    for (let k = 0; k < 2; k++) {
      await new Promise((r) => setTimeout(r, 5000));
      const last = (await sql.query(`SELECT instance_id FROM job_runs WHERE job_name = 'scheduled_reports' AND status <> 'skipped_not_leader' ORDER BY id DESC LIMIT 1`)).rows[0].instance_id as string;
      const v = Number(last.slice(1));
      replicas[v]!.proc.kill('SIGKILL');
      await replicas[v]!.exited;
      await new Promise((r) => setTimeout(r, 1500));
      replicas[v] = ServiceProcess.start(`o${v}`, env(v));
      await waitHealthy(ports[v]!);
    }
    await new Promise((r) => setTimeout(r, 4000));
    await call('PATCH', `/ops/reports/${report.id}`, { enabled: false });
    const ended = Date.now();
    feeding = false;
    await feeder;
    const runs = (await sql.query(`SELECT occurrence, status FROM ops_report_runs WHERE report_id = $1 ORDER BY occurrence`, [report.id])).rows.map((r) => ({
      t: new Date(r.occurrence).getTime(),
      status: r.status as string,
    }));
    // Every occurrence from the first recorded to the last is recorded once (primary key), none missing.
    for (let t = runs[0]!.t; t <= runs.at(-1)!.t; t += 3000)
      expect(
        runs.some((r) => r.t === t),
        `occurrence ${new Date(t).toISOString()}`,
      ).toBe(true);
    expect(runs.length).toBeGreaterThanOrEqual(Math.floor((ended - started) / 3000) - 2);
    const queued = runs.filter((r) => r.status === 'queued').map((r) => `ops-report:${report.id}:${new Date(r.t).toISOString()}:webhook:webhook`);
    await waitFor(async () => queued.every((k) => hooks.includes(k)), { what: 'report webhooks', timeoutMs: 30_000 });
    const reportHooks = hooks.filter((h) => h.startsWith(`ops-report:${report.id}:`));
    expect(reportHooks.sort()).toEqual(queued.sort());
    console.log(
      `ops e2e: streaks ${streaks.filter((s, i) => s !== streaks[i - 1]).join('→')}, evaluator victim ${victimId}; report occurrences ${runs.length} (${runs.filter((r) => r.status === 'coalesced').length} coalesced, ${runs.filter((r) => r.status === 'skipped_empty').length} empty), ${reportHooks.length} delivered`,
    );
  }, 180_000);
});
