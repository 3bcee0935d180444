import type { MonitorWindow, MonitorWindows } from '../probes/index.js';
import type { AlertRule } from './store/ops-alerts.js';
import { bucketStart } from './catalogue.js';

/**
 * Alert metrics over channel monitors (docs/probes.md, "Alerting on monitors"). They are not in
 * the ops series: each round reads the selected monitors' probes over the rule's window
 * (store/monitor-windows.ts) and evaluates every monitor as a series of its own, with its own
 * streak and event.
 *
 * - `monitor_availability`: ok probes / probes × 100 (a percentage, 0-100);
 * - `monitor_p95_latency_ms`: the worst minute's p95 probe latency in the window (failed probes
 *   included: a timeout counts as its duration), like the ops series' `p95_latency_ms`.
 *
 * A monitor with no probe in the window is unknown: its streak resets and a firing event stays.
 */
export const MONITOR_METRICS: Record<string, (w: MonitorWindow) => number | null> = {
  monitor_availability: (w) => (w.probes ? (w.ok / w.probes) * 100 : null),
  monitor_p95_latency_ms: (w) => (w.probes ? w.p95Ms : null),
};

export const MONITOR_METRIC_NAMES = Object.keys(MONITOR_METRICS);

export function isMonitorMetric(metric: string): boolean {
  return metric in MONITOR_METRICS;
}

/** Label names a monitor rule's own labels may not use: its events carry the monitor there. */
export const MONITOR_EVENT_LABELS = ['monitor', 'monitor_id'] as const;

/** One series a rule is evaluated over in a round: its key, the labels its event carries, and what it observed. */
export interface SeriesObservation {
  key: string;
  labels: Record<string, string>;
  /** Shown in notifications and logs, e.g. `monitor openai-main`; null for a rule over the ops series. */
  title: string | null;
  bucket: number | null;
  value: number | null;
}

export const monitorSeriesKey = (id: number) => `monitor:${id}`;

/**
 * The series of one monitor rule: one per enabled monitor its selector matches. The observed
 * bucket is the newest probe's bucket on the ops grid, so a streak advances at most once per
 * `ops.bucket` and only on a probe newer than the last one counted (a round that sees no new
 * probe counts nothing twice). The event's labels: the monitor's labels, then the rule's, then
 * `monitor` (name) and `monitor_id`.
 */
export async function monitorSeries(windows: MonitorWindows, rule: AlertRule, bucketMs: number): Promise<SeriesObservation[]> {
  const rows = await windows.window(rule.selector ?? {}, rule.window_seconds * 1000);
  return rows.map((w) => ({
    key: monitorSeriesKey(w.id),
    labels: { ...w.labels, ...rule.labels, monitor: w.name, monitor_id: String(w.id) },
    title: `monitor ${w.name}`,
    bucket: w.newest && w.probes ? bucketStart(w.newest.getTime(), bucketMs) : null,
    value: MONITOR_METRICS[rule.metric]!(w),
  }));
}
