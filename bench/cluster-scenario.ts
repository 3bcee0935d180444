/**
 * The issue-18 scenario with real processes: N replicas (`relay-jobs start`), one 1 s cluster job
 * (the canary, sleeping 300 ms, lock_ttl 3 s), every other job off, default heartbeat.
 *   steady state (STEADY_S) → PostgreSQL transactions/s and Redis commands/s (`footprint()` in
 *   replicas.ts: the bench database's commits + rollbacks, a private redis-server's commands);
 *   SIGKILL of the replica mid-round → failover time (kill → next round started elsewhere) and
 *   slots missed; Redis killed for 5 s and restarted → rounds during the outage; SIGTERM all.
 * At the end, from the records: duplicate slots, overlapping rounds, missed slots over the run.
 *
 * `BENCH_CLI=/path/to/dist/cli/main.js` runs another build (the "before" figures come from the
 * base commit built in a scratch worktree). `BENCH_REPLICAS=3,9`.
 */
import { spawn } from 'node:child_process';
import pg from 'pg';
import { CLI, ServiceProcess, cleanEnv } from '../test/helpers/cli.js';
import { PrivateRedis, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { CANARY_EVERY_SECOND, OTHER_JOBS, footprint, jobsOff, replicaEnv, sleep } from './replicas.js';
import { autovacuumRuns, logStatements, printAttribution, redisCommandStats, statementCounts, statementsWanted } from './statement-log.js';

export interface ScenarioResult {
  replicas: number;
  pgXactPerSec: number;
  redisCmdsPerSec: number;
  failoverMs: number;
  missedAfterKill: number;
  outageRounds: number;
  missedTotal: number;
  slots: number;
  duplicates: number;
  overlaps: number;
}

export async function runScenario(replicas: number, cli = CLI, steadyS = Number(process.env.BENCH_STEADY_S ?? 20)): Promise<ScenarioResult> {
  const db = await freshDatabase();
  const redis = await PrivateRedis.start();
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const procs: ServiceProcess[] = [];
  try {
    if (statementsWanted()) await logStatements((text) => sql.query(text), db.name);
    const prefix = uniqueName('rjscn');
    for (let i = 0; i < replicas; i++) {
      const env = await replicaEnv(
        `s${i}`,
        { dbUrl: db.url, redisUrl: redis.url, prefix },
        {
          RELAY_JOBS__REDIS__COMMAND_TIMEOUT: '300ms',
          RELAY_JOBS__DATABASE__POOL_SIZE: '3',
          RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: String(replicas),
          ...CANARY_EVERY_SECOND,
          RELAY_JOBS__LOGGING__LEVEL: 'warn',
          ...jobsOff([...OTHER_JOBS, 'token_refresh']),
        },
      );
      procs.push(new ServiceProcess(`s${i}`, spawn(process.execPath, [cli, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })));
    }
    const q = async (text: string, params: unknown[] = []) => (await sql.query(text, params)).rows;
    const dbNow = async () => Number((await q(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`))[0].t);
    // Started: every replica registered and a few rounds ran.
    for (let i = 0; i < 600; i++) {
      const [r] = await q(`SELECT (SELECT count(*) FROM instances)::int AS i, (SELECT count(*) FROM canary_runs WHERE phase = 'end')::int AS e`).catch(() => [{ i: 0, e: 0 }]); // not migrated yet
      if (r.i === replicas && r.e >= 3) break;
      for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`${p.name} exited:\n${p.lines.slice(-10).join('\n')}`);
      await sleep(100);
    }
    await sleep(3000);

    // ---- steady state ----
    const [t0, r0, v0] = statementsWanted() ? [Date.now(), await redisCommandStats(redis.url), await autovacuumRuns(q)] : [Date.now(), new Map<string, number>(), 0];
    const { pgTxPerSec: pgXactPerSec, redisCmdsPerSec } = await footprint(q, redis.url, steadyS);
    if (statementsWanted()) {
      const [t1, r1] = [Date.now(), await redisCommandStats(redis.url)];
      printAttribution(`peers scenario, ${replicas} replicas`, await statementCounts(db.name, t0, t1), r0, r1, (t1 - t0) / 1000);
      console.log(`\nautovacuum/autoanalyze runs in the window: ${(await autovacuumRuns(q)) - v0}`);
    }
    // BENCH_STEADY_ONLY=1: the footprint only (no failover, no outage).
    if (process.env.BENCH_STEADY_ONLY === '1')
      return { replicas, pgXactPerSec, redisCmdsPerSec, failoverMs: NaN, missedAfterKill: 0, outageRounds: 0, missedTotal: 0, slots: 0, duplicates: 0, overlaps: 0 };

    // ---- SIGKILL the replica in the middle of a round ----
    let victim: ServiceProcess | undefined;
    for (let i = 0; i < 500 && !victim; i++) {
      const [row] = await q(
        `SELECT instance_id FROM job_runs WHERE job_name = 'canary' AND status = 'running' AND started_at BETWEEN clock_timestamp() - interval '200 milliseconds' AND clock_timestamp() - interval '30 milliseconds'`,
      );
      victim = row && procs.find((p) => p.name === row.instance_id);
      if (!victim) await sleep(10);
    }
    if (!victim) throw new Error('no replica caught mid-round');
    victim.proc.kill('SIGKILL');
    await victim.exited;
    const killedAt = await dbNow();
    let next: { start: number; slot: number } | undefined;
    for (let i = 0; i < 1000 && !next; i++) {
      const [row] = await q(
        `SELECT extract(epoch FROM s.at) * 1000 AS start, extract(epoch FROM s.slot) * 1000 AS slot FROM canary_runs s
          WHERE s.phase = 'start' AND s.at > to_timestamp($1 / 1000.0) AND s.instance_id <> $2 ORDER BY s.at LIMIT 1`,
        [killedAt, victim.name],
      );
      if (row) next = { start: Number(row.start), slot: Number(row.slot) };
      else await sleep(20);
    }
    if (!next) throw new Error('no round after the kill');
    const failoverMs = next.start - killedAt;
    const missedAfterKill = Math.max(0, Math.round((next.slot - Math.ceil(killedAt / 1000) * 1000) / 1000));
    await sleep(4000);

    // ---- Redis killed for 5 s, then restarted empty ----
    await redis.stop();
    const downAt = await dbNow();
    await sleep(5000);
    await redis.start();
    const upAt = await dbNow();
    await sleep(4000);
    const [outage] = await q(
      `SELECT count(*)::int AS n FROM job_runs WHERE job_name = 'canary' AND fencing_token IS NOT NULL AND started_at BETWEEN to_timestamp($1 / 1000.0) AND to_timestamp($2 / 1000.0)`,
      [downAt, upAt],
    );

    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.exited));

    // ---- the evidence ----
    const [dup] = await q(`SELECT count(*)::int AS n FROM (SELECT slot FROM canary_runs WHERE phase = 'start' GROUP BY slot HAVING count(*) > 1) d`);
    const rounds = await q(`
      SELECT s.fencing_token, extract(epoch FROM s.slot) * 1000 AS slot, extract(epoch FROM s.at) * 1000 AS start,
             COALESCE(extract(epoch FROM e.at) * 1000, extract(epoch FROM r.finished_at) * 1000) AS "end", r.instance_id
        FROM canary_runs s JOIN job_runs r ON r.fencing_token = s.fencing_token AND r.job_name = 'canary'
        LEFT JOIN canary_runs e ON e.fencing_token = s.fencing_token AND e.phase = 'end'
       WHERE s.phase = 'start' ORDER BY s.at`);
    let overlaps = 0;
    for (let i = 1; i < rounds.length; i++) {
      const prev = rounds[i - 1];
      const end = prev.instance_id === victim.name && prev.end === null ? killedAt : Number(prev.end);
      if (Number(rounds[i].start) < end) overlaps++;
    }
    const slots = rounds.map((r) => Number(r.slot));
    const first = Math.min(...slots);
    const last = Math.max(...slots);
    const missedTotal = (last - first) / 1000 + 1 - new Set(slots).size;
    return { replicas, pgXactPerSec, redisCmdsPerSec, failoverMs, missedAfterKill, outageRounds: outage.n, missedTotal, slots: new Set(slots).size, duplicates: dup.n, overlaps };
  } finally {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGKILL');
    await sql.end();
    await redis.stop();
    await db.drop();
  }
}

export function scenarioTable(rows: Array<ScenarioResult & { build: string }>): string {
  const out = [
    '| build | replicas | PG xact/s | Redis cmds/s | failover ms | missed after kill | rounds in 5 s Redis outage | slots | missed | duplicates | overlaps |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    out.push(
      `| ${r.build} | ${r.replicas} | ${r.pgXactPerSec.toFixed(1)} | ${r.redisCmdsPerSec.toFixed(1)} | ${Math.round(r.failoverMs)} | ${r.missedAfterKill} | ${r.outageRounds} | ${r.slots} | ${r.missedTotal} | ${r.duplicates} | ${r.overlaps} |`,
    );
  }
  return out.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const counts = (process.env.BENCH_REPLICAS ?? '3,9').split(',').map(Number);
  const builds: Array<[string, string]> = [['this build', CLI]];
  if (process.env.BENCH_BASE_CLI) builds.unshift(['before (base)', process.env.BENCH_BASE_CLI]);
  const rows: Array<ScenarioResult & { build: string }> = [];
  for (const n of counts) for (const [build, cli] of builds) rows.push({ build, ...(await runScenario(n, cli)) });
  console.log(scenarioTable(rows));
}
