import type { Granularity } from './store/ops-metrics.js';

const HOUR = 3_600_000;

/** Minute buckets up to 6 h, hourly rollups up to 14 days, daily beyond: long ranges read rollups only. */
export function chooseGranularity(from: Date, to: Date, step?: Granularity): { granularity: Granularity } {
  if (step) return { granularity: step };
  const span = to.getTime() - from.getTime();
  return { granularity: span <= 6 * HOUR ? 'minute' : span <= 14 * 24 * HOUR ? 'hour' : 'day' };
}
