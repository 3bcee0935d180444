import type { Clock } from '../../time/clock.js';
import type { ImageBatches } from './store/image-batches.js';
import { TERMINAL, type BatchState } from './store/image-batches.js';
import type { ObjectStore } from './object-store.js';
import { OBJECTS_ROOT } from './batch-indexer.js';

type Refs = Map<number, { state: BatchState; inputDeleted: boolean; keys: Set<string> }>;

const LAYOUT = /^image-batches\/(\d{1,15})\/([A-Za-z0-9._-]+)$/;

/**
 * Whether no batch references an object: its batch is gone or `output_deleted`; or the batch has
 * ended and the object is neither its input (until the input's retention) nor one of its results'
 * images (a `.partial` file, an image of an earlier indexing that a re-index dropped); or the key
 * is under `image-batches/` outside the layout. A batch that has not ended may still be writing,
 * so nothing of it is an orphan.
 */
export function isOrphan(key: string, refs: Refs): boolean {
  const m = LAYOUT.exec(key);
  if (!m) return true;
  const r = refs.get(Number(m[1]));
  if (!r || r.state === 'output_deleted') return true;
  if (!TERMINAL.includes(r.state)) return false;
  if (m[2] === 'input.jsonl') return r.inputDeleted;
  return !r.keys.has(key);
}

/**
 * The orphan sweep: walks `image-batches/` a page (1000 objects) at a time and deletes what no
 * batch references and is older than `minAgeMs` (a writer that lost its lease may still be
 * putting an object; the age keeps the sweep clear of it). Retention deletes a batch's objects
 * once; the sweep collects what retention could not (a delete that failed after its claim
 * committed, objects of batches removed from the database, half-written files).
 */
export class OrphanSweep {
  constructor(
    private readonly store: ObjectStore,
    private readonly batches: ImageBatches,
    private readonly clock: Clock,
    private readonly minAgeMs: number,
  ) {}

  /** Deletes the orphans; returns how many objects it looked at and how many it deleted. */
  async run(signal?: AbortSignal): Promise<{ seen: number; deleted: number }> {
    let seen = 0;
    let deleted = 0;
    for await (const page of this.store.list(OBJECTS_ROOT)) {
      signal?.throwIfAborted();
      seen += page.length;
      const now = this.clock.now();
      const old = page.filter((o) => now - o.modifiedMs >= this.minAgeMs);
      if (!old.length) continue;
      const ids = [...new Set(old.map((o) => LAYOUT.exec(o.key)?.[1]).filter((id): id is string => id !== undefined))].map(Number);
      const refs = ids.length ? await this.batches.objectRefs(ids) : new Map();
      const orphans = old.filter((o) => isOrphan(o.key, refs)).map((o) => o.key);
      if (orphans.length) await this.store.deleteKeys(orphans);
      deleted += orphans.length;
    }
    return { seen, deleted };
  }
}
