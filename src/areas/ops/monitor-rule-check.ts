import { z } from 'zod';
import { isMonitorMetric, MONITOR_EVENT_LABELS, MONITOR_METRIC_NAMES } from './monitor-series.js';
import type { MonitorSelector, MonitorWindows } from '../probes/index.js';
import type { FieldError } from '../../http/validation.js';
import { InvalidInput } from '../../errors/app-error.js';

/** An alert rule's `selector`: which monitors a rule over a `monitor_*` metric watches (null: not a monitor rule, or every enabled monitor). */
export function selectorShape(labels: z.ZodType<Record<string, string>>) {
  return z
    .object({
      monitor: z.string().min(1).max(200).optional(),
      monitor_id: z.number().int('expected a monitor id').positive('expected a monitor id').optional(),
      labels: labels.optional(),
    })
    .strict()
    .nullable();
}

/**
 * What the body's shape cannot say about a rule over monitors, checked when it is written:
 *
 * - only `monitor_*` metrics take a selector;
 * - a monitor named explicitly (`selector.monitor`, `selector.monitor_id`) must exist now (a
 *   typo would otherwise be a rule that never fires); a label selector may match nothing yet,
 *   since monitors are created later, and a monitor deleted after the rule is simply no longer
 *   selected;
 * - the rule's own labels may not use `monitor` / `monitor_id`: its events carry the monitor there.
 */
export async function checkMonitorRule(windows: MonitorWindows, r: { metric: string; selector: MonitorSelector | null; labels: Record<string, string> }): Promise<void> {
  if (!isMonitorMetric(r.metric)) {
    if (r.selector !== null) throw new InvalidInput([{ field: 'selector', message: `only rules over ${MONITOR_METRIC_NAMES.join(', ')} select monitors; ${r.metric} takes selector: null` }]);
    return;
  }
  const errs: FieldError[] = [];
  for (const k of MONITOR_EVENT_LABELS)
    if (k in r.labels)
      errs.push({ field: `labels.${k}`, message: `reserved on monitor rules (their events carry the monitor's ${k === 'monitor' ? 'name' : 'id'}); select monitors with selector.${k}` });
  const s = r.selector ?? {};
  const byId = s.monitor_id === undefined ? null : await windows.named({ monitor_id: s.monitor_id }, 1);
  const byName = s.monitor === undefined ? null : await windows.named({ monitor: s.monitor }, 1);
  if (byId && !byId.length) errs.push({ field: 'selector.monitor_id', message: `no monitor ${s.monitor_id}` });
  if (byName && !byName.length) errs.push({ field: 'selector.monitor', message: `no monitor named ${JSON.stringify(s.monitor)}` });
  if (byId?.length && byName?.length && byId[0]!.name !== s.monitor)
    errs.push({ field: 'selector.monitor', message: `monitor ${s.monitor_id} is named ${JSON.stringify(byId[0]!.name)}, so this selector matches nothing` });
  if (errs.length) throw new InvalidInput(errs);
}
