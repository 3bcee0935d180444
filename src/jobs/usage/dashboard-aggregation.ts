import { defineJob } from '../define-job.js';
import type { Rollups } from '../../store/rollups.js';

const HOUR = 3_600_000;
/** A backfill is done in chunks of this much raw time, each its own transaction, with progress. */
const CHUNK = 24 * HOUR;
export const WATERMARK_JOB = 'dashboard_aggregation';
export const WATERMARK_KEY = 'watermark';

const floorHour = (ms: number) => Math.floor(ms / HOUR) * HOUR;

/** Time zones whose offset is not a whole number of hours cannot be built from hourly buckets. */
export function wholeHourZone(tz: string): boolean {
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

/**
 * dashboard_aggregation: rebuilds the hours from (watermark − lookback) up to the current hour,
 * so events that arrive late are counted, then moves the watermark to the start of the current
 * hour (it is never covered while it can still grow). The watermark is a fenced cursor: a round
 * that lost its lease cannot move it, and it only moves forward, only after its hours are built.
 * The first round backfills from the oldest raw row, a day per transaction, logging progress.
 */
export const dashboardAggregationJob = defineJob({
    name: 'dashboard_aggregation',
    description: 'Rebuilds hourly and daily usage rollups from the watermark minus the lookback window, then advances the watermark',
    scope: 'cluster',
    defaults: { enabled: true, every: '1m', timeout: '10m' },
    needs: ['rollups', 'usageStore', 'metrics'],
    check: (config) => (wholeHourZone(config.usage.timezone) ? [] : [`usage.timezone: ${JSON.stringify(config.usage.timezone)} is not a time zone with a whole-hour UTC offset; daily rollups are built from hourly buckets`]),
    async run(ctx, { rollups, usageStore, metrics }, _o, config) {
      const currentHour = floorHour(ctx.clock.now());
      const wm = await ctx.cursor.read<string>(WATERMARK_KEY);
      let from: number;
      if (wm) from = Date.parse(wm) - config.usage.lookback;
      else {
        const oldest = await usageStore.oldest();
        if (!oldest) {
          await ctx.cursor.write(WATERMARK_KEY, new Date(currentHour).toISOString());
          return { items: 0, note: 'no usage yet; watermark set to the current hour' };
        }
        from = oldest.getTime();
      }
      let watermark = wm ? Date.parse(wm) : 0;
      const rows = await rebuildRange(
        rollups,
        new Date(from),
        new Date(currentHour + HOUR),
        async (p) => {
          const next = Math.min(p.to.getTime(), currentHour);
          if (next > watermark) {
            await ctx.cursor.write(WATERMARK_KEY, new Date(next).toISOString());
            watermark = next;
            metrics.aggregationWatermark.set(next / 1000);
          }
          if (p.chunks > 1) ctx.log.info({ chunk: p.chunk, chunks: p.chunks, from: p.from.toISOString(), to: p.to.toISOString(), rows: p.rows }, 'aggregation backfill progress');
        },
        ctx.signal,
      );
      return { items: rows, note: `rebuilt ${new Date(floorHour(from)).toISOString()} → ${new Date(currentHour + HOUR).toISOString()}, watermark ${new Date(watermark).toISOString()}` };
    },
});
