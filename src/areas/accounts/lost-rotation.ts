import { createHash } from 'node:crypto';
import type { UnsettledSend } from './store/accounts.js';

/**
 * A refresh sent and never answered in the store (issue 29). With single-use rotating refresh
 * tokens, a sender that dies after the provider rotated takes the only copy of the new refresh
 * token with it. The request is recorded before it is sent (`accounts.refresh_sent_*`: a
 * fingerprint of the refresh token presented, the time, the sender), so the next attempt knows.
 * Whether it presents that token again (issue 53: no rotating refresh token presented twice):
 * - a platform whose refresh tokens do not rotate (Google): yes, the token stays valid;
 * - a rotating one (OpenAI, Anthropic) within `oauth.providers.<platform>.reuse_grace` of the
 *   send: yes, once, the operator's declared recovery (the provider accepts a just-rotated token
 *   again); if the provider still refuses it the account is expired at once, no "second hit";
 * - a rotating one otherwise: no. The provider may already have rotated it, and presenting a used
 *   refresh token is what reuse detection punishes (some providers revoke the whole sign-in). The
 *   account is expired without a call, with a reason that says what happened and what to do,
 *   and the token is remembered as dead, so no replica presents it later either.
 */

/** The stored fingerprint of a refresh token: enough to tell two tokens apart, useless to present. */
export function refreshTokenFingerprint(token: string): string {
  return `sha256:${createHash('sha256').update(token).digest('hex').slice(0, 24)}`;
}

/** The unsettled send this attempt repeats, or null (none, or it presented another token). */
export function repeatedSend(unsettled: UnsettledSend | null, fingerprint: string): UnsettledSend | null {
  return unsettled && unsettled.fingerprint === fingerprint ? unsettled : null;
}

/** Whether the refresh token of a send never answered in the store may be presented again (see above). */
export function mayPresentAgain(platform: { rotates: boolean; reuseGraceMs: number }, sent: UnsettledSend): boolean {
  return !platform.rotates || (platform.reuseGraceMs > 0 && sent.ageMs <= platform.reuseGraceMs);
}

/**
 * The `expired` reason for a rotation lost with a dead sender. `graceMs` is
 * `oauth.providers.<platform>.reuse_grace` (0: none); `retryAgeMs` how long after that send the
 * retry went out, or the send's age when it was not retried. `providerReason`: what the provider
 * answered the retry, or null when the token was not presented again.
 */
export function lostRotationReason(p: { platform: string; sent: UnsettledSend; retryAgeMs: number; graceMs: number; providerReason: string | null }): string {
  const secs = (ms: number) => `${Math.round(ms / 100) / 10} s`;
  const key = `oauth.providers.${p.platform}.reuse_grace`;
  const retried = p.providerReason !== null;
  const grace =
    p.graceMs <= 0
      ? `${key} is 0 (the provider is not expected to accept a rotated token again)`
      : !retried
        ? `the send was ${secs(p.retryAgeMs)} old, past ${key} (${secs(p.graceMs)})`
        : p.retryAgeMs <= p.graceMs
          ? `the retry went out ${secs(p.retryAgeMs)} after the send, within ${key} (${secs(p.graceMs)}), and was still refused`
          : `the retry went out ${secs(p.retryAgeMs)} after the send, past ${key} (${secs(p.graceMs)})`;
  const what = retried
    ? `the provider now rejects that refresh token (${p.providerReason})`
    : `${p.platform} refresh tokens are single-use and the provider may already have rotated it, so it is not presented again (a reused refresh token can get the whole sign-in revoked)`;
  return (
    `refresh token rotation lost in a crash: a refresh sent at ${p.sent.at.toISOString()} by ${p.sent.by} was never stored (the sender died), ` +
    `and ${what}; ${grace}. Re-authorize this account (sign in again and import its new refresh token)` +
    (retried ? '' : `; if that request surely never reached the provider, enabling the account again lets its refresh token be presented once more`)
  );
}
