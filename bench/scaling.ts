/**
 * Scale on paper (issue 53 point 4; `BENCH_ONLY=scaling npm run bench`, docs/scaling.md): for N
 * real `relay-jobs start` replicas (BENCH_REPLICAS, default 1,3,9) on a fresh database and a private
 * redis-server, every default job on, it counts — counts, not timings: robust to the machine's other
 * load — the PostgreSQL statements and transactions (server log, log_statement = 'all' for the bench
 * database only) and the Redis commands (MONITOR, by key family) of two windows:
 *   idle   no data, BENCH_SCALING_IDLE_S (60: the once-a-minute jobs land in it) after BENCH_SETTLE_S (20): the fixed cost of N replicas;
 *   load   the same fixed cluster-wide workload at every N (scaling-load.ts), BENCH_STEADY_S (60)
 *          after BENCH_SETTLE_S: refreshing accounts, monitors, token and snapshot reads, account
 *          changes, usage batches and quota increments, each counted as answered.
 * Each statement is classed by feature (scaling-classify.ts); scaling-model.ts turns the windows
 * into per-replica and per-unit costs and the capacity table.
 */
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ServiceProcess } from '../test/helpers/cli.js';
import { PrivateRedis, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { FakeOAuthServer } from '../test/fixtures/oauth-server.js';
import { ChatUpstream } from '../test/fixtures/chat-upstream.js';
import { replicaEnv, sleep } from './replicas.js';
import { ScalingLoadGenerator, loadFromEnv, outboxApplied, unitsDelta, type Call, type Units } from './scaling-load.js';
import { RedisMonitor, loggedStatements, pgBackends, pgTransactions, redisTotal, type RedisTally } from './scaling-log.js';
import { tallyStatements, type PgTallies } from './scaling-classify.js';
import type { RunData, WindowData } from './scaling-model.js';
import { loadRuns, report, saveRuns } from './scaling-report.js';

const ADMIN = 'bench-admin-token-0123456789';

/** A window's tallies as plain data (pgXact: pg_stat_database commits + rollbacks; redisTotal: INFO total_commands_processed; each minus the bench's own readings). */
function windowData(secs: number, pgT: PgTallies, pgXact: number, redis: RedisTally, redisTotal: number, units: Units, backends: number): WindowData {
  const pgOut: WindowData['pg'] = {};
  for (const [c, t] of pgT)
    pgOut[c] = { statements: t.statements, transactions: t.transactions, primaryTransactions: t.primaryTransactions, kinds: [...t.kinds.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12) };
  const client: WindowData['redis'] = {};
  for (const [c, m] of redis.client) client[c] = Object.fromEntries(m);
  return { secs, pg: pgOut, pgXact, redis: client, lua: Object.fromEntries(redis.lua), redisTotal, units: { ...units }, backends };
}

const log = (line: string) => console.error(`[scaling ${new Date().toISOString().slice(11, 19)}] ${line}`);

async function waitReady(port: number, proc: ServiceProcess): Promise<void> {
  for (const deadline = Date.now() + 180_000; ;) {
    const ok = await fetch(`http://127.0.0.1:${port}/readyz`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) return;
    if (proc.proc.exitCode !== null || Date.now() > deadline) throw new Error(`scaling bench: ${proc.name} (port ${port}) not ready:\n${proc.lines.slice(-15).join('\n')}`);
    await sleep(200);
  }
}

export async function runScaling(replicas: number, load = loadFromEnv(process.env)): Promise<RunData> {
  const settleS = Number(process.env.BENCH_SETTLE_S ?? 20);
  const steadyS = Number(process.env.BENCH_STEADY_S ?? 60);
  const idleS = Number(process.env.BENCH_SCALING_IDLE_S ?? 60);
  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    const db = await freshDatabase({ migrated: true });
    cleanups.push(() => db.drop());
    // The bench's own session connects before the log setting: it is not logged.
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    cleanups.push(() => sql.end());
    const q = async (text: string) => (await sql.query(text)).rows as Array<Record<string, unknown>>;
    await q(`ALTER DATABASE ${db.name} SET log_statement = 'all'`);
    const redis = await PrivateRedis.start();
    cleanups.push(() => redis.stop());
    const monitor = await RedisMonitor.start(redis.url);
    cleanups.push(async () => monitor.stop());
    const oauth = await FakeOAuthServer.start({ clientId: 'bench', lifetimeSec: load.refreshMarginS + load.refreshPeriodS, rotate: true, sendExpiresIn: true });
    cleanups.push(() => oauth.close());
    const chat = await ChatUpstream.start();
    cleanups.push(() => chat.close());
    chat.setDefault({ mode: 'ok', latencyMs: [5, 20] });

    const prefix = uniqueName('rjscale');
    const procs: ServiceProcess[] = [];
    const ports: number[] = [];
    for (let i = 0; i < replicas; i++) {
      const env = await replicaEnv(
        `s${i}`,
        { dbUrl: db.url, redisUrl: redis.url, prefix },
        {
          RELAY_JOBS__DATABASE__POOL_SIZE: '4',
          RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: String(replicas),
          RELAY_JOBS__LOGGING__LEVEL: 'warn',
          RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: String(load.refreshMarginS),
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'bench',
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '1000',
        },
      );
      ports.push(Number(env.RELAY_JOBS_HTTP_PORT));
      procs.push(ServiceProcess.start(`s${i}`, env));
    }
    cleanups.push(async () => {
      for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGTERM');
      await Promise.all(procs.map((p) => p.exitedWithin(60_000).catch(() => null)));
    });
    await Promise.all(ports.map((p, i) => waitReady(p, procs[i]!)));
    const call: Call = async (replica, path, body, method = body === undefined ? 'GET' : 'POST') => {
      const res = await fetch(`http://127.0.0.1:${ports[replica]}/api/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`${method} ${path} on replica ${replica}: ${res.status} ${text.slice(0, 200)}`);
      return text ? (JSON.parse(text) as Record<string, unknown>) : {};
    };
    log(`${replicas} replicas ready; settling ${settleS} s, then the idle window (${idleS} s)`);
    await sleep(settleS * 1000);

    let gen: ScalingLoadGenerator | null = null;
    const window = async (secs: number): Promise<WindowData> => {
      const u0 = gen ? gen.units(oauth, chat, await outboxApplied(ports)) : null;
      const [x0, r0] = [await pgTransactions(q), await redisTotal(redis.url)];
      const t0 = Date.now();
      monitor.begin();
      await sleep(secs * 1000);
      const redisTally = monitor.end();
      const t1 = Date.now();
      const [x1, r1] = [await pgTransactions(q), await redisTotal(redis.url)];
      const u1 = gen ? gen.units(oauth, chat, await outboxApplied(ports)) : null;
      const backends = await pgBackends(q);
      await sleep(1500); // the server log is written as it goes; let the window's last lines land
      const entries = await loggedStatements(db.name, t0, t1);
      const zero = {
        refreshes: 0,
        monitorChecks: 0,
        tokenReads: 0,
        snapshotReads: 0,
        snapshotChanges: 0,
        usageBatches: 0,
        usageEvents: 0,
        quotaRequests: 0,
        quotaIncrements: 0,
        outboxApplied: 0,
        failures: 0,
      };
      return windowData((t1 - t0) / 1000, tallyStatements(entries), x1 - x0 - 2, redisTally, r1 - r0 - 1, u0 && u1 ? unitsDelta(u0, u1) : zero, backends);
    };
    const idle = await window(idleS);
    log(`idle window: ${Object.values(idle.pg).reduce((s, t) => s + t.statements, 0)} statements, ${idle.redisTotal} Redis commands`);

    // The accounts: tokens due (lifetime − margin) spread over one refresh period from now.
    const accounts = Array.from({ length: load.accounts }, (_, i) => ({
      platform: 'openai',
      name: `scale-${i}`,
      credentials: oauth.issue(`scale-${i}`, load.refreshMarginS + 5 + Math.round((i / load.accounts) * load.refreshPeriodS)),
    }));
    const accountIds: number[] = [];
    for (let i = 0; i < accounts.length; i += 1000) {
      const r = await call(0, '/accounts/import', { accounts: accounts.slice(i, i + 1000) });
      accountIds.push(...(r.ids as number[]));
    }
    for (let m = 0; m < load.monitors; m++) chat.addApiKey(`scale-key-${m}`);
    for (let m = 0; m < load.monitors; m++)
      await call(m % replicas, '/monitors', {
        name: `scale-m${m}`,
        provider: 'openai',
        base_url: chat.url,
        model: 'gpt-scaling',
        api_key: `scale-key-${m}`,
        interval: `${load.monitorIntervalS}s`,
        timeout: '5s',
      });
    for (const deadline = Date.now() + 60_000; (await call(0, '/scheduler/accounts?platform=openai')).source !== 'snapshot';) {
      if (Date.now() > deadline) throw new Error('scaling bench: the openai bucket never served from the snapshot');
      await sleep(200);
    }
    gen = new ScalingLoadGenerator(load, replicas, call, accountIds, uniqueName('sc'));
    gen.start();
    log(`seeded ${accountIds.length} accounts and ${load.monitors} monitors; load on, settling ${settleS} s, then the load window (${steadyS} s)`);
    await sleep(settleS * 1000);
    const loaded = await window(steadyS);
    await gen.stop();
    log(`load window: ${Object.values(loaded.pg).reduce((s, t) => s + t.statements, 0)} statements, ${loaded.redisTotal} Redis commands, units ${JSON.stringify(loaded.units)}`);
    return { replicas, load: { ...load }, idle, loaded, errors: gen.errors };
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }
}

/** `BENCH_ONLY=scaling`: every replica count of BENCH_REPLICAS (1,3,9), or the runs of BENCH_SCALING_FROM; the runs are kept in BENCH_SCALING_OUT. */
export async function scaling(): Promise<void> {
  if (process.env.BENCH_SCALING_FROM) {
    const { machine, runs } = loadRuns(process.env.BENCH_SCALING_FROM);
    return console.log(report(machine, runs));
  }
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, load average ${loadavg()[0]!.toFixed(1)} at the start, ${new Date().toISOString()}`;
  const out = process.env.BENCH_SCALING_OUT ?? join(tmpdir(), `relay-jobs-scaling-${Date.now()}.json`);
  const runs: RunData[] = [];
  for (const n of (process.env.BENCH_REPLICAS ?? '1,3,9').split(',').map(Number)) {
    runs.push(await runScaling(n));
    saveRuns(out, runs, machine);
  }
  log(`runs kept in ${out} (BENCH_SCALING_FROM=${out} renders them again)`);
  console.log(report(`${machine}, load average ${loadavg()[0]!.toFixed(1)} at the end`, runs));
}
