import type { Config } from '../../config/load.js';
import type { AlertRule, Intent } from './store/ops-alerts.js';
import { atLeast } from './alert-logic.js';

/**
 * The outbox intents announcing one transition of one event: a key per event, transition,
 * channel and recipient, so whichever replica records the transition, it is sent once. `target`
 * is the event's series when it is not the rule's only one (a monitor of a monitor rule): its
 * title goes into the subject, its labels replace the rule's.
 */
export function alertIntents(
  config: Config,
  channels: Iterable<string>,
  rule: AlertRule,
  eventId: number,
  transition: 'firing' | 'resolved',
  value: number | null,
  silenced: boolean,
  target?: { labels: Record<string, string>; title: string | null },
): Intent[] {
  if (!rule.notify || silenced || !atLeast(rule.severity, config.ops.notify_min_severity)) return [];
  const title = target?.title ? ` (${target.title})` : '';
  const labels = target?.labels ?? rule.labels;
  const subject = `[${transition.toUpperCase()}] ${rule.severity}: ${rule.name}${title}`;
  const text = [
    `Alert ${rule.name}${title} is ${transition}.`,
    `${rule.metric} = ${value === null ? 'unknown' : round(value)} (rule: ${rule.metric} ${rule.operator} ${rule.threshold} over ${rule.window_seconds}s, ${rule.sustained} evaluation(s) in a row)`,
    `severity: ${rule.severity}`,
    Object.keys(labels).length
      ? `labels: ${Object.entries(labels)
          .map(([k, v]) => `${k}=${v}`)
          .join(', ')}`
      : '',
    `event: ${eventId}`,
  ]
    .filter(Boolean)
    .join('\n');
  const params = { subject, text, event_id: eventId, transition, rule: rule.name, severity: rule.severity, value, labels, ...(target?.title ? { series: target.title } : {}) };
  const out: Intent[] = [];
  for (const channel of channels) {
    const recipients = channel === 'email' ? config.ops.alert_recipients : ['ops'];
    for (const to of recipients) out.push({ dedupKey: `ops-alert:${eventId}:${transition}:${channel}:${to}`, channel, recipient: to, template: 'ops_alert', params });
  }
  return out;
}

function round(v: number): number {
  return Math.round(v * 1e4) / 1e4;
}
