/**
 * The scaling bench's Markdown (docs/scaling.md): the measured windows, the costs per replica and
 * per unit, and the projection of stated deployments against stated limits. `BENCH_SCALING_OUT`
 * keeps the runs as JSON; `BENCH_SCALING_FROM=<that file>` renders them again without running.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { PG_CLASSES, REDIS_CLASSES } from './scaling-classify.js';
import { FEATURES, accountsAtLimit, allPg, allRedis, deployment, project, rate, unitCost, type Limits, type PerAccount, type RunData } from './scaling-model.js';

export const saveRuns = (path: string, runs: RunData[], machine: string) => writeFileSync(path, JSON.stringify({ machine, runs }, null, 1));
export function loadRuns(path: string): { machine: string; runs: RunData[] } {
  return JSON.parse(readFileSync(path, 'utf8')) as { machine: string; runs: RunData[] };
}

const f1 = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
const f2 = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
const k = (x: number) => (x === Infinity ? 'never' : x >= 1e6 ? `${(x / 1e6).toFixed(1)} M` : x >= 1e3 ? `${(x / 1e3).toFixed(0)} k` : x.toFixed(0));

/** The assumptions of docs/scaling.md: the issue's load per 100,000 accounts, times ten for a million. */
export const PER_ACCOUNT: PerAccount = {
  refreshesPerAccountPerSec: 80 / 100_000,
  monitorChecksPerAccountPerSec: 10_000 / 60 / 100_000,
  usageEventsPerAccountPerSec: 5_000 / 100_000,
  usageBatchSize: 100,
  accountChangesPerAccountPerSec: 100 / 100_000,
  gatewayReplicas: 10,
};

export const LIMITS: Limits = { pgStatementsPerSec: 50_000, pgWriteTransactionsPerSec: 10_000, pgConnections: 100, redisOpsPerSec: 100_000 };

export function measuredTable(runs: RunData[]): string {
  const out = [
    '| replicas | window | s | PG statements/s (log) | PG transactions/s (log) | of which need the primary | PG xact/s (pg_stat_database) | Redis ops/s (MONITOR, Lua inner calls included) | Redis commands/s (INFO) | PG backends |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of runs)
    for (const [name, w] of [
      ['idle', r.idle],
      ['load', r.loaded],
    ] as const)
      out.push(
        `| ${r.replicas} | ${name} | ${w.secs.toFixed(0)} | ${f1(rate(w, allPg(w), 'statements'))} | ${f1(rate(w, allPg(w), 'transactions'))} | ${f1(rate(w, allPg(w), 'primaryTransactions'))} | ${f1(w.pgXact / w.secs)} | ${f1(rate(w, allRedis(w), 'redis'))} | ${f1(w.redisTotal / w.secs)} | ${w.backends} |`,
      );
  return out.join('\n');
}

/** PostgreSQL statements/s by class: idle per replica, and load minus idle cluster-wide. */
export function classTable(runs: RunData[]): string {
  const ns = runs.map((r) => r.replicas);
  const out = [`| class | ${ns.map((n) => `idle, per replica (${n})`).join(' | ')} | ${ns.map((n) => `load − idle, cluster (${n})`).join(' | ')} |`, `|---|${ns.map(() => '---|---|').join('')}`];
  for (const c of PG_CLASSES) {
    if (runs.every((r) => !r.idle.pg[c] && !r.loaded.pg[c])) continue;
    const idle = runs.map((r) => f2(rate(r.idle, [c], 'statements') / r.replicas));
    const load = runs.map((r) => f2(rate(r.loaded, [c], 'statements') - rate(r.idle, [c], 'statements')));
    out.push(`| ${c} | ${idle.join(' | ')} | ${load.join(' | ')} |`);
  }
  return out.join('\n');
}

export function redisClassTable(runs: RunData[]): string {
  const ns = runs.map((r) => r.replicas);
  const out = [
    `| key family | ${ns.map((n) => `idle, per replica (${n})`).join(' | ')} | ${ns.map((n) => `load − idle, cluster (${n})`).join(' | ')} | commands (load, ${ns.at(-1)}) |`,
    `|---|${ns.map(() => '---|---|').join('')}---|`,
  ];
  for (const c of REDIS_CLASSES) {
    if (runs.every((r) => !r.idle.redis[c] && !r.loaded.redis[c] && !r.idle.lua[c] && !r.loaded.lua[c])) continue;
    const idle = runs.map((r) => f2(rate(r.idle, [c], 'redis') / r.replicas));
    const load = runs.map((r) => f2(rate(r.loaded, [c], 'redis') - rate(r.idle, [c], 'redis')));
    const last = runs.at(-1)!.loaded;
    const cmds = Object.entries(last.redis[c] ?? {})
      .sort((a, b) => b[1] - a[1])
      .map(([cmd, n]) => `${cmd} ${n}`)
      .concat(last.lua[c] ? [`(Lua inner ${last.lua[c]})`] : [])
      .join(', ');
    out.push(`| ${c} | ${idle.join(' | ')} | ${load.join(' | ')} | ${cmds} |`);
  }
  return out.join('\n');
}

export function unitsTable(runs: RunData[]): string {
  const out = ['| replicas | ' + FEATURES.map((f) => `${f.name} (${f.unit} per s)`).join(' | ') + ' | failed requests |', `|---|${FEATURES.map(() => '---|').join('')}---|`];
  for (const r of runs) out.push(`| ${r.replicas} | ${FEATURES.map((f) => f2((r.loaded.units[f.counter] ?? 0) / r.loaded.secs)).join(' | ')} | ${r.loaded.units.failures ?? 0} |`);
  return out.join('\n');
}

export function unitCostTable(runs: RunData[]): string {
  const ns = runs.map((r) => r.replicas);
  const cell = (r: RunData, i: number) => {
    const c = unitCost(r, FEATURES[i]!);
    return c ? `${f2(c.statements)} / ${f2(c.primaryTransactions)} / ${f2(c.redis)}` : '—';
  };
  const out = [`| feature | unit | ${ns.map((n) => `${n} replica${n > 1 ? 's' : ''}: PG statements / primary transactions / Redis ops`).join(' | ')} |`, `|---|---|${ns.map(() => '---|').join('')}`];
  FEATURES.forEach((f, i) => out.push(`| ${f.name} | ${f.unit} | ${runs.map((r) => cell(r, i)).join(' | ')} |`));
  return out.join('\n');
}

const pct = (x: number, l: number) => `${((x / l) * 100).toFixed(0)} %`;
const range = (lo: number, hi: number) => (Math.abs(hi - lo) < 0.5 ? f1(hi) : `${f1(lo)}–${f1(hi)}`);

/** Each deployment: per second, lower (batches full) – upper (as measured), and against the limits. */
export function projectionTable(runs: RunData[], deployments: Array<[string, number, number]>): string {
  const out = [
    '| deployment | replicas | accounts | PG statements/s | of which losing ticks | PG write transactions/s | Redis ops/s | PG statements / limit | PG writes / limit | Redis / limit | largest PG part | largest Redis part |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const [name, n, accounts] of deployments) {
    const p = project(runs, deployment(name, n, accounts, PER_ACCOUNT));
    const { lower: lo, upper: hi } = p;
    const top = (key: 'statements' | 'redis') => {
      const x = [...p.parts].sort((a, b) => b[key] - a[key])[0]!;
      return `${x.name} (${((x[key] / Math.max(1e-9, hi[key])) * 100).toFixed(0)} %)`;
    };
    const pr = (l: number, h: number, limit: number) => (pct(l, limit) === pct(h, limit) ? pct(h, limit) : `${pct(l, limit)}–${pct(h, limit)}`);
    out.push(
      `| ${name} | ${n} | ${k(accounts)} | ${range(lo.statements, hi.statements)} | ${f1(hi.losingTicks)} | ${range(lo.writes, hi.writes)} | ${range(lo.redis, hi.redis)} | ${pr(lo.statements, hi.statements, LIMITS.pgStatementsPerSec)} | ${pr(lo.writes, hi.writes, LIMITS.pgWriteTransactionsPerSec)} | ${pr(lo.redis, hi.redis, LIMITS.redisOpsPerSec)} | ${top('statements')} | ${top('redis')} |`,
    );
  }
  return out.join('\n');
}

export function partsTable(runs: RunData[], name: string, n: number, accounts: number): string {
  const p = project(runs, deployment(name, n, accounts, PER_ACCOUNT));
  const out = ['| part | load/s | PG statements/s | of which losing ticks | PG write transactions/s | Redis ops/s | units per batch when full (PG / Redis) |', '|---|---|---|---|---|---|---|'];
  for (const x of p.parts) {
    const f = FEATURES.find((g) => g.name === x.name);
    out.push(
      `| ${x.name} | ${f ? f1(p.deployment.perSec[x.name] ?? 0) : '—'} | ${f1(x.statements)} | ${f1(x.losingTicks)} | ${f1(x.writes)} | ${f1(x.redis)} | ${f ? `${f.pgBatch} / ${f.redisBatch}` : '—'} |`,
    );
  }
  out.push(`| **total, as measured** | | **${f1(p.upper.statements)}** | **${f1(p.upper.losingTicks)}** | **${f1(p.upper.writes)}** | **${f1(p.upper.redis)}** | |`);
  out.push(`| **total, batches full** | | **${f1(p.lower.statements)}** | **${f1(p.lower.losingTicks)}** | **${f1(p.lower.writes)}** | **${f1(p.lower.redis)}** | |`);
  return out.join('\n');
}

export function saturationTable(runs: RunData[], replicaCounts: number[]): string {
  const out = ['| replicas | accounts at the PG statement limit | accounts at the PG write limit | accounts at the Redis limit |', '|---|---|---|---|'];
  for (const n of replicaCounts) {
    const hi = accountsAtLimit(runs, n, PER_ACCOUNT, LIMITS, 'upper');
    const lo = accountsAtLimit(runs, n, PER_ACCOUNT, LIMITS, 'lower');
    const cell = (x: 'statements' | 'writes' | 'redis') => (k(hi[x]) === k(lo[x]) ? k(hi[x]) : `${k(hi[x])}–${k(lo[x])}`);
    out.push(`| ${n} | ${cell('statements')} | ${cell('writes')} | ${cell('redis')} |`);
  }
  return out.join('\n');
}

/** The statements behind each class in one window (the rules' audit). */
export function kindsList(r: RunData, which: 'idle' | 'loaded'): string {
  const w = r[which];
  const out: string[] = [];
  for (const c of PG_CLASSES) {
    const x = w.pg[c];
    if (!x) continue;
    out.push(`- **${c}** (${x.statements} statements, ${x.transactions} transactions): ${x.kinds.map(([s, n]) => `${n}× \`${s.replace(/`/g, "'")}\``).join('; ')}`);
  }
  return out.join('\n');
}

export function report(machine: string, runs: RunData[]): string {
  const last = runs.at(-1)!;
  return [
    `machine: ${machine}`,
    '',
    `load (cluster-wide, the same at every replica count): ${JSON.stringify(runs[0]!.load)}`,
    '',
    '## Measured windows',
    '',
    measuredTable(runs),
    '',
    '## Units answered in the load window (per second)',
    '',
    unitsTable(runs),
    '',
    '## PostgreSQL statements/s by class',
    '',
    classTable(runs),
    '',
    '## Redis ops/s by key family',
    '',
    redisClassTable(runs),
    '',
    '## Cost per unit (load − idle of the feature\u2019s classes, over the units)',
    '',
    unitCostTable(runs),
    '',
    '## Projection',
    '',
    projectionTable(runs, [
      ['measured size, issue load', 9, 100_000],
      ['30 replicas, 1 M accounts', 30, 1_000_000],
      ['100 replicas, 1 M accounts', 100, 1_000_000],
    ]),
    '',
    partsTable(runs, '30 replicas, 1 M accounts', 30, 1_000_000),
    '',
    saturationTable(runs, [3, 9, 30, 50, 100]),
    '',
    `## Statement audit (load window, ${last.replicas} replicas)`,
    '',
    kindsList(last, 'loaded'),
    '',
    `## Statement audit (idle window, ${last.replicas} replicas)`,
    '',
    kindsList(last, 'idle'),
    ...runs.filter((r) => r.errors.length).map((r) => `\nerrors at ${r.replicas} replicas: ${r.errors.join(' | ')}`),
  ].join('\n');
}
