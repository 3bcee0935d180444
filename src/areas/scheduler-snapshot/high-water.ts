import type { BucketId, RoutingAccounts } from './store/routing-accounts.js';
import type { Logger } from '../../telemetry/logger.js';
import { settledWithin } from '../../time/clock.js';

/** How long a read waits for the high-water before it answers on the last one read (PostgreSQL slow or gone). */
export const HIGH_WATER_WAIT_MS = 1000;
/** While PostgreSQL does not answer, the high-water is asked again at most this often (the reads do not wait for it). */
export const HIGH_WATER_RETRY_MS = 1000;

interface Known {
  b: BucketId;
  hw: number;
  /** When the query that read it was sent (monotonic ms). */
  at: number;
}

interface Query {
  at: number;
  keys: Set<string>;
  done: Promise<void>;
}

/**
 * What this replica knows of each bucket's epoch high-water (`scheduler_bucket_epochs`), which
 * every answer of any replica is at most when it is given: writers raise it before a number
 * reaches Redis, a PostgreSQL answer before it returns. A snapshot answer is held to it, so a
 * replica whose snapshot lags what another replica answered answers from PostgreSQL instead.
 *
 * A reading made by a query sent at `at` holds for a read that began at `t` when `t - at <
 * maxAgeMs` (or the query was sent after the read began): the replica's answers are then at or
 * above every epoch any replica answered `maxAgeMs` before. One query reads every bucket this
 * replica has served (`epochsOf`), at most one in flight and one queued behind it, so the cost is
 * one small query per replica per `maxAgeMs` while reads come, whatever the number of buckets
 * and reads. `maxAgeMs` Infinity (one process, embedded mode): each bucket is read once.
 *
 * PostgreSQL slow or unreachable: a read waits at most `HIGH_WATER_WAIT_MS`, then, and until a
 * query succeeds again, answers are held to the last high-water read (and to the replica's own
 * answers): the snapshot keeps serving, the cross-replica bound is suspended on this replica.
 */
export class HighWaterWatch {
  private readonly known = new Map<string, Known>();
  private running: Query | null = null;
  private next: { want: Map<string, BucketId>; done: Promise<void> } | null = null;
  private failing = false;
  private lastTry = -Infinity;
  private lastError: Error | null = null;
  /** Queries sent (tests and the benchmark count them). */
  queries = 0;

  constructor(
    private readonly routing: RoutingAccounts,
    private readonly maxAgeMs: number,
    private readonly monotonic: () => number,
    private readonly log: Logger,
  ) {}

  private holds(at: number, t: number): boolean {
    return at >= t || t - at < this.maxAgeMs;
  }

  /** The high-water for a read that began at `t` without a round trip, or undefined when it must be read. */
  current(key: string, t: number): number | undefined {
    const k = this.known.get(key);
    if (!k) return undefined;
    return this.holds(k.at, t) || this.failing ? k.hw : undefined;
  }

  /** The high-water for a read that began at `t`: from memory, else from a query shared with every bucket and read. */
  async floor(b: BucketId, key: string, t: number): Promise<number> {
    const k = this.known.get(key);
    if (k && this.holds(k.at, t)) return k.hw;
    if (k && this.failing) {
      // PostgreSQL did not answer: no read waits; one query is sent now and then in the background.
      if (t - this.lastTry >= HIGH_WATER_RETRY_MS) void this.query(key, b, t);
      return k.hw;
    }
    const r = this.running;
    const done = r && r.keys.has(key) && this.holds(r.at, t) ? r.done : this.query(key, b, t);
    if (!(await settledWithin(done, HIGH_WATER_WAIT_MS)) && !this.failing) {
      this.failing = true;
      this.log.warn(
        { bucket: key, wait_ms: HIGH_WATER_WAIT_MS },
        'scheduler snapshot: no epoch high-water from PostgreSQL in time: snapshot answers are held only to the last one read until it answers',
      );
    }
    const after = this.known.get(key);
    if (after) return after.hw;
    throw new Error(`the epoch high-water of scheduler bucket ${key} could not be read from PostgreSQL: ${this.lastError?.message ?? `no answer within ${HIGH_WATER_WAIT_MS} ms`}`);
  }

  /** Joins the query queued behind the running one (sent when it settles), or sends one now. */
  private query(key: string, b: BucketId, t: number): Promise<void> {
    this.lastTry = t;
    if (!this.running) return this.send(new Map([[key, b]]));
    if (!this.next) {
      const want = new Map<string, BucketId>();
      const done = this.running.done.then(() => {
        if (this.next?.want === want) this.next = null;
        return this.send(want);
      });
      this.next = { want, done };
    }
    this.next.want.set(key, b);
    return this.next.done;
  }

  private send(want: Map<string, BucketId>): Promise<void> {
    for (const [k, v] of this.known) if (!want.has(k)) want.set(k, v.b);
    const keys = [...want.keys()];
    const at = this.monotonic();
    this.queries++;
    const q: Query = { at, keys: new Set(keys), done: Promise.resolve() };
    q.done = this.routing
      .epochsOf([...want.values()])
      .then(
        (hws) => {
          for (const [i, k] of keys.entries()) {
            const prev = this.known.get(k);
            this.known.set(k, { b: want.get(k)!, hw: Math.max(prev?.hw ?? 0, hws[i]!), at: Math.max(prev?.at ?? -Infinity, at) });
          }
          this.lastError = null;
          if (this.failing) {
            this.failing = false;
            this.log.info({ buckets: keys.length }, 'scheduler snapshot: the epoch high-water is read from PostgreSQL again');
          }
        },
        (err: Error) => {
          this.lastError = err;
          if (!this.failing)
            this.log.warn({ err: err.message }, 'scheduler snapshot: the epoch high-water could not be read from PostgreSQL: snapshot answers are held only to the last one read until it can');
          this.failing = true;
        },
      )
      .finally(() => {
        if (this.running === q) this.running = null;
      });
    this.running = q;
    return q.done;
  }
}
