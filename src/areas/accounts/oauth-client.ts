import type { Dispatcher } from 'undici';
import { tokenExpiry } from './jwt.js';
import { scrubbedText } from '../../upstream/error-text.js';
import { ReplyTooLarge, readReplyText, type ReplyLike } from '../../upstream/reply-limit.js';
import { loadUndici, type Undici } from '../../upstream/undici.js';
import type { OAuthProvider } from './oauth-providers.js';

/** The account state a permanent failure puts the account in. */
export type PermanentStatus = 'expired' | 'banned' | 'quota_exhausted';

/**
 * The one result type of a refresh call. The retry logic switches on `kind` and nothing else,
 * so classification and retries cannot disagree (codex-proxy-rs logged rejected refreshes as
 * successes because its two layers used different types).
 * - `transient`: try again later (network, timeout, 5xx, 429, garbage replies).
 * - `permanent`: the refresh token is dead or the account is gone; set `status`, stop refreshing.
 * - `config`: our OAuth client is rejected (invalid_client); no account is at fault, so no
 *   account state changes, and the operator must fix `oauth.providers`.
 */
export type RefreshCallResult =
  | { kind: 'ok'; accessToken: string; refreshToken: string | null; idToken: string | null; expiresAt: Date | null }
  | { kind: 'transient'; reason: string; status: number | null; retryAfterMs: number | null; detail: string }
  | { kind: 'permanent'; reason: string; status: number; detail: string; accountStatus: PermanentStatus }
  | { kind: 'config'; reason: string; status: number; detail: string };

const EXPIRED_ERRORS = new Set([
  'invalid_grant',
  'invalid_token',
  'access_denied',
  'refresh_token_expired',
  'token_expired',
  'token_revoked',
  'refresh_token_invalidated',
  'refresh_token_reused',
  'unauthorized',
]);
const BANNED_ERRORS = new Set(['account_deactivated', 'account_banned', 'account_suspended', 'user_banned']);
const CONFIG_ERRORS = new Set(['invalid_client', 'unauthorized_client', 'invalid_scope', 'unsupported_grant_type']);
const BANNED_TEXT = /deactivated|banned|suspended/i;
/** Quota-class replies (Sub2API maps them to a quota state, not to a dead token). */
const QUOTA_ERRORS = new Set(['insufficient_quota', 'quota_exceeded', 'quota_exhausted', 'usage_limit_reached', 'billing_hard_limit_reached']);
const QUOTA_TEXT = /\bquota\b|usage limit|credit balance/i;

/** Turns a provider's reply into a result. Pure, so every classification rule is unit-tested. */
export function classifyReply(status: number, body: string, headers: { retryAfter?: string | null }, nowMs: number): RefreshCallResult {
  let json: Record<string, unknown> | null = null;
  try {
    const parsed = JSON.parse(body) as unknown;
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) json = parsed as Record<string, unknown>;
  } catch {
    json = null;
  }
  if (status >= 200 && status < 300) {
    const at = json?.access_token;
    if (typeof at !== 'string' || at.length === 0)
      return { kind: 'transient', reason: 'bad_response', status, retryAfterMs: null, detail: json ? 'reply has no access_token' : 'reply is not a JSON object' };
    const rt = json!.refresh_token;
    const idt = json!.id_token;
    return {
      kind: 'ok',
      accessToken: at,
      refreshToken: typeof rt === 'string' && rt.length > 0 ? rt : null,
      idToken: typeof idt === 'string' && idt.length > 0 ? idt : null,
      expiresAt: tokenExpiry(at, json!.expires_in, nowMs),
    };
  }
  const error =
    typeof json?.error === 'string' ? json.error.toLowerCase() : typeof (json?.error as { code?: unknown })?.code === 'string' ? String((json!.error as { code: string }).code).toLowerCase() : '';
  const description =
    typeof json?.error_description === 'string'
      ? json.error_description
      : typeof (json?.error as { message?: unknown })?.message === 'string'
        ? String((json!.error as { message: string }).message)
        : '';
  const detail = [error, description].filter(Boolean).join(': ').slice(0, 200) || `HTTP ${status}`;
  if (status === 429) return { kind: 'transient', reason: 'rate_limited', status, retryAfterMs: parseRetryAfter(headers.retryAfter ?? null, nowMs), detail };
  if (status >= 500) return { kind: 'transient', reason: 'server_error', status, retryAfterMs: parseRetryAfter(headers.retryAfter ?? null, nowMs), detail };
  if (BANNED_ERRORS.has(error) || (error && BANNED_TEXT.test(description))) return { kind: 'permanent', reason: error || 'banned', status, detail, accountStatus: 'banned' };
  if (QUOTA_ERRORS.has(error) || (error && !EXPIRED_ERRORS.has(error) && QUOTA_TEXT.test(description))) return { kind: 'permanent', reason: error, status, detail, accountStatus: 'quota_exhausted' };
  if (EXPIRED_ERRORS.has(error)) return { kind: 'permanent', reason: error, status, detail, accountStatus: 'expired' };
  if (CONFIG_ERRORS.has(error)) return { kind: 'config', reason: error, status, detail };
  // A bare 400/401 (empty or a JSON object without an error code) gets its own reason, so it is visible in
  // last_refresh_error and the metric instead of hiding among CDN pages.
  if ((status === 400 || status === 401) && !error && (json !== null || body.trim() === '')) return { kind: 'transient', reason: `bare_http_${status}`, status, retryAfterMs: null, detail };
  // An HTML page from a CDN, an unknown error code: not proof the token is dead, so retry.
  return { kind: 'transient', reason: error ? `unrecognized_error` : 'unrecognized_reply', status, retryAfterMs: null, detail };
}

/** Retry-After as seconds or an HTTP date; capped at an hour so a hostile value cannot park an account forever. */
export function parseRetryAfter(value: string | null, nowMs: number): number | null {
  if (!value) return null;
  const secs = Number(value);
  const ms = Number.isFinite(secs) ? secs * 1000 : Date.parse(value) - nowMs;
  if (!Number.isFinite(ms) || ms < 0) return null;
  return Math.min(ms, 3_600_000);
}

export interface RefreshCallOptions {
  /** `direct`, or a proxy URL the call goes through. */
  proxyUrl: string | null;
  /** Connecting (TCP/TLS, to the proxy and through it): nothing has reached the provider yet, so giving up is safe. */
  timeoutMs: number;
  /**
   * Once sent, how long the reply is awaited (`auth.refresh_reply_timeout`). Only a socket-level bound:
   * the provider may already have rotated the refresh token, and then the new one exists only
   * in this reply, so the call is never aborted earlier, by a timer or by shutdown.
   */
  replyTimeoutMs: number;
  nowMs: () => number;
}

/** A token reply is a few KB; anything past 64 KiB is not one. */
export const TOKEN_REPLY_LIMIT = 64 * 1024;

/**
 * The refresh call pinned by the issue: a form-encoded POST of `grant_type=refresh_token`,
 * `refresh_token` and `client_id` to the platform's token URL, through the account's proxy.
 * Never throws: every failure is a classified result. The refresh token goes only into the body.
 *
 * There is deliberately no AbortSignal: a refresh request that may have reached the provider is
 * never abandoned while its reply can still arrive (with rotation, aborting it loses the account:
 * the retry presents the consumed token, and a standards-compliant server revokes the grant).
 * `timeoutMs` bounds connecting; `replyTimeoutMs` bounds the wait for a reply that is not coming.
 */
export class OAuthClient {
  private readonly agents = new Map<string, Dispatcher>();

  async refresh(provider: OAuthProvider, refreshToken: string, opts: RefreshCallOptions): Promise<RefreshCallResult> {
    const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: provider.clientId });
    if (provider.clientSecret) form.set('client_secret', provider.clientSecret);
    const replyMs = opts.replyTimeoutMs;
    const undici = await loadUndici();
    let dispatcher: Dispatcher;
    try {
      dispatcher = this.agent(undici, opts.proxyUrl, opts.timeoutMs, replyMs);
    } catch (err) {
      return {
        kind: 'transient',
        reason: 'bad_proxy_url',
        status: null,
        retryAfterMs: null,
        detail: scrubbedText(`the account's proxy URL cannot be used: ${(err as Error).message}`, [opts.proxyUrl], 200),
      };
    }
    try {
      const res = await undici.fetch(provider.tokenUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: form.toString(),
        dispatcher,
      });
      let body: string;
      try {
        body = await readReplyText(res as unknown as ReplyLike, TOKEN_REPLY_LIMIT, 'token endpoint');
      } catch (err) {
        if (!(err instanceof ReplyTooLarge)) throw err;
        return { kind: 'transient', reason: 'bad_response', status: res.status, retryAfterMs: null, detail: `reply larger than ${TOKEN_REPLY_LIMIT} bytes` };
      }
      return classifyReply(res.status, body, { retryAfter: res.headers.get('retry-after') }, opts.nowMs());
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; hostname?: string; address?: string; port?: number } };
      const code = e.cause?.code ?? '';
      if (code === 'UND_ERR_CONNECT_TIMEOUT') return { kind: 'transient', reason: 'timeout', status: null, retryAfterMs: null, detail: `could not connect within ${opts.timeoutMs}ms` };
      // The request was sent and no reply came in time: the provider may have rotated the token.
      if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT')
        return { kind: 'transient', reason: 'reply_timeout', status: null, retryAfterMs: null, detail: `request sent, no complete reply within ${replyMs}ms; the refresh token may have been rotated` };
      // Name the host that failed (the token endpoint's, or the proxy's when the proxy failed), never the proxy's credentials.
      const failed = e.cause?.hostname ?? (e.cause?.address ? `${e.cause.address}${e.cause.port ? `:${e.cause.port}` : ''}` : null);
      const target = new URL(provider.tokenUrl).host;
      const where = `${failed && failed !== new URL(provider.tokenUrl).hostname ? failed : target}${opts.proxyUrl ? ` (token endpoint ${target}, through the account's proxy)` : ''}`;
      return { kind: 'transient', reason: 'network', status: null, retryAfterMs: null, detail: scrubbedText(`${code || e.message} ${where}`, [provider.tokenUrl, opts.proxyUrl], 200) };
    }
  }

  private agent({ Agent, ProxyAgent }: Undici, proxyUrl: string | null, connectMs: number, replyMs: number): Dispatcher {
    const key = `${proxyUrl ?? 'direct'}|${connectMs}|${replyMs}`;
    let agent = this.agents.get(key);
    if (!agent) {
      const timeouts = { headersTimeout: replyMs, bodyTimeout: replyMs };
      agent = proxyUrl
        ? new ProxyAgent({ uri: proxyUrl, ...timeouts, proxyTls: { timeout: connectMs }, requestTls: { timeout: connectMs } })
        : new Agent({ ...timeouts, connect: { timeout: connectMs } });
      this.agents.set(key, agent);
    }
    return agent;
  }

  async close(): Promise<void> {
    await Promise.all([...this.agents.values()].map((a) => a.close().catch(() => undefined)));
    this.agents.clear();
  }
}
