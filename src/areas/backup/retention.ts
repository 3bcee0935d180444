import type { BackupRecord } from './store/backups.js';

/**
 * Which finished backups retention deletes. `records` newest first. A backup is kept while it is
 * among the newest `keepLast`, or younger than `keepDays` when that is set; everything else
 * goes, except the newest verified backup (or, with verification off, the newest completed one),
 * which is never deleted: retention must not leave the cluster without a backup known to restore.
 */
export function pickPrunable(records: BackupRecord[], p: { keepLast: number; keepDays?: number; now: number }): BackupRecord[] {
  const newestVerified = records.find((r) => r.state === 'verified') ?? records.find((r) => r.state === 'completed');
  return records.filter((r, i) => {
    if (r.state === 'running' || r === newestVerified) return false;
    if (i < p.keepLast) return false;
    if (p.keepDays !== undefined && p.now - Date.parse(r.started_at) < p.keepDays * 86_400_000) return false;
    return true;
  });
}
