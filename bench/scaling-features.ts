/**
 * The scaling bench's features (docs/scaling.md): what each unit of load is counted as, which
 * statement and key classes (scaling-classify.ts) carry its cost, how it batches, whether every
 * replica is woken for it, and the per-replica ceilings; with the model's two assumptions.
 */
export interface Feature {
  name: string;
  unit: string;
  /** The unit counter of the load window (scaling-load.ts `Units`). */
  counter: string;
  pg: string[];
  redis: string[];
  /**
   * Units one statement (PostgreSQL) or one command (Redis) carries when its batch is full (the
   * code's batch size; 1: not batched). At the bench's moderate rates a batch held about one unit,
   * so the measured cost is the upper bound and cost / batch the lower one.
   */
  pgBatch: number;
  redisBatch: number;
  /**
   * Woken on every replica (a notification or a shared due time): each unit also costs every
   * replica's losing tick, the `b·N` of the fitted cost. Wake-ups arriving during a tick coalesce,
   * so at high rates that part is bounded by the replicas' tick rate (WOKEN_TICKS_PER_SEC).
   */
  fanOut: boolean;
  /**
   * A ceiling per second at `replicas` and `perSec` units that no rate passes: the work is done per
   * replica on a clock (a flush every `quota.flush_delay`, a bucket head check per `snapshot.read_max_age`).
   */
  cap?: (replicas: number, perSec: number) => { pg?: number; redis?: number };
}

/** Assumed: woken ticks a replica's loop can run per second back to back (a 10 ms tick of a few round trips on a busy primary). */
export const WOKEN_TICKS_PER_SEC = 100;
/** Assumed: routing buckets the gateways read (platforms × groups). */
export const BUCKETS_IN_USE = 30;

/** What each unit of load costs, and which classes carry it (scaling-classify.ts). */
export const FEATURES: Feature[] = [
  { name: 'token refresh', unit: 'refresh', counter: 'refreshes', pg: ['token refresh'], redis: ['token refresh locks'], pgBatch: 1, redisBatch: 1, fanOut: false },
  // snapshot.batch_size 200 events per claim; a full batch is assumed to span 20 buckets (one script per bucket).
  {
    name: 'snapshot apply (outbox → Redis)',
    unit: 'outbox event',
    counter: 'outboxApplied',
    pg: ['snapshot outbox → Redis'],
    redis: ['snapshot store writes'],
    pgBatch: 200,
    redisBatch: 10,
    fanOut: true,
  },
  // change_stream.batch_size 500 events per publish; one XADD per event.
  { name: 'change stream publish', unit: 'outbox event', counter: 'outboxApplied', pg: ['change stream'], redis: ['change stream'], pgBatch: 500, redisBatch: 1, fanOut: true },
  { name: 'account change (admin PATCH)', unit: 'PATCH', counter: 'snapshotChanges', pg: ['account admin writes'], redis: [], pgBatch: 1, redisBatch: 1, fanOut: false },
  { name: 'token read (hot path)', unit: 'read', counter: 'tokenReads', pg: ['token read (hot path)'], redis: [], pgBatch: 1, redisBatch: 1, fanOut: false },
  // A replica checks a bucket's head at most once per snapshot.read_max_age (100 ms) and fetches it again when it changed: ≤ 2 commands × 10/s per bucket in use.
  {
    name: 'snapshot read',
    unit: 'read',
    counter: 'snapshotReads',
    pg: [],
    redis: ['snapshot store reads'],
    pgBatch: 1,
    redisBatch: 1,
    fanOut: false,
    cap: (n) => ({ redis: n * BUCKETS_IN_USE * 10 * 2 }),
  },
  // channel_monitor.claim_batch 50 monitors per claim, results written per claimed batch.
  { name: 'monitor check', unit: 'check', counter: 'monitorChecks', pg: ['monitors'], redis: [], pgBatch: 50, redisBatch: 1, fanOut: true },
  // usage.batch_size 1,000 events per insert = 10 gateway batches of 100.
  { name: 'usage ingest', unit: 'HTTP batch', counter: 'usageBatches', pg: ['usage ingest'], redis: [], pgBatch: 10, redisBatch: 1, fanOut: false },
  // quota.flush_batch 1,000 counters per upsert; every increment is its own script call.
  // Each replica flushes what it counted once per quota.flush_delay (5 s), 1,000 counters per upsert.
  {
    name: 'quota increment',
    unit: 'increment',
    counter: 'quotaIncrements',
    pg: ['quota flush'],
    redis: ['quota counters'],
    pgBatch: 1000,
    redisBatch: 1,
    fanOut: false,
    cap: (n, perSec) => ({ pg: n / 5 + perSec / 1000 }),
  },
];
