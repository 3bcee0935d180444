import { randomBytes } from 'node:crypto';
import type { SnapshotBuckets } from './store/snapshot-buckets.js';
import type { BucketId, RoutingAccounts, RoutingRow } from './store/routing-accounts.js';
import type { Clock } from '../../time/clock.js';

export const bucketName = (b: BucketId) => `${b.platform}/${b.group}`;
const same = (a: BucketId, b: BucketId) => a.platform === b.platform && a.group === b.group;
const APPLY_CHUNK = 500;

/** Groups rows by bucket. */
export function byBucket(rows: RoutingRow[]): Map<string, { bucket: BucketId; rows: RoutingRow[] }> {
  const out = new Map<string, { bucket: BucketId; rows: RoutingRow[] }>();
  for (const r of rows) {
    const k = bucketName(r.bucket);
    const g = out.get(k) ?? out.set(k, { bucket: r.bucket, rows: [] }).get(k)!;
    g.rows.push(r);
  }
  return out;
}

/**
 * Writes the snapshot from PostgreSQL: one bucket (a repair after a read missed) or all of them
 * (a full rebuild, in chunks). Every write goes through the epoch rule, so builds, repairs and the
 * outbox consumer never need to exclude each other. A bucket is opened (created, incomplete)
 * BEFORE its rows are read: a change committed after the read is then either applied by the
 * consumer into the open bucket or was read by this build; none falls between the two.
 */
export class BucketBuilder {
  constructor(
    private readonly buckets: SnapshotBuckets,
    private readonly routing: RoutingAccounts,
    private readonly clock: Clock,
  ) {}

  private gen(): string {
    return randomBytes(8).toString('hex');
  }

  /**
   * Writes rows through the epoch rule. The bucket's high-water in PostgreSQL is raised FIRST:
   * no number reaches the bucket (nor so any answer) before PostgreSQL covers it, so a bucket
   * rebuilt after Redis lost its data, completed at the high-water, is never older than it was.
   */
  async applyRows(b: BucketId, rows: RoutingRow[]): Promise<number> {
    if (!rows.length) return 0;
    await this.routing.raiseEpoch(
      b,
      rows.reduce((m, r) => Math.max(m, r.version), 0),
    );
    let written = 0;
    for (let i = 0; i < rows.length; i += APPLY_CHUNK) {
      const n = await this.buckets.apply(b, rows.slice(i, i + APPLY_CHUNK), this.clock.now());
      if (n < 0) return -1;
      written += n;
    }
    return written;
  }

  /**
   * Tombstones for ids a bucket stores but a build did not see there: read again, an account
   * that moved elsewhere gets a tombstone at its current version, one that came back is written,
   * one that is gone gets a version newer than any it had.
   */
  async sweep(b: BucketId, seen: Set<number>): Promise<void> {
    const stray = (await this.buckets.ids(b)).filter((id) => !seen.has(id));
    if (!stray.length) return;
    const current = new Map((await this.routing.byIds(stray)).map((r) => [r.id, r]));
    const rows: RoutingRow[] = [];
    for (const id of stray) {
      const r = current.get(id);
      if (r && same(r.bucket, b)) rows.push(r);
      else rows.push({ id, version: r ? r.version : await this.routing.nextVersion(), bucket: b, entry: null });
    }
    await this.applyRows(b, rows);
  }

  /**
   * Builds one bucket; `reset` first discards what the store holds there (corrupt). Returns the
   * rows read. The bucket is completed (made servable) at the high-water read AFTER it was opened:
   * a high-water read before (a floor from before Redis lost its data, or from before a PostgreSQL
   * answer raised it) could serve an answer older than one already given.
   */
  async buildBucket(b: BucketId, reset: boolean, signal?: AbortSignal): Promise<RoutingRow[]> {
    const gen = await this.buckets.open(b, this.gen(), reset, this.clock.now(), await this.routing.epochOf(b));
    const rows = await this.routing.bucket(b, signal);
    if ((await this.applyRows(b, rows)) >= 0) {
      await this.sweep(b, new Set(rows.map((r) => r.id)));
      await this.buckets.complete(b, gen, this.clock.now(), await this.routing.epochOf(b));
    }
    return rows;
  }

  /**
   * Rebuilds every bucket: opens them all first, then scans the accounts in `chunk`-row pieces
   * (each a short query; `between` runs after each, to keep a claim alive and yield), then sweeps
   * and completes each bucket at its high-water read after all were opened (see `buildBucket`).
   * Returns the highest epoch a bucket was completed at (the rebuild's epoch).
   */
  async rebuildAll(chunk: number, between: () => Promise<void>, signal?: AbortSignal): Promise<{ accounts: number; buckets: number; epoch: number }> {
    const list = new Map<string, BucketId>();
    for (const b of [...(await this.routing.buckets()), ...(await this.buckets.known())]) list.set(bucketName(b), b);
    const opened = await this.routing.epochsOf([...list.values()]);
    const gens = new Map<string, string>();
    for (const [i, [k, b]] of [...list].entries()) gens.set(k, await this.buckets.open(b, this.gen(), false, this.clock.now(), opened[i]!));
    const seen = new Map<string, Set<number>>([...list.keys()].map((k) => [k, new Set<number>()]));
    let afterId = 0;
    let accounts = 0;
    let epoch = 0;
    for (;;) {
      signal?.throwIfAborted();
      const rows = await this.routing.scan(afterId, chunk);
      if (!rows.length) break;
      afterId = rows[rows.length - 1]!.id;
      accounts += rows.length;
      for (const [k, g] of byBucket(rows)) {
        // A bucket born after the rebuild started is not written here: its first read repairs it.
        if (!gens.has(k)) continue;
        for (const r of g.rows) seen.get(k)!.add(r.id);
        await this.applyRows(g.bucket, g.rows);
        for (const r of g.rows) epoch = Math.max(epoch, r.version);
      }
      await between();
      if (rows.length < chunk) break;
    }
    for (const [k, b] of list) {
      signal?.throwIfAborted();
      await this.sweep(b, seen.get(k)!);
    }
    const floors = await this.routing.epochsOf([...list.values()]);
    for (const [i, [k, b]] of [...list].entries()) {
      signal?.throwIfAborted();
      await this.buckets.complete(b, gens.get(k)!, this.clock.now(), floors[i]!);
      epoch = Math.max(epoch, floors[i]!);
    }
    return { accounts, buckets: list.size, epoch };
  }
}
