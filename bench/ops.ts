/**
 * The ops plane at volume, each figure against a baseline in the same run:
 * - collector round (the bucket's usage aggregate with percentiles) at 1 M and 10 M usage rows,
 *   the measured bucket holding the same 1,000 rows each time: through the created_at index vs
 *   the same statement with index scans disabled (what a collector without the index would pay);
 * - alert evaluation of 1,000 rules (every state changing, and steady) vs one rule.
 */
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { UsageStore, utcDayStart } from '../src/areas/usage/store/usage.js';
import { OpsMetricsStore } from '../src/areas/ops/store/ops-metrics.js';
import { OpsAlerts } from '../src/areas/ops/store/ops-alerts.js';
import { OpsSilences } from '../src/areas/ops/store/ops-silences.js';
import { OpsReports } from '../src/areas/ops/store/ops-reports.js';
import { OpsRetention } from '../src/areas/ops/store/ops-retention.js';
import { MonitorWindows } from '../src/areas/probes/store/monitor-windows.js';
import { RunRecords } from '../src/coordination/run-records.js';
import { InstanceRetention } from '../src/coordination/instance-retention.js';
import { OpsCollector } from '../src/areas/ops/ops-collector.js';
import { evaluateAlerts } from '../src/areas/ops/alert-round.js';
import { SERIES_NAMES } from '../src/areas/ops/catalogue.js';
import { loadConfig } from '../src/app/config-schema.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { freshDatabase } from '../test/helpers/services.js';

const DAY = 86_400_000;
const MIN = 60_000;

async function withDb<T>(fn: (db: PgDb) => Promise<T>): Promise<T> {
  const fresh = await freshDatabase();
  const db = await PgDb.connect({ url: fresh.url, poolSize: 4, connectTimeoutMs: 5000 });
  try {
    await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
    await fresh.drop();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timeIt(n: number, fn: () => Promise<unknown>): Promise<number> {
  const ts: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    ts.push(performance.now() - t);
  }
  return median(ts);
}

/** `rows` usage rows over the 7 days before the measured bucket, plus 1,000 rows in it. */
export async function benchCollector(sizes: number[]): Promise<Array<{ rows: number; indexMs: number; seqScanMs: number; roundMs: number }>> {
  const out = [];
  for (const rows of sizes) {
    out.push(
      await withDb(async (db) => {
        const store = new UsageStore(db);
        const bucket = Math.floor(Date.now() / MIN) * MIN - MIN;
        const start = bucket - 7 * DAY;
        await store.ensurePartitions(Array.from({ length: 9 }, (_, i) => utcDayStart(start) + i * DAY));
        const insert = (from: number, span: number, n: number, off: number) =>
          db.query(
            `INSERT INTO usage_logs (request_id, user_id, account_id, platform, model, input_tokens, output_tokens, cache_tokens, cost, latency_ms, status_code, created_at)
             SELECT 'r' || g, 'u' || (g % 100), 'a' || (g % 50), 'openai', 'm' || (g % 20), 100, 200, 0, 0.001, 50 + g % 900,
                    CASE WHEN g % 50 = 0 THEN 500 WHEN g % 77 = 0 THEN 429 ELSE 200 END, to_timestamp($1 / 1000.0) + ((g - $4)::float8 * $2 / $3) * interval '1 millisecond'
             FROM generate_series($4::bigint, $5::bigint) g`,
            [from, span, n, off + 1, off + n],
          );
        for (let off = 0; off < rows; off += 1_000_000) await insert(start, 7 * DAY - 2 * MIN, Math.min(1_000_000, rows - off), off);
        await insert(bucket, MIN - 1, 1000, rows + 10);
        await db.query(`ANALYZE usage_logs`);
        const ops = new OpsMetricsStore(db);
        const from = new Date(bucket);
        const to = new Date(bucket + MIN);
        const check = await ops.usageBucket(from, to);
        if (check.request_count !== 1000) throw new Error(`bucket holds ${check.request_count} rows, expected 1000`);
        const indexMs = await timeIt(20, () => ops.usageBucket(from, to));
        const seqScanMs = await timeIt(3, () =>
          db.tx(async (q) => {
            await q.query(`SET LOCAL enable_indexscan = off`);
            await q.query(`SET LOCAL enable_bitmapscan = off`);
            await q.query(`SELECT count(*), percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) FROM usage_logs WHERE created_at >= $1 AND created_at < $2`, [from, to]);
          }),
        );
        const collector = new OpsCollector(ops, { jobHealth: async () => [], instances: async () => [], pingDb: () => db.ping(), pingRedis: null, usageQueue: () => 0, dbPoolInUse: () => null });
        const roundMs = await timeIt(10, () => collector.collect(from, to).then((c) => ops.write(from, 60, c.metrics, c.instances, 1)));
        return { rows: rows + 1000, indexMs, seqScanMs, roundMs };
      }),
    );
  }
  return out;
}

/** One evaluation round of `n` rules, all breaching (one fenced transaction each), then the same bucket again (nothing to write). */
export async function benchAlertEvaluation(counts: number[]): Promise<Array<{ rules: number; changingMs: number; steadyMs: number }>> {
  const out = [];
  for (const n of counts) {
    out.push(
      await withDb(async (db) => {
        const config = loadConfig({ env: {} });
        const ops = {
          series: new OpsMetricsStore(db),
          alerts: new OpsAlerts(db),
          silences: new OpsSilences(db),
          reports: new OpsReports(db),
          retention: new OpsRetention(db),
          runRecords: new RunRecords(db),
          instances: new InstanceRetention(db),
          collector: null as never,
          monitorWindows: new MonitorWindows(db),
        };
        await db.query(`INSERT INTO job_state (job_name, fencing_token) VALUES ('ops_alert_evaluator', 1)`);
        const metrics = ['error_rate', 'request_count', 'p95_latency_ms', 'accounts_error', 'qps', 'outbox_lag_seconds'];
        for (let i = 0; i < n; i++) {
          await ops.alerts.createRule({
            name: `rule-${i}`,
            metric: metrics[i % metrics.length]!,
            operator: '>',
            threshold: -1,
            window_seconds: 60 * (1 + (i % 15)),
            sustained: 1000,
            severity: 'warning',
            cooldown_seconds: 0,
            labels: { team: `t${i % 10}` },
            enabled: true,
            notify: true,
          });
        }
        const bucket = Math.floor(Date.now() / MIN) * MIN - MIN;
        const values = Object.fromEntries(SERIES_NAMES.map((s, i) => [s, i + 1]));
        for (let k = 15; k >= 1; k--) await ops.series.write(new Date(bucket - (k - 1) * MIN - MIN), 60, values, [], 1);
        const round = () => evaluateAlerts({ ops, config, channels: [], job: 'ops_alert_evaluator', token: 1, now: Date.now(), signal: new AbortController().signal, log: silentLogger() });
        const t = performance.now();
        const first = await round();
        if (first.rules !== n) throw new Error('rules missing');
        const changingMs = performance.now() - t;
        const steadyMs = await timeIt(5, round);
        return { rules: n, changingMs, steadyMs };
      }),
    );
  }
  return out;
}
