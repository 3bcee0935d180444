import type { RedisClient } from '../../../coordination/redis-client.js';
import type { KeySpace } from '../../../coordination/keys.js';
import { redisScripts, type LockScripts, type SnapshotScripts } from '../../../coordination/redis-scripts.js';
import type { BucketId, RoutingEntry, RoutingRow } from './routing-accounts.js';

/** A bucket as read for an answer: only a complete, well-formed bucket is ever served. */
export type BucketRead =
  { state: 'missing' | 'incomplete' } | { state: 'corrupt'; detail: string } | { state: 'ok'; head: BucketHead; epoch: number; builtAt: number; writtenAt: number; entries: RoutingEntry[] };

/** What changes whenever a bucket's content does: a reader's cache is valid while it is unchanged. */
export interface BucketHead {
  gen: string;
  rev: number;
}

/**
 * Where the snapshot lives: Redis hashes in cluster mode, a Map in embedded mode. Every entry
 * carries its account's `sched_version`; a write lands only if it is newer (the epoch rule), so
 * the consumer, repairs and rebuilds may write the same bucket in any order. A bucket is served
 * only once a (re)build marked it complete; entries are never deleted, only replaced by tombstones.
 */
export interface SnapshotBuckets {
  readonly backend: 'redis' | 'memory';
  /** Creates the bucket (incomplete) unless it exists; `reset` discards it first. Returns its generation. */
  open(b: BucketId, gen: string, reset: boolean, nowMs: number, floor: number): Promise<string>;
  /** Writes the rows newer than the stored entries; -1 when the bucket does not exist. */
  apply(b: BucketId, rows: RoutingRow[], nowMs: number): Promise<number>;
  /** Marks the bucket complete if it is still generation `gen`, raising its epoch to at least `floor`. */
  complete(b: BucketId, gen: string, nowMs: number, floor: number): Promise<boolean>;
  /** Raises the bucket's epoch to at least `epoch` if it exists (a PostgreSQL answer's, before it returns). */
  raiseEpoch(b: BucketId, epoch: number): Promise<boolean>;
  head(b: BucketId): Promise<BucketHead | null>;
  /** Epoch and write times of a complete bucket (no entries), for the metrics. */
  meta(b: BucketId): Promise<{ epoch: number; builtAt: number; writtenAt: number } | null>;
  read(b: BucketId): Promise<BucketRead>;
  /** Account ids stored in the bucket (entries and tombstones). */
  ids(b: BucketId): Promise<number[]>;
  known(): Promise<BucketId[]>;
  /** Sets the data-present marker; true when it was missing (an empty or restarted store). */
  claimMarker(): Promise<boolean>;
  /** The rebuild reason a missing marker means for this store: Redis lost its data, or a process-local store starts empty. */
  readonly emptyReason: 'redis_lost' | 'memory_start';
  tryLock(name: string, owner: string, ttlMs: number): Promise<boolean>;
  unlock(name: string, owner: string): Promise<void>;
}

export const FIELD_PREFIX = 'a:';

export function encodeRow(r: RoutingRow): string {
  return `${r.version}|${r.entry ? JSON.stringify(r.entry) : ''}`;
}

/** The routing order: priority (lower first), then id. */
export function routingOrder(a: RoutingEntry, b: RoutingEntry): number {
  return a.priority - b.priority || a.id - b.id;
}

function validEntry(e: unknown, id: number): e is RoutingEntry {
  const x = e as RoutingEntry;
  return typeof x === 'object' && x !== null && x.id === id && typeof x.platform === 'string' && Number.isFinite(x.priority) && Number.isFinite(x.concurrency) && typeof x.status === 'string';
}

/** Decodes a bucket's fields; anything unexpected makes the whole bucket corrupt (never served). */
export function decodeBucket(h: Record<string, string>): BucketRead {
  if (!h._gen) return Object.keys(h).length ? { state: 'corrupt', detail: 'no generation field' } : { state: 'missing' };
  const rev = Number(h._rev);
  const epoch = Number(h._epoch);
  if (!Number.isSafeInteger(rev) || !Number.isSafeInteger(epoch)) return { state: 'corrupt', detail: 'bad _rev or _epoch' };
  if (h._complete !== '1') return { state: 'incomplete' };
  const entries: RoutingEntry[] = [];
  for (const [field, value] of Object.entries(h)) {
    if (field.startsWith('_')) continue;
    const id = Number(field.slice(FIELD_PREFIX.length));
    const m = /^(\d+)\|(.*)$/s.exec(value);
    if (!field.startsWith(FIELD_PREFIX) || !Number.isSafeInteger(id) || !m) return { state: 'corrupt', detail: `bad field ${field.slice(0, 40)}` };
    if (m[2] === '') continue;
    let e: unknown;
    try {
      e = JSON.parse(m[2]!);
    } catch {
      return { state: 'corrupt', detail: `entry ${id} is not JSON` };
    }
    if (!validEntry(e, id)) return { state: 'corrupt', detail: `entry ${id} has the wrong shape` };
    entries.push(e);
  }
  entries.sort(routingOrder);
  return { state: 'ok', head: { gen: h._gen, rev }, epoch, builtAt: Number(h._built_at) || 0, writtenAt: Number(h._written_at) || 0, entries };
}

/** Redis hashes under `<prefix>:<env>:{sched}:`; one hash tag, so a Redis Cluster keeps them on one slot. */
export class RedisSnapshotBuckets implements SnapshotBuckets {
  readonly emptyReason = 'redis_lost' as const;
  readonly backend = 'redis' as const;
  private readonly scripts: SnapshotScripts & LockScripts;
  private readonly base: string;

  constructor(
    private readonly redis: RedisClient,
    ks: KeySpace,
  ) {
    this.scripts = redisScripts(redis);
    this.base = `${ks.prefix}:${ks.env}:{sched}`;
  }

  key(b: BucketId): string {
    return `${this.base}:bucket:${encodeURIComponent(b.platform)}:${encodeURIComponent(b.group)}`;
  }

  private get registry(): string {
    return `${this.base}:buckets`;
  }

  async open(b: BucketId, gen: string, reset: boolean, nowMs: number, floor: number): Promise<string> {
    return String(await this.scripts.snapshotOpen(this.key(b), this.registry, gen, reset ? '1' : '0', JSON.stringify([b.platform, b.group]), nowMs, floor));
  }

  async apply(b: BucketId, rows: RoutingRow[], nowMs: number): Promise<number> {
    if (!rows.length) return 0;
    const args: string[] = [];
    for (const r of rows) args.push(FIELD_PREFIX + r.id, encodeRow(r));
    return Number(await this.scripts.snapshotApply(this.key(b), nowMs, ...args));
  }

  async complete(b: BucketId, gen: string, nowMs: number, floor: number): Promise<boolean> {
    return (await this.scripts.snapshotComplete(this.key(b), gen, nowMs, floor)) === 1;
  }

  async raiseEpoch(b: BucketId, epoch: number): Promise<boolean> {
    return (await this.scripts.snapshotRaise(this.key(b), epoch)) === 1;
  }

  async head(b: BucketId): Promise<BucketHead | null> {
    try {
      const [gen, rev, complete] = await this.redis.hmget(this.key(b), '_gen', '_rev', '_complete');
      return gen && complete === '1' && rev !== null ? { gen, rev: Number(rev) } : null;
    } catch (err) {
      if (/WRONGTYPE/.test((err as Error).message)) return null;
      throw err;
    }
  }

  async meta(b: BucketId): Promise<{ epoch: number; builtAt: number; writtenAt: number } | null> {
    try {
      const [complete, epoch, built, written] = await this.redis.hmget(this.key(b), '_complete', '_epoch', '_built_at', '_written_at');
      return complete === '1' ? { epoch: Number(epoch) || 0, builtAt: Number(built) || 0, writtenAt: Number(written) || 0 } : null;
    } catch (err) {
      if (/WRONGTYPE/.test((err as Error).message)) return null;
      throw err;
    }
  }

  async read(b: BucketId): Promise<BucketRead> {
    try {
      return decodeBucket(await this.redis.hgetall(this.key(b)));
    } catch (err) {
      if (/WRONGTYPE/.test((err as Error).message)) return { state: 'corrupt', detail: 'the key holds another type' };
      throw err;
    }
  }

  async ids(b: BucketId): Promise<number[]> {
    const fields = await this.redis.hkeys(this.key(b));
    return fields
      .filter((f) => f.startsWith(FIELD_PREFIX))
      .map((f) => Number(f.slice(FIELD_PREFIX.length)))
      .filter(Number.isSafeInteger);
  }

  async known(): Promise<BucketId[]> {
    const out: BucketId[] = [];
    for (const m of await this.redis.smembers(this.registry)) {
      try {
        const [platform, group] = JSON.parse(m) as [unknown, unknown];
        if (typeof platform === 'string' && typeof group === 'string') out.push({ platform, group });
      } catch {
        // a foreign member: ignored
      }
    }
    return out;
  }

  async claimMarker(): Promise<boolean> {
    return (await this.redis.set(`${this.base}:marker`, '1', 'NX')) === 'OK';
  }

  async tryLock(name: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.set(`${this.base}:lock:${name}`, owner, 'PX', ttlMs, 'NX')) === 'OK';
  }

  async unlock(name: string, owner: string): Promise<void> {
    await this.scripts.compareAndDelete(`${this.base}:lock:${name}`, owner);
  }
}
