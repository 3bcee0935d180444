/**
 * "A big relay's day" (issue 53 point 3; `BENCH_ONLY=soak npm run bench`, `npm run soak:ci`): N
 * replicas (SOAK_REPLICAS, 9) on a private PostgreSQL behind a private PgBouncer and a private
 * Redis Sentinel set, the strict provider fakes, every default job on (and the canary every second,
 * the yardstick for when rounds resumed after a fault), the issue's load times SOAK_SCALE, for
 * SOAK_MINUTES under the seeded fault schedule (SOAK_SEED). Then the invariant checker; the report
 * is printed as Markdown (and written to SOAK_REPORT, docs/soak-report.md for a run of 20 minutes
 * or more). A broken invariant makes the run fail, naming each one with examples.
 */
import { execFileSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { TEST_MASTER_KEY, freePort, uniqueName } from '../test/helpers/services.js';
import { faultSchedule, loadAt, settingsFromEnv } from './soak-schedule.js';
import { Supervisor, alive, closeAll, privateCli, startReplica, startServers, type SoakReplica, type SoakServers } from './soak-services.js';
import { ADMIN, closeFakes, fakeEnv, seed, startFakes, type Api, type Fakes } from './soak-setup.js';
import { LoadGenerator } from './soak-load.js';
import { FaultPlayer } from './soak-faults.js';
import { epochsForward, healthyAfterFaults, moneyConserved, noLapse, refreshTokensOnce, slotsOnce, usageExactlyOnce } from './soak-check.js';
import { Sampler, cpuTable, faultCosts, footprintTable, lateness, rssTable, verdictLines } from './soak-report.js';
import { cpuTicks } from './soak-cpu.js';

/** The default scale: what this 2-core machine carried beside other work (docs/soak-report.md, "Scale"). */
export const DEFAULT_SCALE = 0.01;
const OK_HEALTH = new Set(['healthy', 'idle', 'disabled', 'paused']);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const log = (line: string) => console.error(`[soak ${new Date().toISOString().slice(11, 19)}] ${line}`);

async function jobsView(r: SoakReplica): Promise<Array<{ name: string; scope: string; health: string; health_reason: string }>> {
  const res = await fetch(`http://127.0.0.1:${r.port}/api/v1/jobs`, { headers: { authorization: `Bearer ${ADMIN}` }, signal: AbortSignal.timeout(10_000) });
  if (!res.ok) throw new Error(`GET /jobs on ${r.id}: ${res.status}`);
  return ((await res.json()) as { jobs: Array<{ name: string; scope: string; health: string; health_reason: string }> }).jobs;
}

async function waitReady(replicas: SoakReplica[], timeoutMs = 300_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (const r of replicas)
    for (;;) {
      const ok = await fetch(`http://127.0.0.1:${r.port}/readyz`, { signal: AbortSignal.timeout(5000) })
        .then((x) => x.ok)
        .catch(() => false);
      if (ok) break;
      if (!alive(r) || Date.now() > deadline) throw new Error(`soak: replica ${r.id} not ready:\n${r.proc.lines.slice(-15).join('\n')}`);
      await sleep(250);
    }
}

/** Runs at least this long judge RSS growth after warm-up (shorter ones report it). */
const RSS_JUDGED_FROM_MS = 10 * 60_000;

export async function runSoak(): Promise<{ report: string; broken: string[] }> {
  const s = settingsFromEnv(process.env, { seed: randomInt(0, 2 ** 31), minutes: 20, replicas: 9, scale: DEFAULT_SCALE });
  const load = loadAt(s);
  const schedule = faultSchedule(s);
  const runMs = s.minutes * 60_000;
  log(`seed ${s.seed} (SOAK_SEED=${s.seed} replays this schedule), scale ${s.scale}, ${s.minutes} min, ${s.replicas} replicas`);
  log(`load: ${JSON.stringify(load)}`);
  log(`faults: ${schedule.map((f) => `+${(f.atMs / 1000).toFixed(0)}s ${f.kind}${f.replica === undefined ? '' : `#${f.replica}`}`).join(', ')}`);
  let servers: SoakServers | null = null;
  let fakes: Fakes | null = null;
  const replicas: SoakReplica[] = [];
  let sql: pg.Pool | null = null;
  let dataDir: string | null = null;
  let cli: ReturnType<typeof privateCli> | null = null;
  try {
    servers = await startServers();
    sql = new pg.Pool({ connectionString: servers.directUrl, max: 3 });
    sql.on('error', () => undefined);
    const db = await PgDb.connect({ url: servers.directUrl, poolSize: 2, connectTimeoutMs: 5000 });
    await migrate(db).finally(() => db.close());
    fakes = await startFakes(load, s.minutes * 60, s.seed);
    cli = privateCli();
    dataDir = mkdtempSync(join(tmpdir(), 'rj-soak-data-'));
    const prefix = uniqueName('rjsoak');
    for (let i = 0; i < s.replicas; i++) {
      const port = await freePort();
      const env: Record<string, string> = {
        DATABASE_URL: servers.dbUrl,
        DATABASE_DIRECT_URL: servers.directUrl,
        REDIS_URL: servers.sentinel.url,
        RELAY_JOBS_INSTANCE_ID: `soak${i}`,
        RELAY_JOBS_ENV: 'soak',
        RELAY_JOBS_HTTP_PORT: String(port),
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_DATA_DIR: dataDir,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: String(s.replicas),
        RELAY_JOBS__SHUTDOWN__GRACE: '5s',
        RELAY_JOBS__LOGGING__LEVEL: process.env.SOAK_LOG_LEVEL ?? 'warn',
        RELAY_JOBS__JOBS__CANARY__ENABLED: 'true',
        RELAY_JOBS__JOBS__CANARY__EVERY: '1s',
        ...fakeEnv(fakes),
      };
      replicas.push(startReplica(`soak${i}`, cli.cli, port, env));
    }
    await waitReady(replicas);
    log(`${replicas.length} replicas ready`);
    const api: Api = async (path, body, method) => {
      const r = replicas.filter(alive)[Math.floor(Math.random() * replicas.length) % replicas.filter(alive).length]!;
      const res = await fetch(`http://127.0.0.1:${r.port}/api/v1${path}`, {
        method: method ?? (body === undefined ? 'GET' : 'POST'),
        headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await res.text();
      return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : null, text };
    };
    const seedAt = Date.now();
    const seeded = await seed(api, sql, fakes, load, s.seed);
    log(`seeded in ${((Date.now() - seedAt) / 1000).toFixed(0)} s: ${seeded.accounts.length} accounts, ${seeded.monitors} monitors, ${seeded.plans} plans, ${seeded.users.size} billing users`);

    const redisPorts = [servers.sentinel.primary.port, servers.sentinel.replica.port, ...servers.sentinel.sentinels.map((x) => x.port)];
    const pgPort = servers.postgres.port;
    const sampler = new Sampler(sql, servers, replicas, () => cpuTicks({ replicaPids: replicas.filter(alive).map((r) => r.proc.proc.pid!), pgPort, redisPorts }));
    const tag = uniqueName('soak');
    const t0 = Date.now();
    sampler.start();
    const gen = new LoadGenerator(replicas, load, seeded, sql, tag, s.seed, runMs);
    gen.start();
    const supervisor = new Supervisor(replicas);
    supervisor.start();
    const player = new FaultPlayer(schedule, servers, replicas, log);
    const playing = player.play(t0);
    // From the end of the last fault, while the load goes on: until every job is healthy (at most 2.5 minutes).
    const health = playing.then(async () => {
      const lastFaultEnd = Math.max(...player.done.map((f) => f.endedAt));
      let unhealthy: string[] = ['never read'];
      while (Date.now() < lastFaultEnd + 150_000) {
        const r = replicas.find((x) => alive(x) && !x.stopped);
        const jobs = r ? await jobsView(r).catch(() => null) : null;
        unhealthy = jobs ? jobs.filter((j) => !OK_HEALTH.has(j.health)).map((j) => `${j.name}: ${j.health} (${j.health_reason})`) : ['GET /jobs failed'];
        if (jobs && unhealthy.length === 0) return { lastFaultEnd, healthyAt: Date.now(), unhealthy };
        await sleep(2000);
      }
      return { lastFaultEnd, healthyAt: null, unhealthy };
    });
    for (let m = 1; Date.now() < t0 + runMs; m++) {
      await sleep(Math.min(60_000, t0 + runMs - Date.now()));
      log(`+${m} min: ${gen.rec.acked.size} usage events acknowledged, ${gen.rec.failures.length} failed requests, ${player.done.length} faults, ${replicas.filter(alive).length} replicas alive`);
    }
    await playing;
    await gen.stop();
    log(`load stopped: ${gen.rec.acked.size}/${gen.rec.usageSent} usage events, ${gen.rec.imageAccepted.size} image batches accepted`);

    const { lastFaultEnd, healthyAt, unhealthy } = await health;
    const clusterJobs = (await jobsView(replicas.find(alive)!)).filter((j) => j.scope === 'cluster').map((j) => j.name);
    // The image batches drain (the money check reads them settled).
    const open = async () => Number((await sql!.query(`SELECT count(*) FROM image_batches WHERE state NOT IN ('completed', 'failed', 'cancelled', 'output_deleted')`)).rows[0].count);
    for (const end = Date.now() + 120_000; (await open()) > 0 && Date.now() < end;) await sleep(1000);
    await sampler.stop();
    await supervisor.stop();
    for (const r of replicas) r.held = true;
    const stoppedAt = Date.now();
    for (const r of replicas) if (alive(r)) r.proc.proc.kill('SIGTERM');
    // A replica that has not exited 60 s after SIGTERM (grace 5 s) is SIGKILLed and named.
    const codes = await Promise.all(replicas.map((r) => r.proc.exitedWithin(60_000).catch(() => 'hung')));
    const logDir = mkdtempSync(join(tmpdir(), `rj-soak-logs-${s.seed}-`));
    for (const r of replicas) for (const [n, p] of r.history.entries()) writeFileSync(join(logDir, `${r.id}-${n}.log`), `${p.lines.join('\n')}\n`);
    log(`replica logs: ${logDir}`);

    const verdicts = [
      await slotsOnce(sql, clusterJobs),
      await usageExactlyOnce(sql, gen.rec, tag),
      await moneyConserved(sql, seeded.users),
      refreshTokensOnce(fakes),
      await noLapse(sql, gen.rec, seeded.accounts, stoppedAt, player.done.filter((f) => f.kind === 'sigkill').length),
      epochsForward(
        gen.rec,
        100,
        player.done.filter((f) => f.kind === 'postgres_restart' || f.kind === 'pgbouncer_restart').map((f) => ({ from: f.startedAt, to: f.endedAt })),
      ),
      healthyAfterFaults(lastFaultEnd, healthyAt, unhealthy),
      {
        invariant: 'every replica exited 0 on SIGTERM at the end',
        ok: codes.every((c) => c === 0),
        measured: codes.map((c, i) => `${replicas[i]!.id}:${c}`).join(' '),
        examples: replicas.flatMap((r, i) => (codes[i] === 0 ? [] : [`${r.id} (${codes[i]}, process ${r.history.length}): ${r.proc.lines.slice(-4).join(' / ').slice(0, 600)}`])),
      },
    ];
    const rss = rssTable(sampler.samples, replicas, t0, runMs * 0.2);
    const achieved = gen.rec.acked.size / (runMs / 1000);
    const report = [
      `# Soak: a big relay's day (issue 53)`,
      '',
      `machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date(t0).toISOString()}`,
      '',
      `seed **${s.seed}**, SOAK_SCALE **${s.scale}** of the issue's load, ${s.minutes} minutes, ${s.replicas} replicas (PgBouncer transaction mode + DATABASE_DIRECT_URL, Redis Sentinel)`,
      '',
      `| load (× ${s.scale}) | planned | achieved |`,
      '|---|---|---|',
      `| accounts (openai/anthropic/gemini) | ${load.accounts} | ${seeded.accounts.length}, refreshed at least once: see invariants |`,
      `| monitors at ${load.monitorIntervalS} s | ${load.monitors} | ${seeded.monitors} |`,
      `| account-test plans (every minute) | ${load.accountTestPlans} | ${seeded.plans} |`,
      `| usage events/s (batches of ${load.usageBatch}) | ${load.usageEventsPerSec} | ${achieved.toFixed(1)} acknowledged/s |`,
      `| image batches | ${load.imageBatches} | ${gen.rec.imageAccepted.size} accepted, ${gen.rec.imageRefused.size} refused for balance |`,
      `| snapshot changes/s | ${load.snapshotChangesPerSec} | ${(gen.rec.snapshotChanges / (runMs / 1000)).toFixed(2)} |`,
      '',
      '## Invariants',
      '',
      ...verdictLines(verdicts),
      '',
      '## What each fault cost',
      '',
      ...(await faultCosts(sql, player.done, gen.rec.failures, t0)),
      '',
      `Replicas that exited on their own (restarted a second later, as a process manager would): ${supervisor.exits.length}`,
      ...supervisor.exits.map((x) => `- +${((x.at - t0) / 1000).toFixed(0)} s ${x.replica} exited ${x.code}: ${x.tail.replace(/\|/g, '/')}`),
      '',
      "## Per-job lateness (start − slot, every round of the run; a process's first instance round of a job apart)",
      '',
      ...(await lateness(
        sql,
        new Date(t0),
        replicas.flatMap((r) => r.spawns.map((at) => ({ instance: r.id, at }))),
      )),
      '',
      '## PostgreSQL and Redis per replica (server counters every 10 s ÷ replicas alive)',
      '',
      ...footprintTable(sampler.samples, t0),
      '',
      '## CPU by component',
      '',
      ...cpuTable(sampler.samples),
      '',
      `## RSS per replica (MiB, last sample of each minute); worst growth after warm-up (first ${(runMs * 0.2) / 60_000} min): ${rss.worstGrowthPct.toFixed(1)} %`,
      '',
      ...rss.lines,
    ].join('\n');
    const broken = verdicts.filter((v) => !v.ok).map((v) => `${v.invariant}: ${v.measured}; e.g. ${v.examples.slice(0, 3).join('; ')}`);
    // The issue's bound is for the day's run: in a run under 10 minutes the "warm-up" (its first
    // fifth) ends before the caches have filled (at SOAK_SCALE 0.1, 10,000 accounts' tokens and
    // snapshot buckets), so the growth is reported there but not judged.
    if (rss.worstGrowthPct >= 10 && runMs >= RSS_JUDGED_FROM_MS) broken.push(`RSS grew ${rss.worstGrowthPct.toFixed(1)} % after warm-up (limit 10 %)`);
    return { report, broken };
  } finally {
    await closeAll(servers, replicas);
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    cli?.remove();
    await closeFakes(fakes);
    await sql?.end().catch(() => undefined);
  }
}

/** Runs the soak, prints the report, writes it where asked, and throws naming each broken invariant. */
export async function soak(): Promise<void> {
  const { report, broken } = await runSoak();
  console.log(report);
  const minutes = Number(process.env.SOAK_MINUTES ?? 20);
  const out = process.env.SOAK_REPORT ?? (minutes >= 20 ? 'docs/soak-report.md' : '');
  if (out) writeFileSync(out, `${report}\n`);
  if (broken.length) throw new Error(`soak: ${broken.length} invariant(s) broken:\n${broken.map((b) => `- ${b}`).join('\n')}`);
}

/**
 * `npm run soak:ci` (tsx bench/soak.ts): the CLI's test build made current (scripts/build.mjs
 * --if-stale, as the tests' global setup does), without the PGlite and PostgreSQL templates that
 * bench/run.ts's setup also makes and the soak does not use.
 */
if (import.meta.url === `file://${process.argv[1]}`) {
  execFileSync(process.execPath, ['scripts/build.mjs', '--out', '.test-dist', '--if-stale', '--bundle'], { stdio: 'inherit' });
  soak().then(
    () => process.exit(0),
    (err: Error) => {
      console.error(err.message);
      process.exit(1);
    },
  );
}
