/**
 * The alert state machine, pure (the evaluator feeds it stored state and stores what it returns):
 *
 *   ok ──breach × sustained (and not cooling down)──▶ firing ──no breach──▶ ok (resolved_at)
 *
 * The streak advances at most once per evaluated bucket: an observation of a bucket already
 * counted changes nothing, so a re-run after a crash never doubles it. An unknown value (no
 * metric row recent enough) resets the streak and never resolves a firing alert.
 */
export const OPERATORS = ['>', '>=', '<', '<=', '==', '!='] as const;
export type Operator = (typeof OPERATORS)[number];
export const SEVERITIES = ['info', 'warning', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];

export interface RuleSpec {
  id: number;
  name: string;
  metric: string;
  operator: Operator;
  threshold: number;
  sustained: number;
  cooldownMs: number;
  severity: Severity;
  labels: Record<string, string>;
}

export interface AlertState {
  streak: number;
  lastBucket: number | null;
  firing: boolean;
  resolvedAt: number | null;
}

export interface Observation {
  /** The newest bucket the value covers; null when no recent bucket exists. */
  bucket: number | null;
  value: number | null;
}

export type Transition = 'none' | 'fire' | 'resolve';

export function breaches(value: number, op: Operator, threshold: number): boolean {
  switch (op) {
    case '>':
      return value > threshold;
    case '>=':
      return value >= threshold;
    case '<':
      return value < threshold;
    case '<=':
      return value <= threshold;
    case '==':
      return value === threshold;
    case '!=':
      return value !== threshold;
  }
}

export function step(rule: RuleSpec, s: AlertState, o: Observation, now: number): { state: AlertState; transition: Transition } {
  if (o.bucket !== null && s.lastBucket !== null && o.bucket <= s.lastBucket) return { state: s, transition: 'none' };
  if (o.bucket === null || o.value === null) return { state: { ...s, streak: 0, lastBucket: o.bucket ?? s.lastBucket }, transition: 'none' };
  if (!breaches(o.value, rule.operator, rule.threshold)) {
    const next = { ...s, streak: 0, lastBucket: o.bucket };
    if (!s.firing) return { state: next, transition: 'none' };
    return { state: { ...next, firing: false, resolvedAt: now }, transition: 'resolve' };
  }
  const streak = s.streak + 1;
  const next = { ...s, streak, lastBucket: o.bucket };
  const coolingDown = s.resolvedAt !== null && now < s.resolvedAt + rule.cooldownMs;
  if (!s.firing && streak >= rule.sustained && !coolingDown) return { state: { ...next, firing: true }, transition: 'fire' };
  return { state: next, transition: 'none' };
}

export interface Silence {
  id: number;
  rule_id: number | null;
  matchers: Record<string, string>;
  starts_at: string;
  ends_at: string;
}

/** The labels a silence matches against: the rule's own plus `alertname`, `metric`, `severity`. */
export function alertLabels(rule: Pick<RuleSpec, 'name' | 'metric' | 'severity' | 'labels'>): Record<string, string> {
  return { ...rule.labels, alertname: rule.name, metric: rule.metric, severity: rule.severity };
}

/** The first silence active at `now` that covers the rule (by id, or by every matcher equal). */
export function silencedBy(rule: RuleSpec, silences: Silence[], now: number): Silence | null {
  const labels = alertLabels(rule);
  for (const s of silences) {
    if (now < Date.parse(s.starts_at) || now >= Date.parse(s.ends_at)) continue;
    if (s.rule_id !== null && s.rule_id !== rule.id) continue;
    const m = Object.entries(s.matchers);
    if (s.rule_id === null && !m.length) continue;
    if (m.every(([k, v]) => labels[k] === v)) return s;
  }
  return null;
}

export function atLeast(severity: Severity, min: Severity): boolean {
  return SEVERITIES.indexOf(severity) >= SEVERITIES.indexOf(min);
}
