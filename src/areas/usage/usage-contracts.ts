import { z } from 'zod';
import { GROUPS } from './store/rollups.js';

/**
 * The usage API's schemas (issue 52): what its routes validate with and what they answer, so the
 * OpenAPI document is generated from the very schemas in use. Requests first, then responses (the
 * JSON on the wire: dates as ISO strings, exact decimals as strings).
 */

const when = z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-11-30T00:00:00Z' });
const textId = z.union([z.string().min(1).max(128), z.number().int().nonnegative()]).transform(String);
const range = <T extends z.ZodRawShape>(shape: T) =>
  z
    .object({ from: when, to: when, ...shape })
    .strict()
    .refine((r) => Date.parse((r as { to: string }).to) > Date.parse((r as { from: string }).from), { message: 'to must be after from', path: ['to'] });

export const usageBody = z
  .object({
    events: z.array(z.unknown(), { message: 'expected an array of usage events' }).meta({
      description:
        'usage events, each `{ request_id, user_id, api_key_id?, account_id?, platform, model, input_tokens, output_tokens, cache_tokens?, cost, latency_ms?, status_code?, created_at? }`, validated one by one (errors name `events.<i>.<field>`); a bad event means none of the batch is written; a repeated request_id is counted in `duplicates`, not stored again',
    }),
  })
  .strict();
// from/to may be left out: the last 24 hours by hour, the last 30 days by day (see DASHBOARD_DEFAULT_SPAN).
export const dashboardQuery = z
  .object({
    from: when.optional().meta({ description: 'default: `to` minus 24 hours (hour) or 30 days (day)' }),
    to: when.optional().meta({ description: 'default: `from` plus the span, or now' }),
    granularity: z.enum(['hour', 'day']).default('hour'),
    group_by: z.enum(Object.keys(GROUPS) as [keyof typeof GROUPS]).default('none'),
    user_id: z.string().optional(),
    account_id: z.string().optional(),
    platform: z.string().optional(),
    model: z.string().optional(),
  })
  .strict()
  .refine((r) => !r.from || !r.to || Date.parse(r.to) > Date.parse(r.from), { message: 'to must be after from', path: ['to'] });
export const recomputeBody = range({});
/** The seed's `max_range_days`: one cleanup task covers at most 31 days, so a task stays small enough to watch and cancel. */
export const CLEANUP_MAX_RANGE_DAYS = 31;
export const cleanupBody = range({ user_id: textId.optional().nullable(), account_id: textId.optional().nullable() }).refine(
  (r) => Date.parse(r.to) - Date.parse(r.from) <= CLEANUP_MAX_RANGE_DAYS * 86_400_000,
  { message: `the range may span at most ${CLEANUP_MAX_RANGE_DAYS} days (max_range_days); split it into several tasks`, path: ['to'] },
);
const idemKey = { scope: z.string().min(1).max(100), key: z.string().min(1).max(200) };
export const beginBody = z
  .object({
    ...idemKey,
    request: z.unknown().optional().meta({ description: 'the request body, hashed here; or give request_hash' }),
    request_hash: z
      .string()
      .regex(/^[0-9a-f]{16,128}$/, 'expected a hex digest')
      .optional(),
  })
  .strict()
  .refine((b) => (b.request === undefined) !== (b.request_hash === undefined), { message: 'give exactly one of request (the body, hashed here) or request_hash', path: ['request'] });
export const completeBody = z
  .object({ ...idemKey, request: z.unknown().optional(), request_hash: z.string().optional(), response: z.unknown(), status_code: z.number().int().min(100).max(599).optional() })
  .strict()
  .refine((b) => (b.request === undefined) !== (b.request_hash === undefined), { message: 'give exactly one of request or request_hash', path: ['request'] });
/** One quota increment: the HTTP body's items, and what `PlatformQuota.increment` checks for a library caller. */
export const quotaIncrement = z
  .object({ user_id: textId, platform: z.string().min(1).max(64), amount: z.number().int('expected a whole number').min(0, 'expected 0 or more (usage only grows; use reset)').max(1e15) })
  .strict();
export const incrementsBody = z
  .object({
    increments: z.array(quotaIncrement).min(1).max(10_000),
  })
  .strict();

export const IdParams = z.object({ id: z.string().meta({ description: 'the task id' }) });
// The same bounds as an increment's user_id and platform: a reset or read names what an increment could have written.
const userParam = z.string().min(1).max(128).meta({ description: 'the user id' });
export const UserParams = z.object({ user: userParam });
export const UserPlatformParams = z.object({ user: userParam, platform: z.string().min(1).max(64).meta({ description: 'the platform' }) });

const time = z.iso.datetime({ offset: true });
const taskStatus = z.enum(['pending', 'running', 'done', 'cancelled', 'failed']);

export const UsageAccepted = z
  .object({
    accepted: z.number().int().meta({ description: 'events taken (all of the batch)' }),
    stored: z.number().int().meta({ description: 'rows written now' }),
    duplicates: z.number().int().meta({ description: 'events whose request_id was already stored (not written again)' }),
    outcome: z.enum(['enqueued', 'sync_fallback', 'dropped']),
  })
  .meta({ id: 'UsageAccepted' });

export const UsageDashboard = z
  .object({
    from: time,
    to: time,
    granularity: z.enum(['hour', 'day']),
    group_by: z.enum(Object.keys(GROUPS) as [keyof typeof GROUPS]),
    timezone: z.string().meta({ description: 'usage.timezone: where days start' }),
    points: z.array(
      z.object({
        t: z.string().meta({ description: 'the bucket: an ISO date-time by hour, a local date (YYYY-MM-DD, usage.timezone) by day' }),
        key: z.string().nullable().meta({ description: 'the group_by value; null when not grouped' }),
        requests: z.number().int(),
        input_tokens: z.number().int(),
        output_tokens: z.number().int(),
        cache_tokens: z.number().int(),
        cost: z.string().meta({ description: 'exact decimal text' }),
        errors: z.number().int(),
        avg_latency_ms: z.number().nullable(),
      }),
    ),
  })
  .meta({ id: 'UsageDashboard' });

export const RecomputeTask = z
  .object({
    id: z.number().int(),
    from: time,
    to: time,
    next_start: time.meta({ description: 'where the next chunk starts' }),
    status: taskStatus,
    claimed_by: z.string().nullable(),
    heartbeat_at: time.nullable(),
    chunks: z.number().int(),
    chunks_done: z.number().int(),
    rows: z.number().int(),
    error: z.string().nullable(),
    created_at: time,
    finished_at: time.nullable(),
  })
  .meta({ id: 'RecomputeTask' });
export const RecomputeStarted = RecomputeTask.extend({ poll: z.string().meta({ description: 'where to follow it' }) }).meta({ id: 'RecomputeStarted' });
export const RecomputeList = z.object({ recomputes: z.array(RecomputeTask) }).meta({ id: 'RecomputeList' });

export const CleanupTask = z
  .object({
    id: z.number().int(),
    user_id: z.string().nullable(),
    account_id: z.string().nullable(),
    range_start: time,
    range_end: time,
    status: taskStatus,
    claimed_by: z.string().nullable(),
    heartbeat_at: time.nullable(),
    deleted_rows: z.number().int(),
    error: z.string().nullable(),
    created_at: time,
    finished_at: time.nullable(),
  })
  .meta({ id: 'CleanupTask' });
export const CleanupList = z.object({ tasks: z.array(CleanupTask) }).meta({ id: 'CleanupTaskList' });

export const IdempotencyBegin = z
  .discriminatedUnion('state', [
    z.object({ state: z.literal('started').meta({ description: 'go ahead; complete it when done' }) }),
    z.object({ state: z.literal('in_progress'), locked_until: time }),
    z.object({ state: z.literal('replay'), response: z.unknown().meta({ description: 'the stored response' }), status_code: z.number().int().nullable() }),
  ])
  .meta({ id: 'IdempotencyBegin' });
export const IdempotencyCompleted = z.object({ completed: z.literal(true) }).meta({ id: 'IdempotencyCompleted' });

export const QuotaIncrements = z
  .object({
    results: z
      .array(z.object({ user_id: z.string(), platform: z.string(), used: z.number().int().meta({ description: 'the usage after this increment' }) }))
      .meta({ description: 'in the order given' }),
  })
  .meta({ id: 'QuotaIncrements' });
export const QuotaUsage = z
  .object({
    user_id: z.string(),
    platforms: z.array(
      z.object({
        user_id: z.string(),
        platform: z.string(),
        used: z.number().int(),
        epoch: z.number().int().meta({ description: 'rises on every reset' }),
        updated_at: time,
        flushed: z.boolean().meta({ description: 'false while the live counter is ahead of PostgreSQL' }),
      }),
    ),
  })
  .meta({ id: 'QuotaUsage' });
export const QuotaReset = z.object({ user_id: z.string(), platform: z.string(), used: z.literal(0), epoch: z.number().int() }).meta({ id: 'QuotaReset' });
