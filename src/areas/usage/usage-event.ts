import { z } from 'zod';
import type { UsageRow } from './store/usage.js';

/** One usage record as stored: ids are the gateway's own, as text; cost is an exact decimal string. */
export type UsageEvent = UsageRow;

const ID = z
  .union([z.string().min(1).max(128), z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER)], { message: 'expected a string of 1-128 characters or a non-negative integer' })
  .transform(String);
const TOKENS = z.number({ message: 'expected a whole number of tokens' }).int('expected a whole number of tokens').min(0, 'expected 0 or more').max(1e12);
/** Decimal text or a JSON number; stored as numeric(24,10), so at most 14 integer and 10 fraction digits. */
const COST = z.union([z.string(), z.number()], { message: 'expected a decimal amount such as "0.0123"' }).transform((v, ctx) => {
  const text = typeof v === 'number' ? (Number.isFinite(v) ? String(v) : '') : v.trim();
  if (!/^\d{1,14}(\.\d{1,10})?$/.test(text)) {
    ctx.addIssue({ code: 'custom', message: `expected a non-negative decimal amount with at most 10 decimal places, got ${JSON.stringify(v)}` });
    return z.NEVER;
  }
  return text;
});

export const usageEventSchema = z
  .object({
    request_id: ID,
    user_id: ID,
    api_key_id: ID.optional().nullable(),
    account_id: ID.optional().nullable(),
    platform: z.string().min(1).max(64),
    model: z.string().min(1).max(200),
    input_tokens: TOKENS,
    output_tokens: TOKENS,
    cache_tokens: TOKENS.optional(),
    cost: COST,
    latency_ms: z.number().int().min(0).max(86_400_000).optional().nullable(),
    status_code: z.number().int().min(100).max(599).optional().nullable(),
    created_at: z.iso.datetime({ offset: true, message: 'expected an ISO 8601 date-time such as 2026-11-30T12:00:00Z' }).optional(),
  })
  .strict();

export type UsageEventInput = z.input<typeof usageEventSchema>;

/**
 * Fills the defaults and checks `created_at` against what can be stored: not older than the raw
 * retention (it would be deleted at once) and not more than a day ahead (a clock gone wrong).
 * Returns a problem text or the event.
 */
export function normalizeUsage(e: z.output<typeof usageEventSchema>, nowMs: number, retentionMs: number): UsageEvent | string {
  const created = e.created_at ? Date.parse(e.created_at) : nowMs;
  if (created < nowMs - retentionMs + 3_600_000) return `created_at ${e.created_at} is older than the usage retention (usage.retention); it would be deleted at once`;
  if (created > nowMs + 86_400_000) return `created_at ${e.created_at} is more than a day in the future; check the gateway's clock`;
  return {
    request_id: e.request_id,
    user_id: e.user_id,
    api_key_id: e.api_key_id ?? null,
    account_id: e.account_id ?? null,
    platform: e.platform,
    model: e.model,
    input_tokens: e.input_tokens,
    output_tokens: e.output_tokens,
    cache_tokens: e.cache_tokens ?? 0,
    cost: e.cost,
    latency_ms: e.latency_ms ?? null,
    status_code: e.status_code ?? null,
    created_at: new Date(created).toISOString(),
  };
}
