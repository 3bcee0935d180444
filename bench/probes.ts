/**
 * Channel monitors at scale: N monitors at one interval, the loopback chat-completions upstream
 * answering in 50–500 ms, on 1 and on 3 `relay-jobs start` processes sharing PostgreSQL. Measured
 * over one window: probes per second (the upstream's count), p99 lateness (start − due time, from
 * the result rows), PostgreSQL transactions per probe (pg_stat_database.xact_commit delta over the
 * window: every statement the replicas sent, heartbeats and other jobs included) and resident
 * memory per monitor (replica RSS with the monitors minus RSS before them, per monitor).
 * Baseline, same run, in this process: Sub2API's design, one timer per monitor on every replica
 * and a pool of 5 that drops a check when full: probes sent, dropped, and heap per monitor.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { ProbeClient } from '../src/upstream/probe-client.js';
import { chatTarget } from '../test/helpers/probe-target.js';
import { ServiceProcess } from '../test/helpers/cli.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freePort, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { ChatUpstream } from '../test/fixtures/chat-upstream.js';

export interface ProbeBenchRow {
  design: string;
  replicas: number;
  monitors: number;
  probesPerSec: number;
  dueProbesPerSec: number;
  p99LateMs: number | null;
  xactPerProbe: number | null;
  bytesPerMonitor: number;
  dropped: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rss = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;

async function ours(replicas: number, monitors: number, intervalS: number, windowS: number, up: ChatUpstream): Promise<ProbeBenchRow> {
  const db = await freshDatabase();
  const store = new PgDb({ url: db.url, poolSize: 2, connectTimeoutMs: 5000 });
  await migrate(store);
  const procs: ServiceProcess[] = [];
  const prefix = uniqueName('rjbench');
  for (let i = 0; i < replicas; i++) {
    procs.push(
      ServiceProcess.start(`b${i}`, {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS_INSTANCE_ID: `b${i}`,
        RELAY_JOBS_ENV: 'bench',
        RELAY_JOBS_HTTP_PORT: String(await freePort()),
        RELAY_JOBS_ADMIN_TOKEN: 'bench-admin-token-0123456789',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__LOGGING__LEVEL: 'error',
        RELAY_JOBS__CHANNEL_MONITOR__MIN_INTERVAL: '1s',
      }),
    );
  }
  await sleep(5000);
  for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`${p.name} exited: ${p.lines.slice(-10).join('\n')}`);
  const idle = procs.map((p) => rss(p.proc.pid!));
  // Sealed keys as the API would store them; due times spread over one interval.
  const { SecretBox } = await import('../src/store/secret-box.js');
  const box = SecretBox.fromBase64(TEST_MASTER_KEY);
  const sealed = box.seal('bench-key', 'monitor-api-key');
  await store.query(
    `INSERT INTO monitors (name, base_url, model, api_key_sealed, interval_ms, timeout_ms, next_due_at)
     SELECT 'm' || g, $1, 'gpt-bench', $2, $3::int, 5000, now() + make_interval(secs => random() * $3::int / 1000.0) FROM generate_series(1, $4::int) g`,
    [up.url, sealed, intervalS * 1000, monitors],
  );
  await sleep(intervalS * 1000 + 5000); // one full interval to settle
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  const xact = async () => Number((await admin.query(`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`)).rows[0].xact_commit);
  const x0 = await xact();
  const c0 = up.total;
  const t0 = new Date();
  await sleep(windowS * 1000);
  const x1 = await xact();
  const c1 = up.total;
  const t1 = new Date();
  const mem = procs.map((p, i) => rss(p.proc.pid!) - idle[i]!);
  await sleep(1000);
  const late = await admin.query(
    `SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_for) * 1000) AS p99 FROM monitor_results WHERE scheduled_for >= $1 AND scheduled_for < $2`,
    [t0, t1],
  );
  for (const p of procs) p.proc.kill('SIGTERM');
  await Promise.all(procs.map((p) => p.exited));
  await admin.end();
  await store.close();
  await db.drop();
  await dropRedisPrefix(prefix);
  const probes = c1 - c0;
  return {
    design: 'relay-jobs: due times in PostgreSQL, claimed in batches',
    replicas,
    monitors,
    probesPerSec: probes / windowS,
    dueProbesPerSec: monitors / intervalS,
    p99LateMs: Number(late.rows[0].p99),
    xactPerProbe: (x1 - x0) / Math.max(1, probes),
    bytesPerMonitor: mem.reduce((a, b) => a + b, 0) / monitors,
    dropped: 0,
  };
}

/** Sub2API §16: every replica arms one timer per monitor (interval, first check at a random phase here) and a pool of 5 that drops. */
async function sub2api(replicas: number, monitors: number, intervalS: number, windowS: number, up: ChatUpstream): Promise<ProbeBenchRow> {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const client = new ProbeClient();
  let inFlight = 0;
  let dropped = 0;
  const timers: NodeJS.Timeout[] = [];
  const lateness: number[] = [];
  for (let r = 0; r < replicas; r++) {
    const pool = { running: 0 };
    for (let m = 0; m < monitors; m++) {
      const mon = { id: m, baseUrl: up.url, model: 'gpt-bench', apiKey: `base-${r}-${m}`, intervalMs: intervalS * 1000, timeoutMs: 5000, due: 0 };
      up.addApiKey(mon.apiKey);
      const fire = () => {
        lateness.push(Date.now() - mon.due);
        mon.due += mon.intervalMs;
        if (pool.running >= 5) return void dropped++;
        pool.running++;
        inFlight++;
        void client.probe(chatTarget(mon)).finally(() => {
          pool.running--;
          inFlight--;
        });
      };
      const phase = Math.random() * intervalS * 1000;
      mon.due = Date.now() + phase;
      timers.push(
        setTimeout(() => {
          fire();
          timers.push(setInterval(fire, mon.intervalMs));
        }, phase),
      );
    }
  }
  gc?.();
  const heapArmed = process.memoryUsage().heapUsed;
  const c0 = up.total;
  await sleep(windowS * 1000);
  const probes = up.total - c0;
  for (const t of timers) clearTimeout(t);
  while (inFlight > 0) await sleep(50);
  await client.close();
  lateness.sort((a, b) => a - b);
  return {
    design: 'Sub2API: one timer per monitor on every replica, pool of 5 (drop)',
    replicas,
    monitors,
    probesPerSec: probes / windowS,
    dueProbesPerSec: (monitors * replicas) / intervalS,
    p99LateMs: lateness[Math.floor(lateness.length * 0.99)] ?? null,
    xactPerProbe: null,
    bytesPerMonitor: (heapArmed - heap0) / (monitors * replicas),
    dropped,
  };
}

export async function benchProbes(monitors: number, intervalS: number, windowS: number): Promise<ProbeBenchRow[]> {
  const up = await ChatUpstream.start();
  up.setDefault({ mode: 'ok', latencyMs: [50, 500] });
  up.addApiKey('bench-key'); // the key every monitor of ours() is sealed with; sub2api() adds its own
  const rows: ProbeBenchRow[] = [];
  try {
    for (const n of [1, 3]) rows.push(await ours(n, monitors, intervalS, windowS, up));
    for (const n of [1, 3]) rows.push(await sub2api(n, monitors, intervalS, windowS, up));
  } finally {
    await up.close();
  }
  return rows;
}

export function printProbes(rows: ProbeBenchRow[], monitors: number, intervalS: number, windowS: number): void {
  console.log(`\n## Channel monitors: ${monitors} at ${intervalS} s, upstream answering in 50–500 ms, ${windowS} s window\n`);
  console.log('| design | replicas | probes/s sent | probes/s due (one per monitor per interval) | p99 lateness ms | PG transactions/probe | memory bytes/monitor | checks dropped |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.design} | ${r.replicas} | ${r.probesPerSec.toFixed(0)} | ${r.dueProbesPerSec.toFixed(0)} | ${r.p99LateMs === null ? '–' : r.p99LateMs.toFixed(0)} | ${r.xactPerProbe === null ? '–' : r.xactPerProbe.toFixed(3)} | ${r.bytesPerMonitor.toFixed(0)} | ${r.dropped} |`,
    );
  }
}
