import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import pg from 'pg';
import { runCli } from './helpers/cli.js';
import { startCluster, type Cluster, type Replica } from './helpers/cluster.js';
import { pace, waitFor } from './helpers/wait.js';

/**
 * The ops plane with real processes: three replicas, `ops.bucket` 2 s, a rule on `error_rate`
 * fed by usage events with status 500. The replica that ran the last evaluator round is SIGKILLed
 * in the middle of the streak. The alert fires once, at the sustain the rule asks (the stored
 * streak never went back), with one webhook per transition, and resolves once traffic is
 * healthy. Then a report every 3 s through more kills: every occurrence recorded once, every
 * queued one delivered under its stable idempotency key, once, or twice only when a kill fell
 * between the receiver taking it and the sender recording it (at least once: docs/ops.md).
 */
const BUCKET_S = 2;
const SUSTAINED = 4;
async function waitHealthy(r: Replica): Promise<void> {
  await waitFor(
    async () =>
      fetch(r.url('/readyz')).then(
        (res) => res.ok,
        () => false,
      ),
    { what: `replica ${r.id} on ${r.port} ready`, timeoutMs: 90_000 },
  );
}

describe('ops plane across three real replicas with SIGKILL', () => {
  let cluster: Cluster;
  let sql: pg.Client;
  let hookServer: Server;
  const hooks: string[] = [];
  /** When each key arrived (test process clock, as the kills'). */
  const arrivedAt: Array<{ key: string; at: number }> = [];

  beforeAll(async () => {
    hookServer = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        hooks.push(String(req.headers['idempotency-key']));
        arrivedAt.push({ key: String(req.headers['idempotency-key']), at: Date.now() });
        res.writeHead(204);
        res.end();
      });
    });
    await new Promise<void>((r) => hookServer.listen(0, '127.0.0.1', r));
  });
  afterAll(async () => {
    await cluster?.stop();
    await new Promise((r) => hookServer.close(r));
  });

  it('fires once at its sustain through a kill of the evaluator, one webhook per transition; reports once per occurrence', async () => {
    const hookPort = (hookServer.address() as { port: number }).port;
    const env = {
      RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined,
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
      // The hourly doctor (cron "7 * * * *") fires an ops alert per failing check (a dead replica, autovacuum
      // off…): a run that spans minute 7 of the hour saw four extra alert webhooks (CI, 6 Dec, 06:07).
      RELAY_JOBS__JOBS__DOCTOR__ENABLED: 'false',
    };
    // The harness migrates the database, then the three replicas start side by side (at `warn` they
    // print no "started" line: each is waited for on /readyz).
    cluster = await startCluster({ replicas: ['o0', 'o1', 'o2'], waitStarted: false, env });
    sql = await cluster.sql();
    const replicas = cluster.replicas;
    await Promise.all(replicas.map((r) => waitHealthy(r)));
    const alive = () => cluster.alive;
    const call = async (method: string, path: string, body?: unknown) => {
      for (let attempt = 0; ; attempt++) {
        const r = alive()[attempt % alive().length]!;
        try {
          const res = await cluster.api(r, path, { method, body, headers: { 'content-type': 'application/json' } });
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
        await pace(200);
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
    let watching = true;
    const watch = (async () => {
      while (watching) {
        const s = await state().catch(() => undefined);
        if (s && s.event_id === null) streaks.push(s.streak);
        await pace(50); // the sampling cadence
      }
    })();

    await waitFor(async () => ((await state())?.streak ?? 0) >= 2, { what: 'streak 2' });
    const victimId = (await sql.query(`SELECT instance_id FROM job_runs WHERE job_name = 'ops_alert_evaluator' AND status <> 'skipped_not_leader' ORDER BY id DESC LIMIT 1`)).rows[0]
      .instance_id as string;
    const victim = Number(victimId.slice(1));
    await replicas[victim]!.kill('SIGKILL');

    const event = await waitFor(async () => (await sql.query(`SELECT * FROM ops_alert_events WHERE rule_id = $1`, [rule.id])).rows[0], { what: 'the alert firing' });
    watching = false;
    await watch;
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
    await replicas[victim]!.restart(false);
    // The CLI's overview shows the firing alert (it reads the database: it runs while the victim comes back).
    const [status] = await Promise.all([
      runCli(['ops', 'status', '--json'], { ...replicas[0]!.env, RELAY_JOBS_INSTANCE_ID: 'ocli', RELAY_JOBS_HTTP_PORT: '0' }, 90_000),
      waitHealthy(replicas[victim]!),
    ]);
    expect(JSON.parse(status.stdout).firing_alerts.map((e: { rule_name: string }) => e.rule_name)).toContain('errors-e2e');

    // Healthy traffic: it resolves, once.
    errorShare = 0;
    await waitFor(async () => (await sql.query(`SELECT 1 FROM ops_alert_events WHERE id = $1 AND state = 'resolved'`, [event.id])).rowCount, { what: 'the alert resolved' });
    const keys = [`ops-alert:${event.id}:firing:webhook:ops`, `ops-alert:${event.id}:resolved:webhook:ops`];
    await waitFor(async () => keys.every((k) => hooks.includes(k)), { what: 'both webhooks' });

    // A report every 3 s through two more kills. Traffic stays under the rule's threshold (20 % errors
    // against > 50 %), so the report phase's first seconds are also the alert's quiet window below.
    errorShare = 0.2;
    const report = await (await call('POST', '/ops/reports', { name: 'digest-e2e', kind: 'error_digest', cron: '*/3 * * * * *', recipients: ['webhook'], params: { min_count: 1 } }))!.json();
    const started = Date.now();
    /** Until the cluster has recorded an occurrence of the report after `since` (test clock; the database runs on this machine). */
    const occurrenceAfter = (since: number, what: string) =>
      waitFor(async () => (await sql.query(`SELECT 1 FROM ops_report_runs WHERE report_id = $1 AND created_at > to_timestamp($2 / 1000.0)`, [report.id, since])).rowCount, {
        what: `an occurrence of the report recorded ${what}`,
      });
    // The observation window: three evaluator rounds (1 s apart) begun after both webhooks, and no
    // second firing and no extra alert webhook.
    const quietFrom = (await sql.query(`SELECT clock_timestamp() AS t`)).rows[0].t as Date;
    const evaluatorRounds = async () =>
      Number(
        (await sql.query(`SELECT count(*) AS n FROM job_runs WHERE job_name = 'ops_alert_evaluator' AND status NOT IN ('running', 'skipped_not_leader') AND started_at > $1`, [quietFrom])).rows[0].n,
      );
    await waitFor(async () => (await evaluatorRounds()) >= 3, { what: async () => `three evaluator rounds after both webhooks (${await evaluatorRounds()})` });
    expect(Number((await sql.query(`SELECT count(*) AS n FROM ops_alert_events WHERE rule_id = $1`, [rule.id])).rows[0].n)).toBe(1);
    expect(hooks.filter((h) => h.startsWith('ops-alert:')).sort()).toEqual(keys.sort());
    const kills: number[] = [];
    let since = started;
    for (let k = 0; k < 2; k++) {
      // The cluster is running the report (an occurrence recorded since it was created, or since the last
      // victim was back): kill the replica that ran the last round.
      await occurrenceAfter(since, k === 0 ? 'after its creation' : 'after the last victim was back');
      const last = (await sql.query(`SELECT instance_id FROM job_runs WHERE job_name = 'scheduled_reports' AND status <> 'skipped_not_leader' ORDER BY id DESC LIMIT 1`)).rows[0].instance_id as string;
      const v = Number(last.slice(1));
      const killedAt = Date.now();
      kills.push(killedAt);
      await replicas[v]!.kill('SIGKILL');
      // The victim stays down until the survivors have carried on without it (a report round run by one
      // of them since the kill), then comes back.
      await waitFor(
        async () =>
          (
            await sql.query(
              `SELECT 1 FROM job_runs WHERE job_name = 'scheduled_reports' AND status NOT IN ('running', 'skipped_not_leader') AND instance_id <> $1 AND started_at > to_timestamp($2 / 1000.0)`,
              [last, killedAt],
            )
          ).rowCount,
        { what: `a report round run by a survivor after ${last} was killed` },
      );
      await replicas[v]!.restart(false);
      await waitHealthy(replicas[v]!);
      since = Date.now();
    }
    // Occurrences go on after the last kill (the run of recorded occurrences checked below spans it).
    await occurrenceAfter(since, 'after the last victim was back');
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
    // Each queued occurrence arrived, under its own stable key, and nothing else did.
    expect([...new Set(reportHooks)].sort()).toEqual([...queued].sort());
    // Once each, unless a kill hit the window a remote POST and the local record cannot share
    // (the receiver had it; the sender died before recording it): then once more, no more, and
    // that kill fell at the first arrival (a request already on the wire when the signal landed
    // arrives a moment after it: 200 ms of slack) or within one send timeout (2 s) after it.
    const resent = [...new Set(reportHooks.filter((h, i) => reportHooks.indexOf(h) !== i))];
    for (const key of resent) {
      const at = arrivedAt.filter((a) => a.key === key).map((a) => a.at);
      expect(at.length, `${key} arrived ${at.length} times`).toBe(2);
      expect(
        kills.some((k) => k - at[0]! > -200 && k - at[0]! < 2000 && k <= at[1]!),
        `${key} resent at ${at.map((t) => new Date(t).toISOString()).join(', ')} with no kill in between (kills ${kills.map((t) => new Date(t).toISOString()).join(', ')})`,
      ).toBe(true);
    }
    console.log(
      `ops e2e: streaks ${streaks.filter((s, i) => s !== streaks[i - 1]).join('→')}, evaluator victim ${victimId}; report occurrences ${runs.length} (${runs.filter((r) => r.status === 'coalesced').length} coalesced, ${runs.filter((r) => r.status === 'skipped_empty').length} empty), ${reportHooks.length} delivered (${resent.length} resent after a kill)`,
    );
  }, 180_000);
});
