import type { BucketHead, BucketRead, SnapshotBuckets } from './store/snapshot-buckets.js';
import { routingOrder } from './store/snapshot-buckets.js';
import type { BucketId, RoutingAccounts, RoutingEntry } from './store/routing-accounts.js';
import type { SchedulerMetrics } from './metrics.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../time/clock.js';
import { BucketBuilder, bucketName } from './bucket-builder.js';
import { HighWaterWatch } from './high-water.js';
import { monotonic as monotonicMs } from '../../time/wall.js';

/** The answer of the read API: the schedulable accounts of a bucket, in routing order. */
export interface SchedulerAccounts {
  platform: string;
  group: string;
  /** `snapshot` when served from the snapshot, `postgres` when the snapshot missed. */
  source: 'snapshot' | 'postgres';
  /**
   * A number from the account version counter; it rises when the bucket's content changes. Never
   * below what this replica answered before, nor below what any replica answered `read_max_age`
   * or more before the read arrived, whichever the source, Redis data loss or rebuild (a replica
   * that cannot read PostgreSQL: only its own). docs/scheduler-snapshot.md, "The epoch".
   */
  epoch: number;
  /** Seconds since the bucket was last written or rebuilt; 0 for a PostgreSQL answer. */
  age_seconds: number;
  accounts: RoutingEntry[];
}

type Ok = Extract<BucketRead, { state: 'ok' }>;

/** A temporary cooldown ends with time, without a write: filtered at read time. */
function available(entries: RoutingEntry[], nowMs: number): RoutingEntry[] {
  return entries.filter((e) => e.temp_unschedulable_until === null || Date.parse(e.temp_unschedulable_until) <= nowMs);
}

/**
 * A decoded bucket's available list, kept until the next cooldown in it ends: the same array for
 * every read meanwhile, so its JSON is made once (`scheduler-routes.ts`), not per request.
 */
const servedLists = new WeakMap<Ok, { list: RoutingEntry[]; until: number }>();
export function availableOf(r: Ok, nowMs: number): RoutingEntry[] {
  const kept = servedLists.get(r);
  if (kept && nowMs < kept.until) return kept.list;
  let until = Infinity;
  for (const e of r.entries) {
    const ends = e.temp_unschedulable_until === null ? NaN : Date.parse(e.temp_unschedulable_until);
    if (ends > nowMs && ends < until) until = ends;
  }
  // Frozen: every read shares it (a library caller that sorts it in place must copy it first).
  const list = Object.freeze(available(r.entries, nowMs)) as RoutingEntry[];
  servedLists.set(r, { list, until });
  return list;
}

/**
 * The read side of the scheduler snapshot (the gateway's hot path). A read checks the bucket's
 * head (generation and revision, one round trip) and serves its decoded copy while unchanged;
 * a missing, incomplete or corrupt bucket is never served: the answer comes from PostgreSQL and
 * the bucket is rebuilt in the background (one repair per bucket at a time, cluster-wide).
 *
 * The epoch never goes back (docs/scheduler-snapshot.md): a PostgreSQL answer carries the
 * bucket's high-water, raised to its rows and pushed into the Redis bucket before it returns; a
 * snapshot answer is served only at or above the highest epoch this replica has answered for the
 * bucket and the high-water as read at most `read_max_age` before the read began (`HighWaterWatch`:
 * one query per replica per `read_max_age` for all buckets), else it is answered from PostgreSQL
 * and repaired. So an answer is at or above every epoch any replica answered `read_max_age` before.
 */
export class SchedulerSnapshot {
  private readonly cache = new Map<string, Ok>();
  private readonly repairing = new Map<string, Promise<void>>();
  /** The highest epoch this replica has answered per bucket (only buckets with a high-water: bounded). */
  private readonly answered = new Map<string, number>();
  /** The buckets' high-water as this replica last read it (across replicas: what others may have answered). */
  readonly highWater: HighWaterWatch;
  /** When each cached bucket's head was last checked against the store (monotonic ms). */
  private readonly checkedAt = new Map<string, number>();
  /** One check per bucket at a time: reads that arrive while it runs share its answer. */
  private readonly checking = new Map<string, Promise<SchedulerAccounts>>();
  readonly builder: BucketBuilder;

  constructor(
    readonly buckets: SnapshotBuckets,
    private readonly routing: RoutingAccounts,
    private readonly clock: Clock,
    private readonly metrics: SchedulerMetrics,
    private readonly log: Logger,
    private readonly instanceId: string,
    /**
     * `snapshot.read_max_age`: a decoded bucket is served without asking the store again for this
     * long after its head was last checked (0: every read checks, one round trip), and the
     * bucket's high-water is read again after as long (0: a query sent after the read began). So
     * a change reaches this replica's answers at most this much later than it reaches the store,
     * and an epoch another replica answered at most this much later than it was answered.
     */
    private readonly readMaxAgeMs = 0,
    private readonly monotonic: () => number = monotonicMs,
  ) {
    this.builder = new BucketBuilder(buckets, routing, clock);
    // One process holds the whole snapshot in embedded mode: its own answers are all there are.
    this.highWater = new HighWaterWatch(routing, buckets.backend === 'memory' ? Infinity : readMaxAgeMs, monotonic, log);
  }

  /** The library call beside `GET /api/v1/scheduler/accounts`. `group` '' is the accounts with no group. */
  async accounts(platform: string, group = ''): Promise<SchedulerAccounts> {
    const b = { platform, group };
    const key = bucketName(b);
    const t = this.monotonic();
    if (this.readMaxAgeMs > 0) {
      const cached = this.cache.get(key);
      const hw = this.highWater.current(key, t);
      if (cached && hw !== undefined && cached.epoch >= Math.max(hw, this.answered.get(key) ?? 0) && t - (this.checkedAt.get(key) ?? -Infinity) < this.readMaxAgeMs)
        return this.fromSnapshot(b, key, cached);
      const running = this.checking.get(key);
      if (running) {
        // A check that began earlier may hold its answer to a high-water read too long before this read: then one of its own.
        const shared = await running;
        if (shared.epoch >= (await this.floorOf(key, b, t).catch(() => 0))) return shared;
        return this.check(b, key, t);
      }
      const p = this.check(b, key, t).finally(() => this.checking.delete(key));
      this.checking.set(key, p);
      return p;
    }
    return this.check(b, key, t);
  }

  /** The head check (or full read) of one bucket, and the answer from it or from PostgreSQL. */
  private async check(b: BucketId, key: string, started: number): Promise<SchedulerAccounts> {
    let found: BucketRead['state'] | 'behind' | 'error';
    try {
      const cached = this.cache.get(key);
      // A bucket served before: its high-water is read beside its head (a bucket never served must exist first).
      const early = cached ? this.highWater.floor(b, key, started) : null;
      early?.catch(() => undefined);
      const readBucket = async (known: Ok | undefined): Promise<BucketRead> => {
        const head = known ? await this.buckets.head(b) : null;
        return known && head && sameHead(head, known.head) ? known : this.buckets.read(b);
      };
      let read = await readBucket(cached);
      found = read.state;
      if (read.state === 'ok') {
        this.cache.set(key, read);
        this.checkedAt.set(key, started);
        const hw = await (early ?? this.highWater.floor(b, key, started));
        const floor = () => Math.max(hw, this.answered.get(key) ?? 0);
        // A writer raises the high-water just before its write lands in the bucket: look once more before answering from PostgreSQL.
        if (read.epoch < floor()) {
          const again = await readBucket(read);
          if (again.state === 'ok') this.cache.set(key, (read = again));
        }
        if (read.epoch >= floor()) return this.fromSnapshot(b, key, read);
        // A bucket behind an answer already given (a Redis that came back with older data, a write that failed after its promise).
        found = 'behind';
        this.log.info({ bucket: key, epoch: read.epoch, answered: floor() }, 'scheduler snapshot bucket is behind an epoch already answered: answering from PostgreSQL; rebuilding it');
      } else {
        this.cache.delete(key);
        this.checkedAt.delete(key);
        read = read as Exclude<BucketRead, Ok>;
        if (read.state === 'corrupt') this.log.warn({ bucket: key, detail: read.detail }, 'scheduler snapshot bucket is corrupt: not served; rebuilding it');
      }
    } catch (err) {
      found = 'error';
      this.log.warn({ bucket: key, err: (err as Error).message }, 'scheduler snapshot unreadable: answering from PostgreSQL');
    }
    return this.fromPostgres(b, found);
  }

  /** The lowest epoch this replica may answer for a bucket in a read that began at `t`: its own last answer, and the high-water. */
  private async floorOf(key: string, b: BucketId, t: number): Promise<number> {
    return Math.max(this.answered.get(key) ?? 0, await this.highWater.floor(b, key, t));
  }

  private remember(key: string, epoch: number): void {
    if (epoch > (this.answered.get(key) ?? 0)) this.answered.set(key, epoch);
  }

  private fromSnapshot(b: BucketId, key: string, r: Ok): SchedulerAccounts {
    this.metrics.reads.inc({ source: 'snapshot' });
    this.remember(key, r.epoch);
    const now = this.clock.now();
    const at = Math.max(r.builtAt, r.writtenAt);
    return { ...b, source: 'snapshot', epoch: r.epoch, age_seconds: Math.max(0, (now - at) / 1000), accounts: availableOf(r, now) };
  }

  /**
   * The answer from PostgreSQL, at the bucket's high-water raised to its rows (and to what this
   * replica answered): at least every epoch any replica answered before. Before it returns, its
   * rows and epoch are written into the Redis bucket if one is there (newer version wins), so no
   * snapshot answer after it is older, in epoch or in any account it lists; a bucket that does
   * not exist yet completes at the high-water read later (one opened meanwhile is written).
   * Nothing is written when Redis just failed.
   */
  private async fromPostgres(b: BucketId, found: BucketRead['state'] | 'behind' | 'error'): Promise<SchedulerAccounts> {
    this.metrics.reads.inc({ source: 'postgres' });
    const key = bucketName(b);
    const rows = await this.routing.bucket(b);
    const top = rows.reduce((m, r) => Math.max(m, r.version), this.answered.get(key) ?? 0);
    // An unknown platform or group is an empty answer, and never creates a bucket (nor a high-water).
    const epoch = Math.max(top, rows.length ? await this.routing.raiseEpoch(b, top) : await this.routing.epochOf(b));
    if (rows.length && found !== 'error') {
      await (async () => {
        await this.builder.applyRows(b, rows);
        await this.buckets.raiseEpoch(b, epoch);
      })().catch((err) => this.log.warn({ bucket: key, err: (err as Error).message }, 'scheduler snapshot: a PostgreSQL answer could not be written to its bucket'));
      this.repair(b, found === 'corrupt');
    }
    if (epoch > 0) this.remember(key, epoch);
    const entries = rows.flatMap((r) => (r.entry ? [r.entry] : [])).sort(routingOrder);
    return { ...b, source: 'postgres', epoch, age_seconds: 0, accounts: available(entries, this.clock.now()) };
  }

  /** Rebuilds one bucket in the background; `reset` discards a corrupt value first. */
  repair(b: BucketId, reset: boolean): Promise<void> {
    const key = bucketName(b);
    const running = this.repairing.get(key);
    if (running) return running;
    const p = (async () => {
      const owner = `${this.instanceId}:${process.pid}`;
      if (!(await this.buckets.tryLock(`repair:${key}`, owner, 30_000))) return;
      try {
        await this.builder.buildBucket(b, reset);
        this.metrics.repairs.inc({ found: reset ? 'corrupt' : 'missing' });
      } finally {
        await this.buckets.unlock(`repair:${key}`, owner);
      }
    })()
      .catch((err) => this.log.warn({ bucket: key, err: (err as Error).message }, 'scheduler snapshot repair failed; the next read retries'))
      .finally(() => this.repairing.delete(key));
    this.repairing.set(key, p);
    return p;
  }

  /** Repairs in flight (tests and shutdown wait on them). */
  async settled(): Promise<void> {
    await Promise.all(this.repairing.values());
  }

  /** Age and epoch of every known bucket, for the metrics. */
  async bucketGauges(): Promise<{ bucket: string; epoch: number; ageSeconds: number }[]> {
    const out: { bucket: string; epoch: number; ageSeconds: number }[] = [];
    for (const b of await this.buckets.known()) {
      const r = await this.buckets.meta(b);
      if (r) out.push({ bucket: bucketName(b), epoch: r.epoch, ageSeconds: Math.max(0, (this.clock.now() - Math.max(r.builtAt, r.writtenAt)) / 1000) });
    }
    return out;
  }
}

function sameHead(a: BucketHead, b: BucketHead): boolean {
  return a.gen === b.gen && a.rev === b.rev;
}
