import { z } from 'zod';
import { MONITOR_PROVIDERS } from '../accounts/index.js';
import { DURATION_FORM, parseDuration } from '../../config/duration.js';
import { id, when } from '../../http/field-schemas.js';

/**
 * The probes API's schemas (issue 52): channel monitors and scheduled account tests, what their
 * routes validate with and what they answer, so the OpenAPI document is generated from them.
 */

const durationField = z
  .union([z.string(), z.number()])
  .transform((v, ctx) => {
    const ms = parseDuration(v);
    if (ms === null) {
      ctx.addIssue({ code: 'custom', message: `expected ${DURATION_FORM}` });
      return z.NEVER;
    }
    return ms;
  })
  .meta({ description: `a duration: ${DURATION_FORM}` });
const baseUrl = z
  .string()
  .max(2048)
  .refine((s) => {
    try {
      const u = new URL(s);
      return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '' && !u.username && !u.password && !u.search && !u.hash;
    } catch {
      return false;
    }
  }, 'expected an http(s) base URL such as https://api.example.com (no credentials, query or fragment)');
const monitorFields = {
  name: z.string().min(1).max(200),
  base_url: baseUrl.nullable(),
  model: z.string().min(1).max(200),
  api_key: z.string().min(1).max(4096).nullable().meta({ description: 'write-only: sealed on the way in, never returned' }),
  account_id: id.nullable().meta({ description: 'probe through this account (its platform, token and proxy) instead of base_url and api_key' }),
  interval: durationField,
  timeout: durationField,
  jitter: durationField,
  enabled: z.boolean(),
  provider: z.enum(MONITOR_PROVIDERS, { message: `expected one of ${MONITOR_PROVIDERS.join(', ')}` }),
  challenge: z.boolean(),
  degraded_after: durationField.nullable(),
  labels: z.record(z.string().max(100), z.string().max(500)).refine((l) => Object.keys(l).length <= 32, 'at most 32 labels'),
};
export const newMonitorSchema = z.object(monitorFields).partial().required({ name: true, model: true, interval: true }).strict();
export const patchMonitorSchema = z.object(monitorFields).partial().strict();
export const historyQuery = z.object({ from: when, to: when.optional().meta({ description: 'default: now' }) }).strict();
/** Read leniently as always (the server's numeric-query check has made them whole numbers). */
export const pageQuery = z.object({
  after_id: z.coerce.number().int().optional(),
  limit: z.coerce.number().int().optional().meta({ description: 'default 100; at most 1000 (more is taken as 1000)' }),
});

const planFields = {
  account_id: id,
  cron: z.string().min(1).max(200),
  timezone: z.string().min(1).max(64).meta({ description: 'an IANA zone; default UTC' }),
  model: z.string().min(1).max(200),
  max_results: z.number().int().min(1).max(1000).meta({ description: 'results kept; default 50' }),
  auto_recover: z.boolean(),
  enabled: z.boolean(),
};
export const newPlanSchema = z.object(planFields).partial().required({ account_id: true, cron: true, model: true }).strict();
export const patchPlanSchema = z.object(planFields).partial().strict();
export const planPageQuery = pageQuery.extend({ account_id: z.string().optional().meta({ description: "only this account's plans" }) });

export const IdParams = z.object({ id: z.string().meta({ description: 'the id' }) });

const time = z.iso.datetime({ offset: true });

export const Monitor = z
  .object({
    id: z.number().int(),
    name: z.string(),
    base_url: z.string().nullable(),
    model: z.string(),
    account_id: z.number().int().nullable(),
    has_api_key: z.boolean().meta({ description: 'the key itself is never returned' }),
    provider: z.enum(MONITOR_PROVIDERS).nullable().meta({ description: "the API-key dialect; null for a monitor with account_id (it speaks its account's platform)" }),
    challenge: z.boolean(),
    degraded_after_ms: z.number().int().nullable(),
    interval_ms: z.number().int(),
    timeout_ms: z.number().int(),
    jitter_ms: z.number().int(),
    enabled: z.boolean(),
    labels: z.record(z.string(), z.string()),
    next_due_at: time,
    last_probe: z.object({ at: time.nullable(), status: z.number().int().nullable(), error_class: z.string().nullable(), latency_ms: z.number().int().nullable() }),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'Monitor' });
export const MonitorList = z.object({ monitors: z.array(Monitor) }).meta({ id: 'MonitorList' });

const RawPoint = z.object({
  started_at: time,
  scheduled_for: time,
  ok: z.boolean(),
  status: z.number().int().nullable(),
  latency_ms: z.number().int(),
  ttfb_ms: z.number().int().nullable(),
  error_class: z.string().nullable(),
});
const MinutePoint = z.object({
  minute: time,
  probes: z.number().int(),
  ok: z.number().int(),
  availability: z.number(),
  p50_ms: z.number().nullable(),
  p95_ms: z.number().nullable(),
  errors: z.record(z.string(), z.number().int()).meta({ description: 'probes per error class' }),
});
export const MonitorHistory = z
  .discriminatedUnion('resolution', [
    z.object({ monitor_id: z.number().int(), resolution: z.literal('raw'), from: time, to: time, points: z.array(RawPoint) }),
    z.object({ monitor_id: z.number().int(), resolution: z.literal('minute'), from: time, to: time, points: z.array(MinutePoint) }),
  ])
  .meta({ id: 'MonitorHistory', description: 'raw probes for ranges up to two hours within the raw retention, minute rollups beyond' });

export const Plan = z
  .object({
    id: z.number().int(),
    account_id: z.number().int(),
    cron: z.string(),
    timezone: z.string(),
    model: z.string(),
    max_results: z.number().int(),
    auto_recover: z.boolean(),
    enabled: z.boolean(),
    next_run_at: time,
    last_run_at: time.nullable(),
    last_ok: z.boolean().nullable(),
    missed: z.number().int().meta({ description: 'phase slots skipped as more than half an interval late' }),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'AccountTestPlan' });
export const PlanList = z.object({ plans: z.array(Plan) }).meta({ id: 'AccountTestPlanList' });
export const PlanWithResults = Plan.extend({
  results: z.array(
    z.object({
      occurrence: time,
      started_at: time,
      ok: z.boolean(),
      status: z.number().int().nullable(),
      latency_ms: z.number().int(),
      ttfb_ms: z.number().int().nullable(),
      error_class: z.string().nullable(),
      recovered: z.boolean(),
      instance_id: z.string(),
    }),
  ),
}).meta({ id: 'AccountTestPlanDetail' });
export const PlanAudit = z
  .object({
    account_id: z.number().int(),
    audit: z.array(z.object({ action: z.string(), actor: z.string(), detail: z.unknown(), created_at: time })).meta({ description: 'newest first, at most 100' }),
  })
  .meta({ id: 'AccountAudit' });
