/**
 * The soak's plan as pure functions of its settings (issue 53 point 3): the load at one stated scale
 * factor, and the fault schedule as a function of the seed alone (with the run length and replica
 * count), so the same seed replays the same faults. No clock, no I/O: test/soak-schedule.test.ts.
 */

export type FaultKind = 'sigkill' | 'sigstop' | 'redis_restart' | 'sentinel_failover' | 'postgres_restart' | 'pgbouncer_restart';

export interface Fault {
  /** Milliseconds after the load started. */
  atMs: number;
  kind: FaultKind;
  /** The replica index, for sigkill and sigstop. */
  replica?: number;
  /** How long the fault lasts: SIGSTOP → SIGCONT, the killed replica or the server down before its restart. */
  holdMs: number;
}

export interface SoakSettings {
  seed: number;
  minutes: number;
  replicas: number;
  scale: number;
}

/** The full size; every figure is multiplied by the one scale factor. */
export const FULL_LOAD = {
  accounts: 100_000,
  monitors: 10_000,
  accountTestPlans: 2_000,
  usageEventsPerSec: 5_000,
  imageBatches: 100,
  snapshotChangesPerSec: 100,
} as const;

export interface Load {
  accounts: number;
  monitors: number;
  accountTestPlans: number;
  usageEventsPerSec: number;
  /** Usage events per HTTP batch (the gateway's batch size), never more than the per-second rate. */
  usageBatch: number;
  imageBatches: number;
  snapshotChangesPerSec: number;
  /** Every account's first refresh falls in [0, refreshSpreadS) after the load starts; refreshed tokens outlive the run. */
  refreshSpreadS: number;
  /** Seconds before expiry a refresh is due (`auth.refresh_margin_seconds`). */
  refreshMarginS: number;
  monitorIntervalS: number;
}

/** At least one of each, so no part of the load is ever left out by the scaling. */
const atLeastOne = (n: number) => Math.max(1, Math.round(n));

export function loadAt(s: Pick<SoakSettings, 'scale' | 'minutes'>): Load {
  const runS = s.minutes * 60;
  const usageEventsPerSec = atLeastOne(FULL_LOAD.usageEventsPerSec * s.scale);
  return {
    accounts: atLeastOne(FULL_LOAD.accounts * s.scale),
    monitors: atLeastOne(FULL_LOAD.monitors * s.scale),
    accountTestPlans: atLeastOne(FULL_LOAD.accountTestPlans * s.scale),
    usageEventsPerSec,
    usageBatch: Math.min(100, usageEventsPerSec),
    imageBatches: atLeastOne(FULL_LOAD.imageBatches * s.scale),
    snapshotChangesPerSec: Math.max(0.2, FULL_LOAD.snapshotChangesPerSec * s.scale),
    // The issue's ~80 refreshes/s at 100,000 accounts is one refresh per account over a 20-minute day.
    refreshSpreadS: Math.round(runS * 0.8),
    // The default `auth.refresh_margin_seconds`: shorter, a refresh's own retry schedule (240 s) no longer fits before expiry.
    refreshMarginS: 300,
    monitorIntervalS: 60,
  };
}

/** mulberry32: a small, fast, well-mixed 32-bit PRNG; the same seed gives the same sequence everywhere. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * The faults of one run. Every kind occurs at least once; SIGKILL and SIGSTOP more often on a long
 * run (one of each per 5 minutes). They fall in the window [10%, 70%] of the run, at least 15 s
 * apart so each one's cost can be told apart, leaving the last 30% (and the 2 minutes after, which
 * the checker may wait) for "every job healthy within 2 minutes of the last fault". The Redis
 * restart comes before the Sentinel failover: the restart hits the primary the set started with
 * (test/helpers/redis-topologies.ts restarts a node with its first arguments), and is held under
 * the sentinels' 1 s down-after so it stays a restart (an empty primary), not a failover.
 */
export function faultSchedule(s: Pick<SoakSettings, 'seed' | 'minutes' | 'replicas'>): Fault[] {
  if (!Number.isInteger(s.seed) || s.seed < 0) throw new Error(`SOAK_SEED: expected a non-negative integer, got ${s.seed}`);
  if (!(s.minutes > 0)) throw new Error(`SOAK_MINUTES: expected a positive number, got ${s.minutes}`);
  if (!Number.isInteger(s.replicas) || s.replicas < 2) throw new Error(`SOAK_REPLICAS: expected an integer of 2 or more, got ${s.replicas}`);
  const rand = prng(s.seed);
  const runMs = s.minutes * 60_000;
  const per5 = Math.max(1, Math.floor(s.minutes / 5));
  const kinds: FaultKind[] = ['redis_restart', 'sentinel_failover', 'postgres_restart', 'pgbouncer_restart'];
  for (let i = 0; i < per5; i++) kinds.push('sigkill', 'sigstop');
  // Fisher-Yates with the seeded PRNG, then the Redis pair put in order.
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [kinds[i], kinds[j]] = [kinds[j]!, kinds[i]!];
  }
  const r = kinds.indexOf('redis_restart');
  const f = kinds.indexOf('sentinel_failover');
  if (r > f) [kinds[r], kinds[f]] = [kinds[f]!, kinds[r]!];

  const from = runMs * 0.1;
  const to = runMs * 0.7;
  const slot = (to - from) / kinds.length;
  const gapMs = Math.min(15_000, slot / 2);
  return kinds.map((kind, i) => {
    const atMs = Math.round(from + i * slot + rand() * Math.max(0, slot - gapMs));
    const holdMs =
      kind === 'sigstop'
        ? 3000 + Math.round(rand() * 7000)
        : kind === 'sigkill'
          ? 1000 + Math.round(rand() * 4000)
          : kind === 'sentinel_failover'
            ? 0
            : kind === 'redis_restart'
              ? 200 + Math.round(rand() * 600)
              : 500 + Math.round(rand() * 2500);
    const fault: Fault = { atMs, kind, holdMs };
    if (kind === 'sigkill' || kind === 'sigstop') fault.replica = Math.floor(rand() * s.replicas);
    return fault;
  });
}

/** Settings from the environment (SOAK_SEED, SOAK_MINUTES, SOAK_REPLICAS, SOAK_SCALE), each checked and named when wrong. */
export function settingsFromEnv(env: NodeJS.ProcessEnv, defaults: SoakSettings): SoakSettings {
  const num = (name: string, fallback: number) => {
    const raw = env[name];
    if (raw === undefined || raw === '') return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`${name}: expected a positive number, got ${JSON.stringify(raw)}`);
    return n;
  };
  const seed = env.SOAK_SEED === undefined || env.SOAK_SEED === '' ? defaults.seed : Number(env.SOAK_SEED);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`SOAK_SEED: expected an integer 0-4294967295, got ${JSON.stringify(env.SOAK_SEED)}`);
  const scale = num('SOAK_SCALE', defaults.scale);
  if (scale > 1) throw new Error(`SOAK_SCALE: expected a factor of at most 1 (the issue's full size), got ${scale}`);
  return { seed, minutes: num('SOAK_MINUTES', defaults.minutes), replicas: num('SOAK_REPLICAS', defaults.replicas), scale };
}
