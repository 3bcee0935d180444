import type { BucketId, RoutingRow } from './routing-accounts.js';
import { FIELD_PREFIX, decodeBucket, encodeRow, type BucketHead, type BucketRead, type SnapshotBuckets } from './snapshot-buckets.js';

/**
 * The embedded-mode snapshot: the same fields and the same rules as the Redis scripts (newer
 * version wins, served only when complete), in a Map. One process, so locks are a Map too.
 */
export class MemorySnapshotBuckets implements SnapshotBuckets {
  /** Embedded mode: the snapshot lives in this process and starts empty with it; no Redis was lost. */
  readonly emptyReason = 'memory_start' as const;
  readonly backend = 'memory' as const;
  private readonly buckets = new Map<string, Map<string, string>>();
  private readonly registry = new Set<string>();
  private readonly locks = new Map<string, { owner: string; until: number }>();
  private marker = false;

  constructor(private readonly now: () => number = Date.now) {}

  private name(b: BucketId): string {
    return JSON.stringify([b.platform, b.group]);
  }

  async open(b: BucketId, gen: string, reset: boolean, nowMs: number, floor: number): Promise<string> {
    const name = this.name(b);
    if (reset) this.buckets.delete(name);
    this.registry.add(name);
    const existing = this.buckets.get(name);
    if (existing?.get('_gen')) return existing.get('_gen')!;
    this.buckets.set(
      name,
      new Map([
        ['_gen', gen],
        ['_epoch', String(floor)],
        ['_rev', '0'],
        ['_opened_at', String(nowMs)],
      ]),
    );
    return gen;
  }

  async apply(b: BucketId, rows: RoutingRow[], nowMs: number): Promise<number> {
    const h = this.buckets.get(this.name(b));
    if (!h) return -1;
    let epoch = Number(h.get('_epoch')) || 0;
    let written = 0;
    for (const r of rows) {
      const cur = h.get(FIELD_PREFIX + r.id);
      const cv = cur ? Number(/^(\d+)\|/.exec(cur)?.[1] ?? -1) : -1;
      if (r.version > cv) {
        h.set(FIELD_PREFIX + r.id, encodeRow(r));
        written++;
        epoch = Math.max(epoch, r.version);
      }
    }
    if (written) {
      h.set('_epoch', String(epoch))
        .set('_written_at', String(nowMs))
        .set('_rev', String(Number(h.get('_rev')) + written));
    }
    return written;
  }

  async complete(b: BucketId, gen: string, nowMs: number, floor: number): Promise<boolean> {
    const h = this.buckets.get(this.name(b));
    if (h?.get('_gen') !== gen) return false;
    h.set('_epoch', String(Math.max(Number(h.get('_epoch')) || 0, floor)))
      .set('_complete', '1')
      .set('_built_at', String(nowMs))
      .set('_rev', String(Number(h.get('_rev')) + 1));
    return true;
  }

  async raiseEpoch(b: BucketId, epoch: number): Promise<boolean> {
    const h = this.buckets.get(this.name(b));
    const cur = Number(h?.get('_epoch'));
    if (!h?.get('_gen') || !Number.isSafeInteger(cur) || epoch <= cur) return false;
    h.set('_epoch', String(epoch)).set('_rev', String(Number(h.get('_rev')) + 1));
    return true;
  }

  async head(b: BucketId): Promise<BucketHead | null> {
    const h = this.buckets.get(this.name(b));
    return h && h.get('_complete') === '1' ? { gen: h.get('_gen')!, rev: Number(h.get('_rev')) } : null;
  }

  async meta(b: BucketId): Promise<{ epoch: number; builtAt: number; writtenAt: number } | null> {
    const h = this.buckets.get(this.name(b));
    return h?.get('_complete') === '1' ? { epoch: Number(h.get('_epoch')) || 0, builtAt: Number(h.get('_built_at')) || 0, writtenAt: Number(h.get('_written_at')) || 0 } : null;
  }

  async read(b: BucketId): Promise<BucketRead> {
    const h = this.buckets.get(this.name(b));
    return h ? decodeBucket(Object.fromEntries(h)) : { state: 'missing' };
  }

  async ids(b: BucketId): Promise<number[]> {
    const h = this.buckets.get(this.name(b));
    return h ? [...h.keys()].filter((f) => f.startsWith(FIELD_PREFIX)).map((f) => Number(f.slice(FIELD_PREFIX.length))) : [];
  }

  async known(): Promise<BucketId[]> {
    return [...this.registry].map((n) => {
      const [platform, group] = JSON.parse(n) as [string, string];
      return { platform, group };
    });
  }

  async claimMarker(): Promise<boolean> {
    const was = this.marker;
    this.marker = true;
    return !was;
  }

  async tryLock(name: string, owner: string, ttlMs: number): Promise<boolean> {
    const l = this.locks.get(name);
    if (l && l.until > this.now() && l.owner !== owner) return false;
    this.locks.set(name, { owner, until: this.now() + ttlMs });
    return true;
  }

  async unlock(name: string, owner: string): Promise<void> {
    if (this.locks.get(name)?.owner === owner) this.locks.delete(name);
  }

  /** Tests: what a corrupt writer or a lost store would leave. */
  poke(b: BucketId, field: string, value: string | null): void {
    const h = this.buckets.get(this.name(b));
    if (!h) return;
    if (value === null) h.delete(field);
    else h.set(field, value);
  }
}
