import { AGGREGATION_WATERMARK, type Rollups } from './store/rollups.js';
import { isUtcZone } from '../../time/zones.js';

export const HOUR = 3_600_000;
/** A backfill is done in chunks of this much raw time, each its own transaction, with progress. */
export const CHUNK = 24 * HOUR;
export const WATERMARK_KEY = AGGREGATION_WATERMARK.key;

export const floorHour = (ms: number) => Math.floor(ms / HOUR) * HOUR;

/** Time zones whose offset is not a whole number of hours cannot be built from hourly buckets. */
export function wholeHourZone(tz: string): boolean {
  if (isUtcZone(tz)) return true; // the default: no need to load the zone data (time/zones.ts)
  for (const month of [0, 6]) {
    const d = new Date(Date.UTC(2026, month, 15, 12));
    const local = new Date(d.toLocaleString('en-US', { timeZone: tz }));
    const utc = new Date(d.toLocaleString('en-US', { timeZone: 'UTC' }));
    if ((local.getTime() - utc.getTime()) % HOUR !== 0) return false;
  }
  return true;
}

export interface RebuildProgress {
  chunk: number;
  chunks: number;
  from: Date;
  to: Date;
  rows: number;
}

/** Rebuilds hourly then daily rollups over [from, to) in chunks; `onChunk` sees each chunk (progress, watermark). */
export async function rebuildRange(rollups: Rollups, from: Date, to: Date, onChunk: (p: RebuildProgress) => Promise<void> | void, signal?: AbortSignal): Promise<number> {
  const start = floorHour(from.getTime());
  const end = to.getTime();
  const chunks = Math.max(1, Math.ceil((end - start) / CHUNK));
  let rows = 0;
  for (let i = 0, a = start; a < end; i++, a += CHUNK) {
    signal?.throwIfAborted();
    const b = Math.min(a + CHUNK, end);
    const n = (await rollups.rebuildHours(new Date(a), new Date(b))) + (await rollups.rebuildDays(new Date(a), new Date(b)));
    rows += n;
    await onChunk({ chunk: i + 1, chunks, from: new Date(a), to: new Date(b), rows: n });
  }
  return rows;
}
