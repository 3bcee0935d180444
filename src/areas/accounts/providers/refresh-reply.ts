import { tokenExpiry } from '../jwt.js';
import { errorDetail, jsonObject, parseRetryAfter, readError } from './error-shapes.js';
import type { AccountMetadata, RefreshCallResult } from './types.js';

/**
 * Permanent: the refresh token is dead, re-authorise (Sub2API's list, plus the OAuth and OpenAI
 * spellings of the same). `invalid_client`, `unauthorized_client` and the like are ours, not the
 * account's: they are configuration faults below.
 */
const EXPIRED_ERRORS = new Set([
  'invalid_grant',
  'invalid_token',
  'access_denied',
  'refresh_token_expired',
  'refresh_token_reused',
  'refresh_token_invalidated',
  'invalid_refresh_token',
  'app_session_terminated',
  'token_expired',
  'token_revoked',
]);
/** A refresh token named dead in words, whatever the code (Anthropic has answered both flat and nested shapes). */
const DEAD_TOKEN_TEXT = /refresh token.*\b(not found|invalid|expired|revoked)\b/i;
const BANNED_ERRORS = new Set(['account_deactivated', 'account_banned', 'account_suspended', 'user_banned']);
const BANNED_TEXT = /deactivated|banned|suspended/i;
/** Quota-class replies (Sub2API maps them to a quota state, not to a dead token). */
const QUOTA_ERRORS = new Set(['insufficient_quota', 'quota_exceeded', 'quota_exhausted', 'usage_limit_reached', 'billing_hard_limit_reached']);
const QUOTA_TEXT = /\bquota\b|usage limit|credit balance/i;
/**
 * Configuration faults: our client, our request or our host is wrong, for every account alike.
 * `invalid_request` is a malformed request (Google: "client_secret is missing."; Anthropic: a
 * form where JSON is expected); `not_found_error` is a token URL that no longer exists (the old
 * console.anthropic.com host).
 */
const CONFIG_ERRORS = new Set(['invalid_client', 'unauthorized_client', 'invalid_scope', 'unsupported_grant_type', 'invalid_request', 'invalid_request_error', 'not_found_error', 'not_found']);

export interface RefreshReplyRules {
  /** A 401 without a code means a dead token (the Codex CLI treats every 401 from auth.openai.com as permanent). */
  bare401IsPermanent: boolean;
  /** What a successful reply tells beside the tokens. */
  metadata(json: Record<string, unknown>, idToken: string | null): AccountMetadata;
}

/** Turns a token endpoint's reply into a result, flat and nested error shapes alike. Pure, so every rule is unit-tested. */
export function classifyRefreshReply(status: number, body: string, headers: { retryAfter?: string | null }, nowMs: number, rules: RefreshReplyRules): RefreshCallResult {
  const json = jsonObject(body);
  if (status >= 200 && status < 300) {
    const at = json?.access_token;
    if (typeof at !== 'string' || at.length === 0)
      return { kind: 'transient', reason: 'bad_response', status, retryAfterMs: null, detail: json ? 'reply has no access_token' : 'reply is not a JSON object' };
    const rt = json!.refresh_token;
    const idt = typeof json!.id_token === 'string' && json!.id_token.length > 0 ? json!.id_token : null;
    return {
      kind: 'ok',
      accessToken: at,
      // Google does not rotate: no refresh_token in the reply, and the one presented stays valid (settle keeps it).
      refreshToken: typeof rt === 'string' && rt.length > 0 ? rt : null,
      idToken: idt,
      expiresAt: tokenExpiry(at, json!.expires_in, nowMs),
      metadata: rules.metadata(json!, idt),
    };
  }
  const { code, message } = readError(json);
  const detail = errorDetail(status, code, message);
  if (status === 429) return { kind: 'transient', reason: 'rate_limited', status, retryAfterMs: parseRetryAfter(headers.retryAfter, nowMs), detail };
  if (status >= 500) return { kind: 'transient', reason: 'server_error', status, retryAfterMs: parseRetryAfter(headers.retryAfter, nowMs), detail };
  if (BANNED_ERRORS.has(code) || (code && BANNED_TEXT.test(message))) return { kind: 'permanent', reason: code || 'banned', status, detail, accountStatus: 'banned' };
  if (QUOTA_ERRORS.has(code) || (code && !EXPIRED_ERRORS.has(code) && QUOTA_TEXT.test(message))) return { kind: 'permanent', reason: code, status, detail, accountStatus: 'quota_exhausted' };
  if (EXPIRED_ERRORS.has(code)) return { kind: 'permanent', reason: code, status, detail, accountStatus: 'expired' };
  if (status >= 400 && status < 500 && status !== 404 && DEAD_TOKEN_TEXT.test(message)) return { kind: 'permanent', reason: code || 'refresh_token_invalid', status, detail, accountStatus: 'expired' };
  // The Codex CLI's rule, for a 401 that is the provider's (JSON or empty): an HTML page from a proxy or a wrong host is not proof.
  if (status === 401 && rules.bare401IsPermanent && !code && (json !== null || body.trim() === '')) return { kind: 'permanent', reason: 'unauthorized_401', status, detail, accountStatus: 'expired' };
  if (CONFIG_ERRORS.has(code)) return { kind: 'config', reason: code, status, detail };
  // A token URL that answers 404 is the wrong URL, whatever its body says.
  if (status === 404) return { kind: 'config', reason: 'not_found', status, detail: `${detail} (the token URL answers 404: check oauth.providers.<platform>.token_url)` };
  // A bare 400/401 (empty or a JSON object without an error code) gets its own reason, so it is visible in
  // last_refresh_error and the metric instead of hiding among CDN pages.
  if ((status === 400 || status === 401) && !code && (json !== null || body.trim() === '')) return { kind: 'transient', reason: `bare_http_${status}`, status, retryAfterMs: null, detail };
  // An HTML page from a CDN, an unknown error code: not proof the token is dead, so retry.
  return { kind: 'transient', reason: code ? 'unrecognized_error' : 'unrecognized_reply', status, retryAfterMs: null, detail };
}
