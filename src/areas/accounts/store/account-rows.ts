// How an `accounts` row reads as the API's view (and how metadata is written): the columns, the
// mapping, the jsonb helpers. The statements stay in accounts.ts; this is only the row's shape.
import { iso, num } from '../../../store/db.js';
import type { AccountMetadata, AccountStatus, AccountView } from './account-types.js';

export const VIEW_COLUMNS = `id, platform, name, status, status_reason, schedulable, expires_at, auto_pause_on_expired, temp_unschedulable_until,
  temp_unschedulable_reason, proxy_id, proxy_fallback_origin_id, has_refresh_token, token_expires_at, token_version, metadata,
  last_refresh_attempt_at, last_refresh_success_at, refresh_failures, last_refresh_error, created_at, updated_at`;

const optNum = (v: unknown) => (v === null || v === undefined ? null : num(v));
/** jsonb comes back parsed from pg and PGlite alike; a string is parsed for safety. */
export const metadataOf = (v: unknown): AccountMetadata => (typeof v === 'string' ? (JSON.parse(v) as AccountMetadata) : ((v as AccountMetadata | null) ?? {}));
/** Only the keys that have a value: `{chatgpt_account_id: undefined}` must not erase a stored id. */
export const compact = (m: AccountMetadata): string => JSON.stringify(Object.fromEntries(Object.entries(m).filter(([, v]) => typeof v === 'string' && v.length > 0)));

export function toView(r: Record<string, unknown>): AccountView {
  return {
    id: num(r.id),
    platform: String(r.platform),
    name: String(r.name),
    status: r.status as AccountStatus,
    status_reason: (r.status_reason as string) ?? null,
    schedulable: Boolean(r.schedulable),
    expires_at: iso(r.expires_at),
    auto_pause_on_expired: Boolean(r.auto_pause_on_expired),
    temp_unschedulable_until: iso(r.temp_unschedulable_until),
    temp_unschedulable_reason: (r.temp_unschedulable_reason as string) ?? null,
    proxy_id: optNum(r.proxy_id),
    proxy_fallback_origin_id: optNum(r.proxy_fallback_origin_id),
    has_refresh_token: Boolean(r.has_refresh_token),
    token_expires_at: iso(r.token_expires_at),
    token_version: num(r.token_version),
    metadata: metadataOf(r.metadata),
    refresh: {
      last_attempt_at: iso(r.last_refresh_attempt_at),
      last_success_at: iso(r.last_refresh_success_at),
      consecutive_failures: num(r.refresh_failures),
      last_error: (r.last_refresh_error as string) ?? null,
    },
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}
