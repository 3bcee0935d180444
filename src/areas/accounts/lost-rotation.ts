import { createHash } from 'node:crypto';
import type { UnsettledSend } from './store/accounts.js';

/**
 * A refresh sent and never answered in the store (issue 29). With single-use rotating refresh
 * tokens, a sender that dies after the provider rotated takes the only copy of the new refresh
 * token with it. The request is recorded before it is sent (`accounts.refresh_sent_*`: a
 * fingerprint of the refresh token presented, the time, the sender), so the next attempt knows:
 * it retries with the same token at once (the provider may never have processed the request, or
 * may accept the just-rotated token once more within its reuse grace), and if the provider then
 * rejects that token the account is expired with a reason that says what happened and what to
 * do, at once: no "second hit" retry, no loop.
 */

/** The stored fingerprint of a refresh token: enough to tell two tokens apart, useless to present. */
export function refreshTokenFingerprint(token: string): string {
  return `sha256:${createHash('sha256').update(token).digest('hex').slice(0, 24)}`;
}

/** The unsettled send this attempt repeats, or null (none, or it presented another token). */
export function repeatedSend(unsettled: UnsettledSend | null, fingerprint: string): UnsettledSend | null {
  return unsettled && unsettled.fingerprint === fingerprint ? unsettled : null;
}

/**
 * The `expired` reason when the provider rejects (`invalid_grant`, reuse…) the refresh token a
 * dead sender had presented. `graceMs` is `oauth.providers.<platform>.reuse_grace` (0: none);
 * `retryAgeMs` how long after that send the retry went out.
 */
export function lostRotationReason(p: { platform: string; sent: UnsettledSend; retryAgeMs: number; graceMs: number; providerReason: string }): string {
  const secs = (ms: number) => `${Math.round(ms / 100) / 10} s`;
  const key = `oauth.providers.${p.platform}.reuse_grace`;
  const grace =
    p.graceMs <= 0
      ? `${key} is 0 (the provider is not expected to accept a rotated token again)`
      : p.retryAgeMs <= p.graceMs
        ? `the retry went out ${secs(p.retryAgeMs)} after the send, within ${key} (${secs(p.graceMs)}), and was still refused`
        : `the retry went out ${secs(p.retryAgeMs)} after the send, past ${key} (${secs(p.graceMs)})`;
  return (
    `refresh token rotation lost in a crash: a refresh sent at ${p.sent.at.toISOString()} by ${p.sent.by} was never stored (the sender died), ` +
    `and the provider now rejects that refresh token (${p.providerReason}); ${grace}. Re-authorize this account (sign in again and import its new refresh token)`
  );
}
