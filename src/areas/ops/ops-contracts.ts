import { z } from 'zod';
import { parseDuration } from '../../config/duration.js';
import { REPORT_KINDS } from './store/ops-reports.js';
import { CLEANUP_TARGETS } from './store/ops-retention.js';
import { SERIES, SERIES_NAMES } from './catalogue.js';
import { OPERATORS, SEVERITIES } from './alert-logic.js';
import { isMonitorMetric, MONITOR_METRIC_NAMES } from './monitor-series.js';
import { selectorShape } from './monitor-rule-check.js';

/**
 * The ops API's schemas (issue 52): what its routes validate with and what they answer, so the
 * OpenAPI document is generated from the very schemas in use. Requests first, then responses (the
 * JSON on the wire: dates as ISO strings).
 */

const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-11-30T00:00:00Z' });

export const IdParams = (what: string) => z.object({ id: z.string().meta({ description: `the ${what} id` }) });

export const metricsQuery = z
  .object({
    from: when.optional().meta({ description: 'default: `to` minus one hour' }),
    to: when.optional().meta({ description: 'default: now' }),
    step: z.enum(['minute', 'hour', 'day']).optional().meta({ description: 'default: chosen from the range' }),
    instances: z.enum(['true', 'false']).optional().meta({ description: "`true`: each minute bucket's replicas too" }),
  })
  .strict();

const recipient = z.string().refine((r) => r === 'webhook' || /^[^@\s]+@[^@\s]+$/.test(r), { message: 'expected an e-mail address or "webhook"' });
const reportShape = {
  name: z.string().min(1).max(200),
  kind: z.enum(REPORT_KINDS, { message: `expected one of ${REPORT_KINDS.join(', ')}` }),
  cron: z.string().min(1).max(200),
  timezone: z.string().min(1).max(100),
  recipients: z.array(recipient).min(1, 'expected at least one recipient').max(100).meta({ description: 'e-mail addresses, or `webhook`' }),
  params: z.object({ min_count: z.number().int().min(1).optional(), error_rate_threshold: z.number().min(0).max(1).optional() }).strict(),
  enabled: z.boolean(),
};
export const reportCreate = z.object({ ...reportShape, timezone: reportShape.timezone.default('UTC'), params: reportShape.params.default({}), enabled: z.boolean().default(true) }).strict();
export const reportPatch = z.object(reportShape).partial().strict();
export const retentionBody = z
  .record(
    z.string().refine((t) => t in CLEANUP_TARGETS, { message: `unknown target; known: ${Object.keys(CLEANUP_TARGETS).join(', ')}` }),
    z.number({ message: 'expected a whole number of days' }).int('expected a whole number of days').min(-1, 'expected -1 (skip), 0 (empty) or a number of days'),
  )
  .meta({ description: `days to keep, by cleanup target (${Object.keys(CLEANUP_TARGETS).join(', ')}): -1 skips the target, 0 empties it` });

const dur = z
  .union([z.string(), z.number()])
  .transform((v, ctx) => {
    const ms = parseDuration(v);
    if (ms === null) {
      ctx.addIssue({ code: 'custom', message: 'expected a duration such as 30s, 5m, 1h (a bare number means seconds)' });
      return z.NEVER;
    }
    return ms;
  })
  .meta({ description: 'a duration such as 30s, 5m, 1h (a bare number means seconds)' });
const labels = z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]{0,62}$/, 'expected a label name of letters, digits, _'), z.string().max(200));
const ruleShape = {
  name: z.string().min(1).max(200),
  metric: z.string().refine((m) => m in SERIES || isMonitorMetric(m), { message: `unknown metric; known: ${[...SERIES_NAMES, ...MONITOR_METRIC_NAMES].join(', ')}` }),
  operator: z.enum(OPERATORS, { message: `expected one of ${OPERATORS.join(' ')}` }),
  threshold: z.number({ message: 'expected a number' }).finite(),
  window: dur,
  sustained: z.number().int('expected a whole number of evaluations').min(1).max(10_000),
  severity: z.enum(SEVERITIES, { message: `expected one of ${SEVERITIES.join(', ')}` }),
  cooldown: dur,
  labels,
  selector: selectorShape(labels).meta({ description: 'which monitors a rule over a `monitor_*` metric watches; null for any other metric' }),
  enabled: z.boolean(),
  notify: z.boolean(),
};
export const ruleCreate = z
  .object({
    ...ruleShape,
    sustained: ruleShape.sustained.default(1),
    cooldown: ruleShape.cooldown.default(0),
    labels: labels.default({}),
    selector: ruleShape.selector.default(null),
    enabled: z.boolean().default(true),
    notify: z.boolean().default(true),
  })
  .strict();
export const rulePatch = z.object(ruleShape).partial().strict();
export const silenceBody = z
  .object({
    rule_id: z.number().int().positive().nullable().default(null),
    matchers: labels.default({}),
    starts_at: when.optional().meta({ description: 'default: now' }),
    ends_at: when,
    reason: z.string().min(1).max(1000),
    author: z.string().min(1).max(200),
  })
  .strict();
export const eventsQuery = z.object({ state: z.enum(['firing', 'resolved']).optional(), limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();
export const silencesQuery = z.object({ all: z.string().optional().meta({ description: '`true`: ended silences too' }) });

const time = z.iso.datetime({ offset: true });
const series = z.record(z.string(), z.number().nullable()).meta({ description: 'series name → value (null when unknown in the bucket)' });
const stringMap = z.record(z.string(), z.string());

export const OpsBucketInstance = z
  .object({
    instance_id: z.string(),
    alive: z.boolean(),
    heartbeat_at: time,
    clock_skew_ms: z.number().nullable(),
    version: z.string(),
    process: z.looseObject({}).nullable().meta({ description: 'rss_bytes, heap_used_bytes, event_loop_lag_p99_ms, cpu_percent of its newest fresh beat; null unless alive' }),
    process_at: time.nullable(),
  })
  .meta({ id: 'OpsBucketInstance', description: 'A replica as a bucket records it' });

export const OpsMetrics = z
  .object({
    step: z.enum(['minute', 'hour', 'day']),
    from: time,
    to: time,
    bucket_seconds: z.number().meta({ description: 'ops.bucket, in seconds' }),
    points: z.array(z.object({ bucket: time, metrics: series, instances: z.array(OpsBucketInstance).optional().meta({ description: 'minute buckets, with `instances=true`' }) })),
  })
  .meta({ id: 'OpsMetrics' });

export const OpsAlertEvent = z
  .object({
    id: z.number().int(),
    rule_id: z.number().int(),
    rule_name: z.string(),
    metric: z.string(),
    severity: z.enum(SEVERITIES),
    state: z.enum(['firing', 'resolved']),
    value: z.number().nullable(),
    threshold: z.number(),
    series: z.string().meta({ description: "`''` for a rule over the ops series; `monitor:<id>` for one monitor of a monitor rule" }),
    labels: stringMap,
    silenced: z.boolean(),
    fired_at: time,
    resolved_at: time.nullable(),
  })
  .meta({ id: 'OpsAlertEvent' });
export const OpsAlertEventList = z.object({ events: z.array(OpsAlertEvent).meta({ description: 'newest first' }) }).meta({ id: 'OpsAlertEventList' });

const score = z.number().int().min(0).max(100);
export const OpsOverview = z
  .object({
    health_score: score.nullable().meta({ description: 'weighted mean of the known parts; null when none is known' }),
    health_parts: z.object({ errors: score.nullable(), jobs: score, alerts: score, freshness: score, error_rate: z.number().nullable() }),
    latest_bucket: time.nullable(),
    latest_metrics: series.nullable(),
    collector_fresh: z.boolean(),
    firing_alerts: z.array(OpsAlertEvent),
    jobs_by_health: z.record(z.string(), z.number().int()),
    instances: z.array(OpsBucketInstance),
  })
  .meta({ id: 'OpsOverview' });

export const OpsReport = z
  .object({
    id: z.number().int(),
    name: z.string(),
    kind: z.enum(REPORT_KINDS),
    cron: z.string(),
    timezone: z.string(),
    recipients: z.array(z.string()),
    params: z.object({ min_count: z.number().int().optional(), error_rate_threshold: z.number().optional() }),
    enabled: z.boolean(),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'OpsReport' });
export const OpsReportList = z.object({ reports: z.array(OpsReport) }).meta({ id: 'OpsReportList' });
export const OpsReportDetail = OpsReport.extend({
  next: z.array(time).meta({ description: 'the next five occurrences' }),
  runs: z
    .array(z.object({ occurrence: time, status: z.enum(['queued', 'skipped_empty', 'coalesced']), note: z.string().nullable(), created_at: time }))
    .meta({ description: 'recorded occurrences, newest first (at most 50)' }),
}).meta({ id: 'OpsReportDetail' });

export const OpsRetention = z
  .object({
    targets: z.array(z.object({ target: z.string(), days: z.number().int().nullable().meta({ description: '-1 skips, 0 empties; null: no setting' }), source: z.enum(['api', 'config']) })),
  })
  .meta({ id: 'OpsRetention' });

export const OpsAlertRule = z
  .object({
    id: z.number().int(),
    name: z.string(),
    metric: z.string(),
    operator: z.enum(OPERATORS),
    threshold: z.number(),
    window_seconds: z.number().int(),
    sustained: z.number().int(),
    severity: z.enum(SEVERITIES),
    cooldown_seconds: z.number().int(),
    labels: stringMap,
    selector: z.object({ monitor: z.string().optional(), monitor_id: z.number().int().optional(), labels: stringMap.optional() }).nullable(),
    enabled: z.boolean(),
    notify: z.boolean(),
    created_at: time,
    updated_at: time,
    window: z.string().meta({ description: 'window_seconds as a duration (`5m`)' }),
    cooldown: z.string().meta({ description: 'cooldown_seconds as a duration' }),
  })
  .meta({ id: 'OpsAlertRule' });
export const OpsAlertRuleList = z.object({ rules: z.array(OpsAlertRule) }).meta({ id: 'OpsAlertRuleList' });

export const OpsSilence = z
  .object({
    id: z.number().int(),
    rule_id: z.number().int().nullable(),
    matchers: stringMap,
    starts_at: time,
    ends_at: time,
    reason: z.string(),
    author: z.string(),
    created_at: time,
  })
  .meta({ id: 'OpsSilence' });
export const OpsSilenceList = z.object({ silences: z.array(OpsSilence) }).meta({ id: 'OpsSilenceList' });
