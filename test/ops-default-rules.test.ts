import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { Counter } from 'prom-client';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer } from '../src/http/server.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { DEFAULT_RULES } from '../src/areas/ops/default-rules.js';
import { outcomeOf } from './helpers/rounds.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { captureLogs } from './helpers/log-capture.js';

const ADMIN = 'ops-defaults-admin-token-0123456789';

/**
 * Issue 50 point 4: the ops plane starts with a default rule set, installed once cluster-wide
 * (replicas starting together install one set), editable and deletable, never re-added once
 * deleted; the series they judge are collected.
 */
describe('default alert rules', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let sql: pg.Client;
  const prefix = uniqueName('rjopsdef');
  const live: Runtime[] = [];
  const config = (id: string, extra: Record<string, string> = {}) =>
    loadConfig({
      env: {
        ...extra,
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: id,
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: '2',
      },
    });
  const logs = captureLogs('defaults', 'debug');
  const replica = async (id: string, extra?: Record<string, string>) => {
    const rt = await Runtime.create(config(id, extra), { logger: logs.logger });
    live.push(rt);
    return rt;
  };
  const stop = async (rt: Runtime) => {
    await rt.shutdown();
    live.splice(live.indexOf(rt), 1);
  };
  const defaultRules = async () =>
    (await sql.query<{ id: string; name: string; threshold: number; sustained: number }>(`SELECT id, name, threshold, sustained FROM ops_alert_rules WHERE labels->>'origin' = 'default' ORDER BY id`))
      .rows;

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
  });
  afterAll(async () => {
    for (const rt of [...live]) await rt.shutdown();
    await sql?.end();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  it('two replicas starting at once install one set; after deleting one default and a restart it stays deleted, an edit stays', async () => {
    const [a, b] = await Promise.all([replica('def-a'), replica('def-b')]);
    expect(await defaultRules()).toEqual([]);
    // Both replicas start at once (ops_alert_evaluator's onStart installs): one set.
    a.start();
    b.start();
    await waitFor(async () => Number((await sql.query(`SELECT count(*) AS n FROM ops_default_rules`)).rows[0].n) === DEFAULT_RULES.length, { what: 'the defaults recorded' });
    let rules = await waitFor(
      async () => {
        const r = await defaultRules();
        return r.length === DEFAULT_RULES.length && r;
      },
      { what: 'one default rule set' },
    );
    expect(rules.map((r) => r.name).sort()).toEqual(DEFAULT_RULES.map((d) => d.name).sort());
    // Both starts' installs have ended (the one that found everything installed says so at debug).
    await waitFor(() => logs.lines.filter((l) => String(l.msg).startsWith('default alert rules')).length === 2, { what: 'both starts’ installs ended' });
    // The same race made tighter: the record wiped, four installs from both replicas at once install every default once.
    await sql.query(`DELETE FROM ops_default_rules`);
    await sql.query(`DELETE FROM ops_alert_rules WHERE labels->>'origin' = 'default'`);
    const installs = await Promise.all([a, b, a, b].map((rt) => rt.services.ops.installDefaults(silentLogger())));
    expect(installs.flat().sort()).toEqual(DEFAULT_RULES.map((d) => d.key).sort());
    rules = await defaultRules();
    expect(rules).toHaveLength(DEFAULT_RULES.length);
    // `for` became evaluations at the default 1 min bucket: job stuck holds 2 min.
    expect(rules.find((r) => r.name === 'job stuck')?.sustained).toBe(2);

    // Through the API, as an operator would: one default deleted, one edited.
    const http = buildHttpServer(a);
    await http.ready();
    const auth = { authorization: `Bearer ${ADMIN}` };
    const gone = rules.find((r) => r.name === 'replica gone')!;
    const edited = rules.find((r) => r.name === 'scheduler outbox lag')!;
    expect((await http.inject({ method: 'DELETE', url: `/api/v1/ops/alert-rules/${gone.id}`, headers: auth })).statusCode).toBe(204);
    expect((await http.inject({ method: 'PATCH', url: `/api/v1/ops/alert-rules/${edited.id}`, headers: auth, payload: { threshold: 900 } })).statusCode).toBe(200);
    await http.close();
    await Promise.all([stop(a), stop(b)]);

    // A restart: nothing is re-added, the edit stays.
    const c = await replica('def-c');
    c.start();
    expect(await c.services.ops.installDefaults(silentLogger())).toEqual([]);
    const after = await defaultRules();
    expect(after.map((r) => r.name)).not.toContain('replica gone');
    expect(after).toHaveLength(DEFAULT_RULES.length - 1);
    expect(after.find((r) => r.name === 'scheduler outbox lag')?.threshold).toBe(900);
    await stop(c);
  });

  it('collects the series the defaults judge, and sums each replica’s own counters cluster-wide', async () => {
    // The two jobs run by hand only: a minutely slot's round holding the lock would refuse runNow.
    const d = await replica('def-d', { RELAY_JOBS__JOBS__OPS_METRICS__ENABLED: 'false', RELAY_JOBS__JOBS__OPS_ALERT_EVALUATOR__ENABLED: 'false' });
    d.start();
    const dropped = d.metrics.registry.getSingleMetric('relay_jobs_usage_dropped_total') as Counter | undefined;
    expect(dropped).toBeDefined();
    dropped!.inc(3);
    // The replica's reporter writes the rise (every 5 s, only when a counter rose).
    await waitFor(async () => Number((await sql.query(`SELECT coalesce(sum(n), 0) AS n FROM ops_counter_increments WHERE instance_id = 'def-d' AND name = 'usage_dropped'`)).rows[0].n) === 3, {
      what: 'the rise reported',
    });
    expect(outcomeOf(await d.runNow('ops_metrics'))?.status).toBe('ok');
    const m = (await sql.query(`SELECT metrics FROM ops_metrics_minute ORDER BY bucket DESC LIMIT 1`)).rows[0].metrics;
    for (const s of ['replicas_dead', 'scheduler_outbox_lag_seconds', 'accounts_refresh_failing_ratio', 'usage_dropped', 'usage_spilled', 'quota_flush_errors']) expect(m[s], s).toBeTypeOf('number');
    // The backup job is on and no backup was taken yet: unknown, not an age.
    expect(m.backup_age_seconds).toBeNull();
    // The evaluator judges the defaults (a rule over an unknown series is no error).
    const out = outcomeOf(await d.runNow('ops_alert_evaluator'));
    expect(out?.status, out?.error ?? undefined).not.toBe('failed');
    expect(out?.note).toMatch(new RegExp(`^${DEFAULT_RULES.length - 1} rules`));
  });
});
