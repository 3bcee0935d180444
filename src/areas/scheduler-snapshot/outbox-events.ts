import type { OutboxEvent } from './store/scheduler-outbox.js';
import type { BucketId } from './store/routing-accounts.js';
import { bucketName } from './bucket-builder.js';
import { num } from '../../store/db.js';

/** What a batch of outbox events asks of the snapshot: the accounts to re-read, and per bucket the accounts that left it. */
export interface BatchChanges {
  ids: Set<number>;
  /** By bucket name: accounts an event says left that bucket (a tombstone unless the re-read puts them back). */
  left: Map<string, { bucket: BucketId; ids: Set<number> }>;
  /** Events of a type this version does not know (acknowledged without effect). */
  unknown: OutboxEvent[];
}

/** Decodes a batch's payloads; an id that is not a safe integer is skipped. */
export function batchChanges(events: readonly OutboxEvent[]): BatchChanges {
  const ids = new Set<number>();
  const left = new Map<string, { bucket: BucketId; ids: Set<number> }>();
  const unknown: OutboxEvent[] = [];
  for (const e of events) {
    if (e.type === 'account_changed') {
      const id = num(e.payload.account_id);
      if (Number.isSafeInteger(id)) ids.add(id);
      for (const l of (e.payload.left as unknown[]) ?? []) {
        const [platform, group] = l as [string, string];
        const b = { platform: String(platform), group: String(group ?? '') };
        const g = left.get(bucketName(b)) ?? left.set(bucketName(b), { bucket: b, ids: new Set() }).get(bucketName(b))!;
        g.ids.add(id);
      }
    } else if (e.type === 'account_bulk_changed') {
      // Written explicitly by account_expiry and proxy_expiry; the trigger records the same changes per account.
      for (const id of (e.payload.account_ids as unknown[]) ?? []) if (Number.isSafeInteger(num(id))) ids.add(num(id));
    } else unknown.push(e);
  }
  return { ids, left, unknown };
}
