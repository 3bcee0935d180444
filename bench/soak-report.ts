/**
 * What the soak measured, as Markdown: the run's settings, per-job p99 lateness (job_runs: start −
 * slot), PostgreSQL transactions/s and Redis commands/s per replica over time (the servers' own
 * counters every 10 s, divided by the replicas alive: neither server can tell one replica's
 * statements from another's behind one role and PgBouncer), RSS per replica over time with the
 * growth after warm-up, what each fault cost, and the invariants.
 */
import pg from 'pg';
import { Redis } from 'ioredis';
import { alive, rssMiB, type SoakReplica, type SoakServers } from './soak-services.js';
import type { FaultRecord } from './soak-faults.js';
import type { Failure } from './soak-load.js';
import type { Verdict } from './soak-check.js';
import { cpuShare, type Component, type Ticks } from './soak-cpu.js';

export interface Sample {
  at: number;
  live: number;
  pgTx: number | null;
  redisCmds: number | null;
  rss: Record<string, number | null>;
  cpu: Ticks;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function redisTotal(port: number): Promise<number | null> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 1000 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return Number(/^total_commands_processed:(\d+)/m.exec(await c.info('stats'))?.[1] ?? NaN);
  } catch {
    return null;
  } finally {
    c.disconnect();
  }
}

/** Every 10 s until stopped: the servers' counters and each replica's RSS. */
export class Sampler {
  readonly samples: Sample[] = [];
  private stopped = false;
  private loop: Promise<void> | null = null;

  constructor(
    private readonly sql: pg.Pool,
    private readonly servers: SoakServers,
    private readonly replicas: SoakReplica[],
    private readonly cpu: () => Ticks,
  ) {}

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        const pgTx = await this.sql
          .query(`SELECT pg_stat_clear_snapshot(); SELECT sum(xact_commit + xact_rollback)::bigint AS n FROM pg_stat_database WHERE datname = 'postgres'`)
          .then((r) => Number((r as unknown as pg.QueryResult[])[1]!.rows[0].n))
          .catch(() => null);
        const port = await this.servers.sentinel.primaryPort().catch(() => null);
        const redisCmds = port === null ? null : await redisTotal(port);
        const rss: Record<string, number | null> = {};
        for (const r of this.replicas) rss[r.id] = alive(r) ? rssMiB(r.proc.proc.pid) : null;
        this.samples.push({ at: Date.now(), live: this.replicas.filter(alive).length, pgTx, redisCmds, rss, cpu: this.cpu() });
        for (let i = 0; i < 100 && !this.stopped; i++) await sleep(100);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.max(0, Math.ceil(p * s.length) - 1)]! : NaN;
};
const f0 = (n: number | null) => (n === null || Number.isNaN(n) ? '–' : n.toFixed(0));
const f1 = (n: number | null) => (n === null || Number.isNaN(n) ? '–' : n.toFixed(1));

/**
 * Per job: start − slot of every round since `since`. A process's first instance round of a job is
 * apart: instance jobs keep no last slot (every replica runs every slot), so a process that starts
 * runs an `every` job's slot at or before its start at once, whose lateness is only how far into the period it
 * came up (a restart late in a 60 s period reads ~60 s). `spawns`: when each replica's processes were
 * started; a round whose slot is before the start of the process that ran it is a start-up round.
 */
export async function lateness(sql: pg.Pool, since: Date, spawns: { instance: string; at: number }[]): Promise<string[]> {
  const late = `extract(epoch FROM started_at - slot) * 1000`;
  const { rows } = await sql.query(
    `WITH s AS (SELECT x.instance, to_timestamp(x.at / 1000.0) AS at FROM jsonb_to_recordset($2::jsonb) AS x(instance text, at double precision)),
     r AS (SELECT job_name, status, ${late} AS late,
                  scope = 'instance' AND EXISTS (SELECT 1 FROM s WHERE s.instance = job_runs.instance_id AND s.at > job_runs.slot AND s.at <= job_runs.started_at) AS startup
             FROM job_runs WHERE started_at >= $1 AND status NOT LIKE 'skipped%')
     SELECT job_name, count(*) FILTER (WHERE NOT startup)::int AS rounds,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY late) FILTER (WHERE NOT startup) AS p50,
            percentile_cont(0.99) WITHIN GROUP (ORDER BY late) FILTER (WHERE NOT startup) AS p99,
            max(late) FILTER (WHERE NOT startup) AS max,
            count(*) FILTER (WHERE startup)::int AS startup, max(late) FILTER (WHERE startup) AS startup_max,
            count(*) FILTER (WHERE status IN ('failed', 'timed_out'))::int AS bad
       FROM r GROUP BY job_name ORDER BY job_name`,
    [since, JSON.stringify(spawns)],
  );
  const n = (v: unknown) => (v === null ? null : Number(v));
  return [
    '| job | rounds | p50 late ms | p99 late ms | max late ms | start-up rounds (max late ms) | failed or timed out |',
    '|---|---|---|---|---|---|---|',
    ...rows.map((r) => `| ${r.job_name} | ${r.rounds} | ${f0(n(r.p50))} | ${f0(n(r.p99))} | ${f0(n(r.max))} | ${r.startup ? `${r.startup} (${f0(n(r.startup_max))})` : '0'} | ${r.bad} |`),
  ];
}

/** Per minute: PostgreSQL transactions/s and Redis commands/s per live replica (a counter reset by a restart is skipped). */
export function footprintTable(samples: Sample[], t0: number): string[] {
  const out = ['| minute | replicas alive | PG xact/s per replica | Redis cmds/s per replica |', '|---|---|---|---|'];
  const byMinute = new Map<number, { pg: number[]; redis: number[]; live: number[] }>();
  for (let i = 1; i < samples.length; i++) {
    const [a, b] = [samples[i - 1]!, samples[i]!];
    const secs = (b.at - a.at) / 1000;
    const m = Math.floor((b.at - t0) / 60_000);
    const e = byMinute.get(m) ?? { pg: [], redis: [], live: [] };
    if (a.pgTx !== null && b.pgTx !== null && b.pgTx >= a.pgTx) e.pg.push((b.pgTx - a.pgTx) / secs / Math.max(1, b.live));
    if (a.redisCmds !== null && b.redisCmds !== null && b.redisCmds >= a.redisCmds) e.redis.push((b.redisCmds - a.redisCmds) / secs / Math.max(1, b.live));
    e.live.push(b.live);
    byMinute.set(m, e);
  }
  const mean = (xs: number[]) => (xs.length ? xs.reduce((s, x) => s + x, 0) / xs.length : NaN);
  for (const [m, e] of [...byMinute].sort((x, y) => x[0] - y[0])) out.push(`| ${m} | ${Math.min(...e.live)}–${Math.max(...e.live)} | ${f1(mean(e.pg))} | ${f1(mean(e.redis))} |`);
  return out;
}

/** RSS per replica each minute, and the growth from the first minute after warm-up to the last minute (a restarted replica starts over). */
export function rssTable(samples: Sample[], replicas: SoakReplica[], t0: number, warmupMs: number): { lines: string[]; worstGrowthPct: number } {
  const minutes = [...new Set(samples.map((s) => Math.floor((s.at - t0) / 60_000)))].filter((m) => m >= 0);
  const at = (id: string, m: number) => {
    const xs = samples.filter((s) => Math.floor((s.at - t0) / 60_000) === m && s.rss[id] != null).map((s) => s.rss[id]!);
    return xs.length ? xs[xs.length - 1]! : null;
  };
  const lines = [`| replica | ${minutes.map((m) => `min ${m}`).join(' | ')} | growth after warm-up |`, `|---|${minutes.map(() => '---|').join('')}---|`];
  let worst = 0;
  const warmMin = Math.ceil(warmupMs / 60_000);
  for (const r of replicas) {
    const restarted = r.history.length > 1;
    const first = at(r.id, warmMin);
    const last = at(r.id, minutes[minutes.length - 1] ?? 0);
    const growth = !restarted && first !== null && last !== null ? ((last - first) / first) * 100 : null;
    if (growth !== null) worst = Math.max(worst, growth);
    lines.push(`| ${r.id} | ${minutes.map((m) => f0(at(r.id, m))).join(' | ')} | ${growth === null ? 'restarted (not comparable)' : `${growth.toFixed(1)} %`} |`);
  }
  return { lines, worstGrowthPct: worst };
}

/** Per fault: when the canary's rounds ran again (first ok round started after the fault began and after it ended), and the requests that failed meanwhile. */
export async function faultCosts(sql: pg.Pool, faults: FaultRecord[], failures: Failure[], t0: number): Promise<string[]> {
  const out = [
    '| +s | fault | target | held ms | first ok round after it ended (ms after the fault began) | failed requests in the next 60 s (usage / image / snapshot) |',
    '|---|---|---|---|---|---|',
  ];
  for (const f of faults) {
    const { rows } = await sql.query(`SELECT min(started_at) AS t FROM job_runs WHERE job_name = 'canary' AND status = 'ok' AND started_at >= $1`, [new Date(f.endedAt)]);
    const resumed = rows[0].t ? (rows[0].t as Date).getTime() - f.startedAt : null;
    const near = failures.filter((x) => x.at >= f.startedAt && x.at < f.endedAt + 60_000);
    const n = (w: string) => near.filter((x) => x.what.startsWith(w)).length;
    out.push(
      `| ${((f.startedAt - t0) / 1000).toFixed(0)} | ${f.kind}${f.error ? ` (failed: ${f.error})` : ''} | ${f.target} | ${f.endedAt - f.startedAt} | ${f0(resumed)} | ${n('usage')} / ${n('image')} / ${n('snapshot')} |`,
    );
  }
  return out;
}

export function verdictLines(vs: Verdict[]): string[] {
  const out = ['| invariant | holds | measured |', '|---|---|---|'];
  for (const v of vs) out.push(`| ${v.invariant} | ${v.ok ? 'yes' : '**NO**'} | ${v.measured.replace(/\|/g, '/')} |`);
  for (const v of vs.filter((x) => !x.ok)) out.push('', `**Broken: ${v.invariant}.** Examples:`, ...v.examples.map((e) => `- ${e.replace(/\|/g, '/')}`));
  return out;
}

/** Each component's CPU (share of one core): over the whole run and in its busiest minute; summed interval by interval, so a restarted process's counter starting over loses only one interval. */
export function cpuTable(samples: Sample[]): string[] {
  const out = ['| component | mean CPU % of one core | busiest 1-minute window % |', '|---|---|---|'];
  if (samples.length < 2) return out;
  const steps = samples.slice(1).map((b, i) => ({ at: b.at, secs: (b.at - samples[i]!.at) / 1000, share: cpuShare(samples[i]!.cpu, b.cpu, 1) }));
  for (const k of Object.keys(samples[0]!.cpu) as Component[]) {
    const total = steps.reduce((s, x) => s + x.share[k], 0);
    const secs = steps.reduce((s, x) => s + x.secs, 0);
    let peak = 0;
    for (let i = 0; i < steps.length; i++) {
      let sum = 0;
      let win = 0;
      for (let j = i; j < steps.length && steps[j]!.at - steps[i]!.at < 60_000; j++) {
        sum += steps[j]!.share[k];
        win += steps[j]!.secs;
      }
      if (win >= 30) peak = Math.max(peak, sum / win);
    }
    out.push(`| ${k} | ${(total / secs).toFixed(0)} | ${peak.toFixed(0)} |`);
  }
  return out;
}

export { pct };
