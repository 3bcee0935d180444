import type { Queryable } from '../store/db.js';

/**
 * The instance registry's face for a database just restored from a backup (the backup area's
 * restore): the replicas its `instances` rows list as live belong to the source cluster, so every
 * one is marked stopped, on the caller's connection. `instances` is the kernel's table: no area
 * writes it itself (test/table-owners.test.ts).
 */
export async function markRestoredInstancesStopped(q: Queryable): Promise<void> {
  await q.query('UPDATE instances SET stopped_at = clock_timestamp() WHERE stopped_at IS NULL');
}
