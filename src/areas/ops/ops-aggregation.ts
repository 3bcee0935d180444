import type { SeriesValues } from './store/ops-metrics.js';
import { jobsFor } from '../../modules/define-job.js';
import type { OpsServices } from './wiring.js';
import type { NotificationsFace } from '../notifications/index.js';
import { fold, SERIES_NAMES } from './catalogue.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

const defineJob = jobsFor<OpsServices & NotificationsFace>();

/** Folds the finer points into one coarser bucket per `size`, starting at `from`. */
function rollupPoints(points: Array<{ bucket: string; metrics: SeriesValues }>, size: number, fineSeconds: number) {
  const groups = new Map<number, Array<{ metrics: SeriesValues }>>();
  for (const p of points) {
    const k = Math.floor(Date.parse(p.bucket) / size) * size;
    (groups.get(k) ?? groups.set(k, []).get(k)!).push(p);
  }
  return [...groups].map(([k, ps]) => ({ bucket: new Date(k), samples: ps.length, metrics: Object.fromEntries(SERIES_NAMES.map((s) => [s, fold(s, ps, fineSeconds)])) }));
}

/**
 * ops_aggregation: every 10 minutes, hourly rollups from the minute buckets, resuming at the
 * fenced watermark minus a 2 h overlap (late buckets are folded in again); once an hour, daily
 * rollups from the hourly ones with a 48 h overlap. Rollup writes are idempotent per bucket.
 */
export const opsAggregationJob = defineJob({
  name: 'ops_aggregation',
  description: 'Rolls ops minute buckets up into hourly and daily buckets (fenced watermark, overlap)',
  scope: 'cluster',
  defaults: { enabled: true, every: '10m', timeout: '5m' },
  needs: ['ops'],
  async run(ctx, { ops }, _o, config) {
    const now = ctx.clock.now();
    const hourMark = (await ctx.cursor.read<string>('hourly_watermark')) ?? (await ops.series.oldest('minute'))?.toISOString() ?? null;
    if (!hourMark) return { items: 0, note: 'no minute buckets yet' };
    const hFrom = new Date(Math.floor((Date.parse(hourMark) - 2 * HOUR) / HOUR) * HOUR);
    const hTo = new Date(Math.floor(now / HOUR) * HOUR + HOUR);
    const hourly = rollupPoints(await ops.series.range('minute', hFrom, hTo, 1_000_000), HOUR, config.ops.bucket / 1000);
    let n = await ops.series.rollup('hour', hourly);
    await ctx.cursor.write('hourly_watermark', new Date(Math.floor(now / HOUR) * HOUR).toISOString());
    const lastDaily = await ctx.cursor.read<string>('daily_at');
    if (!lastDaily || now - Date.parse(lastDaily) >= HOUR) {
      const dayMark = (await ctx.cursor.read<string>('daily_watermark')) ?? hFrom.toISOString();
      const dFrom = new Date(Math.floor((Date.parse(dayMark) - 2 * DAY) / DAY) * DAY);
      const daily = rollupPoints(await ops.series.range('hour', dFrom, new Date(Math.floor(now / DAY) * DAY + DAY)), DAY, 3600);
      n += await ops.series.rollup('day', daily);
      await ctx.cursor.write('daily_watermark', new Date(Math.floor(now / DAY) * DAY).toISOString());
      await ctx.cursor.write('daily_at', new Date(now).toISOString());
    }
    return { items: n, note: `${hourly.length} hourly buckets from ${hFrom.toISOString()}` };
  },
});
