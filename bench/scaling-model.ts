/**
 * Scale on paper (docs/scaling.md): from the counted windows of 1, 3 and 9 replicas to per-replica
 * and per-unit costs, a straight-line fit of each cost over the replica count, and the load of a
 * stated deployment (replicas, accounts, per-account rates) on PostgreSQL and Redis against stated
 * limits. Pure functions: test/scaling-model.test.ts.
 */
import { FEATURES, WOKEN_TICKS_PER_SEC, type Feature } from './scaling-features.js';

export { BUCKETS_IN_USE, FEATURES, WOKEN_TICKS_PER_SEC, type Feature } from './scaling-features.js';

/** One window as the bench saves it (plain data: the JSON of a run re-renders the doc). */
export interface PgCount {
  statements: number;
  transactions: number;
  primaryTransactions: number;
  kinds: Array<[string, number]>;
}
export interface WindowData {
  secs: number;
  pg: Record<string, PgCount>;
  pgXact: number;
  redis: Record<string, Record<string, number>>;
  lua: Record<string, number>;
  redisTotal: number;
  units: Record<string, number>;
  backends: number;
}
export interface RunData {
  replicas: number;
  load: Record<string, number>;
  idle: WindowData;
  loaded: WindowData;
  errors: string[];
}

export type Metric = 'statements' | 'transactions' | 'primaryTransactions' | 'redis';

/**
 * Per second over the window: a PostgreSQL figure of `classes`, or the Redis operations of
 * `classes`: the commands clients sent plus the commands their Lua scripts ran (each costs Redis
 * about what a client command does).
 */
export function rate(w: WindowData, classes: readonly string[], metric: Metric): number {
  let n = 0;
  for (const c of classes) {
    if (metric === 'redis') n += Object.values(w.redis[c] ?? {}).reduce((s, x) => s + x, 0) + (w.lua[c] ?? 0);
    else n += w.pg[c]?.[metric] ?? 0;
  }
  return n / w.secs;
}

export const allPg = (w: WindowData) => Object.keys(w.pg);
export const allRedis = (w: WindowData) => [...new Set([...Object.keys(w.redis), ...Object.keys(w.lua)])];

export interface UnitCost {
  statements: number;
  transactions: number;
  primaryTransactions: number;
  redis: number;
}

/** A feature's cost per unit in one run: (load − idle) of its classes over the units answered in the load window. */
export function unitCost(run: RunData, f: Feature): UnitCost | null {
  const units = (run.loaded.units[f.counter] ?? 0) / run.loaded.secs;
  if (units <= 0) return null;
  const d = (m: Metric, classes: string[]) => Math.max(0, rate(run.loaded, classes, m) - rate(run.idle, classes, m)) / units;
  return { statements: d('statements', f.pg), transactions: d('transactions', f.pg), primaryTransactions: d('primaryTransactions', f.pg), redis: d('redis', f.redis) };
}

/** Least-squares line y = a + b·x. One point: flat. */
export function fitLine(points: ReadonlyArray<readonly [number, number]>): { a: number; b: number } {
  const n = points.length;
  if (n === 0) return { a: 0, b: 0 };
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  const sxx = points.reduce((s, [x]) => s + (x - mx) ** 2, 0);
  if (sxx === 0) return { a: my, b: 0 };
  const b = points.reduce((s, [x, y]) => s + (x - mx) * (y - my), 0) / sxx;
  return { a: my - b * mx, b };
}

/**
 * The value at `x` of the line through `points`, never below the smallest measured value when the
 * line falls (a cost that fell with the replica count is not extrapolated to zero) and never below 0.
 */
export function extrapolate(points: ReadonlyArray<readonly [number, number]>, x: number): number {
  const { a, b } = fitLine(points);
  const v = a + b * x;
  if (b >= 0) return Math.max(0, v);
  return Math.max(0, Math.min(...points.map(([, y]) => y)), v);
}

/** A deployment to put on paper: replicas and per-second load. */
export interface Deployment {
  name: string;
  replicas: number;
  accounts: number;
  /** Per second, by feature name (FEATURES); outbox events are derived: account changes + refreshes. */
  perSec: Record<string, number>;
}

/** Per-account load assumptions (docs/scaling.md states and argues them). */
export interface PerAccount {
  refreshesPerAccountPerSec: number;
  monitorChecksPerAccountPerSec: number;
  usageEventsPerAccountPerSec: number;
  usageBatchSize: number;
  accountChangesPerAccountPerSec: number;
  gatewayReplicas: number;
}

export function deployment(name: string, replicas: number, accounts: number, p: PerAccount): Deployment {
  const refreshes = accounts * p.refreshesPerAccountPerSec;
  const changes = accounts * p.accountChangesPerAccountPerSec;
  const events = accounts * p.usageEventsPerAccountPerSec;
  return {
    name,
    replicas,
    accounts,
    perSec: {
      'token refresh': refreshes,
      'snapshot apply (outbox → Redis)': changes + refreshes,
      'change stream publish': changes + refreshes,
      'account change (admin PATCH)': changes,
      // The gateway caches a token until it is within the refresh margin: one read per gateway replica per refresh.
      'token read (hot path)': refreshes * p.gatewayReplicas,
      // The gateway caches its buckets and re-reads on an account event: one read per gateway replica per change.
      'snapshot read': (changes + refreshes) * p.gatewayReplicas,
      'monitor check': accounts * p.monitorChecksPerAccountPerSec,
      'usage ingest': events / p.usageBatchSize,
      // One increment per usage event.
      'quota increment': events,
    },
  };
}

export interface Figures {
  statements: number;
  transactions: number;
  /**
   * Transactions that write (need the primary and commit something): the primary's transactions
   * without the losing ticks, whose claim finds nothing and commits without WAL to flush.
   */
  writes: number;
  /** PostgreSQL statements of the losing ticks (fan-out), part of `statements`. */
  losingTicks: number;
  redis: number;
}

export interface Projection {
  deployment: Deployment;
  /** Cluster-wide per second, the fixed background of N replicas plus every feature's load: as measured (no batching credit). */
  upper: Figures;
  /** The same with every batched part's batches full. */
  lower: Figures;
  /** By part (upper bound). */
  parts: Array<{ name: string } & Figures>;
}

/**
 * A feature's cost per second at `replicas` for `perSec` units, [own work, fan-out], from its
 * per-unit costs at the measured replica counts. A fan-out feature: fitted a + b·N, a per unit,
 * b·N per unit only up to the replicas' tick rate. Any other: the cost per unit at the largest
 * replica count measured (these rise with N only until each request misses the replica's cache,
 * then stay flat; a straight line would carry the rise on).
 */
function featureCost(costs: ReadonlyArray<readonly [number, number]>, f: Feature, replicas: number, perSec: number, cap: number | undefined): [number, number] {
  if (!costs.length) return [0, 0];
  if (!f.fanOut) {
    const v = perSec * [...costs].sort((x, y) => x[0] - y[0]).at(-1)![1];
    return [cap === undefined ? v : Math.min(v, cap), 0];
  }
  const { a, b } = fitLine(costs);
  return [perSec * Math.max(0, a), Math.max(0, b) * replicas * Math.min(perSec, WOKEN_TICKS_PER_SEC)];
}

/** Costs fitted over the runs' replica counts, evaluated at the deployment's. */
export function project(runs: readonly RunData[], d: Deployment): Projection {
  const at = (pts: Array<[number, number]>) => extrapolate(pts, d.replicas);
  const idle = (m: Metric) => at(runs.map((r) => [r.replicas, rate(r.idle, m === 'redis' ? allRedis(r.idle) : allPg(r.idle), m)]));
  const background: Figures = { statements: idle('statements'), transactions: idle('transactions'), writes: idle('primaryTransactions'), losingTicks: 0, redis: idle('redis') };
  const parts: Projection['parts'] = [{ name: `fixed background of ${d.replicas} replicas (idle)`, ...background }];
  const lower: Figures = { ...background };
  const keyOf = { statements: 'statements', transactions: 'transactions', primaryTransactions: 'writes', redis: 'redis' } as const;
  for (const f of FEATURES) {
    const perSec = d.perSec[f.name] ?? 0;
    const costs = runs.map((r) => [r.replicas, unitCost(r, f)] as const).filter((x): x is readonly [number, UnitCost] => x[1] !== null);
    const part: Projection['parts'][number] = { name: f.name, statements: 0, transactions: 0, writes: 0, losingTicks: 0, redis: 0 };
    for (const m of ['statements', 'transactions', 'primaryTransactions', 'redis'] as const) {
      const cap = f.cap?.(d.replicas, perSec)[m === 'redis' ? 'redis' : 'pg'];
      const [own, fan] = featureCost(
        costs.map(([n, u]) => [n, u[m]] as const),
        f,
        d.replicas,
        perSec,
        cap,
      );
      // A losing tick's claim is primary-only but writes nothing: a statement, not a write.
      const counted = m === 'primaryTransactions' ? own : own + fan;
      part[keyOf[m]] = counted;
      lower[keyOf[m]] += own / (m === 'redis' ? f.redisBatch : f.pgBatch) + (counted - own);
      if (m === 'statements') {
        part.losingTicks = fan;
        lower.losingTicks += fan;
      }
    }
    parts.push(part);
  }
  const sum = (k: keyof Figures) => parts.reduce((s, p) => s + p[k], 0);
  return { deployment: d, upper: { statements: sum('statements'), transactions: sum('transactions'), writes: sum('writes'), losingTicks: sum('losingTicks'), redis: sum('redis') }, lower, parts };
}

/** Assumed limits of one component (docs/scaling.md, "Limits assumed"). */
export interface Limits {
  pgStatementsPerSec: number;
  pgWriteTransactionsPerSec: number;
  pgConnections: number;
  redisOpsPerSec: number;
}

/**
 * The accounts at which each component reaches its limit with `replicas` replicas, for one bound
 * (bisection: the load only grows with the accounts; Infinity past 10⁹, 0 when the replicas alone
 * pass it).
 */
export function accountsAtLimit(runs: readonly RunData[], replicas: number, p: PerAccount, limits: Limits, bound: 'upper' | 'lower'): { statements: number; writes: number; redis: number } {
  const value = (accounts: number, k: 'statements' | 'writes' | 'redis') => project(runs, deployment('x', replicas, accounts, p))[bound][k];
  const solve = (limit: number, k: 'statements' | 'writes' | 'redis') => {
    if (value(0, k) >= limit) return 0;
    if (value(1e9, k) < limit) return Infinity;
    let [lo, hi] = [0, 1e9];
    for (let i = 0; i < 60 && hi - lo > 1; i++) {
      const mid = (lo + hi) / 2;
      if (value(mid, k) < limit) lo = mid;
      else hi = mid;
    }
    return lo;
  };
  return {
    statements: solve(limits.pgStatementsPerSec, 'statements'),
    writes: solve(limits.pgWriteTransactionsPerSec, 'writes'),
    redis: solve(limits.redisOpsPerSec, 'redis'),
  };
}
