import { fetch, ProxyAgent, type Dispatcher } from 'undici';
import { tokenExpiry } from './jwt.js';
import type { OAuthProvider } from './oauth-providers.js';

/** The account state a permanent failure puts the account in. */
export type PermanentStatus = 'expired' | 'banned';

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

const EXPIRED_ERRORS = new Set(['invalid_grant', 'invalid_token', 'access_denied', 'refresh_token_expired', 'token_expired', 'token_revoked', 'refresh_token_invalidated', 'refresh_token_reused', 'unauthorized']);
const BANNED_ERRORS = new Set(['account_deactivated', 'account_banned', 'account_suspended', 'user_banned']);
const CONFIG_ERRORS = new Set(['invalid_client', 'unauthorized_client', 'invalid_scope', 'unsupported_grant_type']);
const BANNED_TEXT = /deactivated|banned|suspended/i;

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
    if (typeof at !== 'string' || at.length === 0) return { kind: 'transient', reason: 'bad_response', status, retryAfterMs: null, detail: json ? 'reply has no access_token' : 'reply is not a JSON object' };
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
  const error = typeof json?.error === 'string' ? json.error.toLowerCase() : typeof (json?.error as { code?: unknown })?.code === 'string' ? String((json!.error as { code: string }).code).toLowerCase() : '';
  const description = typeof json?.error_description === 'string' ? json.error_description : typeof (json?.error as { message?: unknown })?.message === 'string' ? String((json!.error as { message: string }).message) : '';
  const detail = [error, description].filter(Boolean).join(': ').slice(0, 200) || `HTTP ${status}`;
  if (status === 429) return { kind: 'transient', reason: 'rate_limited', status, retryAfterMs: parseRetryAfter(headers.retryAfter ?? null, nowMs), detail };
  if (status >= 500) return { kind: 'transient', reason: 'server_error', status, retryAfterMs: parseRetryAfter(headers.retryAfter ?? null, nowMs), detail };
  if (BANNED_ERRORS.has(error) || (error && BANNED_TEXT.test(description))) return { kind: 'permanent', reason: error || 'banned', status, detail, accountStatus: 'banned' };
  if (EXPIRED_ERRORS.has(error)) return { kind: 'permanent', reason: error, status, detail, accountStatus: 'expired' };
  if (CONFIG_ERRORS.has(error)) return { kind: 'config', reason: error, status, detail };
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
  timeoutMs: number;
  signal?: AbortSignal;
  nowMs: () => number;
}

/**
 * The refresh call pinned by the issue: a form-encoded POST of `grant_type=refresh_token`,
 * `refresh_token` and `client_id` to the platform's token URL, through the account's proxy.
 * Never throws: every failure is a classified result. The refresh token goes only into the body.
 */
export class OAuthClient {
  private readonly agents = new Map<string, Dispatcher>();

  async refresh(provider: OAuthProvider, refreshToken: string, opts: RefreshCallOptions): Promise<RefreshCallResult> {
    const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refreshToken, client_id: provider.clientId });
    if (provider.clientSecret) form.set('client_secret', provider.clientSecret);
    const signal = opts.signal ? AbortSignal.any([opts.signal, AbortSignal.timeout(opts.timeoutMs)]) : AbortSignal.timeout(opts.timeoutMs);
    try {
      const res = await fetch(provider.tokenUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body: form.toString(),
        signal,
        dispatcher: opts.proxyUrl ? this.agent(opts.proxyUrl) : undefined,
      });
      const body = await res.text();
      return classifyReply(res.status, body.slice(0, 64 * 1024), { retryAfter: res.headers.get('retry-after') }, opts.nowMs());
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; hostname?: string; address?: string; port?: number } };
      const timedOut = e.name === 'TimeoutError' || (e.name === 'AbortError' && !opts.signal?.aborted);
      // Name the host that failed (the token endpoint's, or the proxy's when the proxy failed), never the proxy's credentials.
      const failed = e.cause?.hostname ?? (e.cause?.address ? `${e.cause.address}${e.cause.port ? `:${e.cause.port}` : ''}` : null);
      const target = new URL(provider.tokenUrl).host;
      const where = `${failed && failed !== new URL(provider.tokenUrl).hostname ? failed : target}${opts.proxyUrl ? ` (token endpoint ${target}, through the account's proxy)` : ''}`;
      const detail = timedOut ? `no answer from ${target} within ${opts.timeoutMs}ms` : `${e.cause?.code ?? e.message} ${where}`;
      return { kind: 'transient', reason: timedOut ? 'timeout' : opts.signal?.aborted ? 'aborted' : 'network', status: null, retryAfterMs: null, detail: detail.slice(0, 200) };
    }
  }

  private agent(proxyUrl: string): Dispatcher {
    let agent = this.agents.get(proxyUrl);
    if (!agent) {
      agent = new ProxyAgent(proxyUrl);
      this.agents.set(proxyUrl, agent);
    }
    return agent;
  }

  async close(): Promise<void> {
    await Promise.all([...this.agents.values()].map((a) => a.close().catch(() => undefined)));
    this.agents.clear();
  }
}
