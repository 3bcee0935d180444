import { jobsFor } from '../../modules/define-job.js';
import type { UsageServices } from './wiring.js';
import { floorHour, HOUR, rebuildRange, wholeHourZone, WATERMARK_KEY } from './rollup-rebuild.js';
import { UsageMetrics } from './metrics.js';

const defineJob = jobsFor<UsageServices>();

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
  needs: ['rollups', 'usageStore', 'metrics', 'recomputes'],
  check: (config) =>
    wholeHourZone(config.usage.timezone)
      ? []
      : [`usage.timezone: ${JSON.stringify(config.usage.timezone)} is not a time zone with a whole-hour UTC offset; daily rollups are built from hourly buckets`],
  async run(ctx, { rollups, usageStore, metrics, recomputes }, _o, config) {
    const currentHour = floorHour(ctx.clock.now());
    const wm = await ctx.cursor.read<string>(WATERMARK_KEY);
    let from: number;
    if (wm) from = Date.parse(wm) - config.usage.lookback;
    else {
      const oldest = await usageStore.oldest();
      if (!oldest) {
        await ctx.cursor.write(WATERMARK_KEY, new Date(currentHour).toISOString());
        const recomputed = await recomputes.runOne(ctx);
        return { items: recomputed, note: `no usage yet; watermark set to the current hour${recomputed ? `; recompute rebuilt ${recomputed} rows` : ''}` };
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
          metrics.group(UsageMetrics).aggregationWatermark.set(next / 1000);
        }
        if (p.chunks > 1) ctx.log.info({ chunk: p.chunk, chunks: p.chunks, from: p.from.toISOString(), to: p.to.toISOString(), rows: p.rows }, 'aggregation backfill progress');
      },
      ctx.signal,
    );
    // Then at most one admin recompute per round (bounded, resumable; see recomputes.ts).
    const recomputed = await recomputes.runOne(ctx);
    const note = `rebuilt ${new Date(floorHour(from)).toISOString()} → ${new Date(currentHour + HOUR).toISOString()}, watermark ${new Date(watermark).toISOString()}`;
    return { items: rows + recomputed, note: recomputed ? `${note}; recompute rebuilt ${recomputed} rows` : note };
  },
});
