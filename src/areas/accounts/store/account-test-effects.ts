import type { Queryable } from '../../../store/db.js';
import { iso } from '../../../store/db.js';
import type { AccountStatus } from './account-types.js';

/** A test's result as far as the account is concerned. */
export interface TestResultForAccount {
  ok: boolean;
  errorClass: string | null;
  status: number | null;
  detail: string | null;
  /** A 429's reset (epoch ms) when the reply gave one. */
  resetAtMs: number | null;
}

/** What a test did to the account (shown by `accounts test`, audited). */
export interface TestEffect {
  status_before: AccountStatus | null;
  status_after: AccountStatus | null;
  temp_unschedulable_until: string | null;
  temp_unschedulable_reason: string | null;
  /** True when a pass cleared an error or a rate limit (auto_recover). */
  recovered: boolean;
  note: string;
}

const RATE_LIMIT_DEFAULT_MS = 5 * 60_000;
const OVERLOADED_MS = 10 * 60_000;

/**
 * What a test result does to its account, as Sub2API does it: 401/403 → `error` with the
 * provider's words; 429 → temporarily unschedulable until the reset the reply gave (5 minutes when
 * none) and an `error` status cleared (the account is alive); 529 → overloaded for 10 minutes; a
 * pass with `autoRecover` clears `error` and any temporary unschedulability. Disabled, banned and
 * expired accounts are never changed by a test. One statement under the row lock, plus an audit
 * row when anything changed; `q` may be the caller's transaction (a scheduled test's fenced finish).
 */
export async function applyTestResult(
  q: Queryable,
  accountId: number,
  r: TestResultForAccount,
  /** `tokenVersion`: the credential version tested; null when the test was never sent (then nothing changes). */
  o: { autoRecover: boolean; actor: string; context: Record<string, unknown>; tokenVersion?: number | null },
): Promise<TestEffect> {
  const kind = r.ok
    ? o.autoRecover
      ? 'recover'
      : 'none'
    : r.errorClass === 'auth'
      ? 'error'
      : r.errorClass === 'rate_limited'
        ? 'rate_limited'
        : r.errorClass === 'overloaded'
          ? 'overloaded'
          : 'none';
  const cur = await q.query(`SELECT status, temp_unschedulable_until, temp_unschedulable_reason FROM accounts WHERE id = $1 FOR UPDATE`, [accountId]);
  const before = cur.rows[0];
  if (!before) return { status_before: null, status_after: null, temp_unschedulable_until: null, temp_unschedulable_reason: null, recovered: false, note: 'account gone' };
  const unchanged = (note: string): TestEffect => ({
    status_before: before.status as AccountStatus,
    status_after: before.status as AccountStatus,
    temp_unschedulable_until: iso(before.temp_unschedulable_until),
    temp_unschedulable_reason: (before.temp_unschedulable_reason as string | null) ?? null,
    recovered: false,
    note,
  });
  // Not sent (no usable token, the account gone or not testable): nothing was learned about the account.
  if (o.tokenVersion === null) return unchanged('the test was not sent: the account is left as it is');
  if (kind === 'none')
    return unchanged(
      r.ok ? 'passed; auto_recover is off, the account is left as it is' : `failed (${r.errorClass ?? 'unknown'}): not a credential, rate-limit or overload answer, the account is left as it is`,
    );
  const detail = (r.detail ?? '').slice(0, 300);
  let set: string;
  let where: string;
  const params: unknown[] = [accountId];
  if (kind === 'error') {
    // Only for the credential that was tested: a refresh that committed meanwhile made the answer stale.
    params.push(`account test: ${detail}`, o.tokenVersion ?? null);
    set = `status = 'error', status_reason = $2`;
    where = `status IN ('active', 'quota_exhausted', 'error') AND ($3::bigint IS NULL OR token_version = $3::bigint)`;
  } else if (kind === 'rate_limited' || kind === 'overloaded') {
    // The reset the reply gave when it is still to come (the probe client caps it at a day), else the default.
    params.push(kind === 'overloaded' ? OVERLOADED_MS : RATE_LIMIT_DEFAULT_MS, kind === 'rate_limited' && r.resetAtMs !== null ? new Date(r.resetAtMs) : null, `${kind}: ${detail}`);
    set = `temp_unschedulable_until = GREATEST(COALESCE(temp_unschedulable_until, '-infinity'),
             COALESCE(CASE WHEN $3::timestamptz > clock_timestamp() THEN LEAST($3::timestamptz, clock_timestamp() + interval '1 day') END,
                      clock_timestamp() + $2 * interval '1 millisecond')),
           temp_unschedulable_reason = $4,
           status = CASE WHEN status = 'error' THEN 'active' ELSE status END,
           status_reason = CASE WHEN status = 'error' THEN NULL ELSE status_reason END`;
    where = `status IN ('active', 'quota_exhausted', 'error')`;
  } else {
    set = `status = CASE WHEN status = 'error' THEN 'active' ELSE status END, status_reason = CASE WHEN status = 'error' THEN NULL ELSE status_reason END,
           temp_unschedulable_until = NULL, temp_unschedulable_reason = NULL`;
    where = `(status = 'error' OR temp_unschedulable_until IS NOT NULL)`;
  }
  const { rows } = await q.query(`UPDATE accounts SET ${set}, updated_at = clock_timestamp() WHERE id = $1 AND ${where} RETURNING status, temp_unschedulable_until, temp_unschedulable_reason`, params);
  const after = rows[0];
  if (!after) return unchanged(kind === 'recover' ? 'passed; nothing to recover' : `failed (${r.errorClass}); the account's status (${String(before.status)}) is not changed by tests`);
  const action = kind === 'recover' ? 'auto_recover' : `test_${kind}`;
  const previous = { status: before.status, temp_unschedulable_until: iso(before.temp_unschedulable_until), temp_unschedulable_reason: before.temp_unschedulable_reason };
  await q.query(`INSERT INTO account_audit (account_id, action, actor, detail) VALUES ($1, $2, $3, $4)`, [
    accountId,
    action,
    o.actor,
    JSON.stringify({ ...o.context, previous, http_status: r.status }),
  ]);
  const notes = {
    error: 'marked error: the provider refused the credential',
    rate_limited: `rate-limited: unschedulable until ${iso(after.temp_unschedulable_until)}${r.resetAtMs === null ? ' (no usable reset in the reply: 5 minutes, or a longer one already set)' : ' (the reset the reply gave, or a longer one already set)'}`,
    overloaded: `overloaded: unschedulable until ${iso(after.temp_unschedulable_until)} (10 minutes, or a longer one already set)`,
    recover: 'recovered: error and temporary unschedulability cleared',
  };
  return {
    status_before: before.status as AccountStatus,
    status_after: after.status as AccountStatus,
    temp_unschedulable_until: iso(after.temp_unschedulable_until),
    temp_unschedulable_reason: (after.temp_unschedulable_reason as string | null) ?? null,
    recovered: kind === 'recover',
    note: notes[kind],
  };
}
