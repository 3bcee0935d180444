import type { Dispatcher } from 'undici';
import { scrubbedText } from '../../upstream/error-text.js';
import { ReplyTooLarge, readReplyText, type ReplyLike } from '../../upstream/reply-limit.js';
import { loadUndici, type Undici } from '../../upstream/undici.js';
import type { ProviderAdapter, RefreshCallResult } from './providers/types.js';

export type { RefreshCallResult, PermanentStatus } from './providers/types.js';

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
 * The refresh call: the platform adapter's request (its token URL, encoding, client id and
 * secret, headers), sent through the account's proxy, and its reply read by the same adapter.
 * Never throws: every failure is a classified result. The refresh token goes only into the body.
 *
 * There is deliberately no AbortSignal: a refresh request that may have reached the provider is
 * never abandoned while its reply can still arrive (with rotation, aborting it loses the account:
 * the retry presents the consumed token, and a standards-compliant server revokes the grant).
 * `timeoutMs` bounds connecting; `replyTimeoutMs` bounds the wait for a reply that is not coming.
 */
export class OAuthClient {
  private readonly agents = new Map<string, Dispatcher>();

  async refresh(provider: ProviderAdapter, refreshToken: string, opts: RefreshCallOptions): Promise<RefreshCallResult> {
    const request = provider.refreshRequest(refreshToken);
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
      const res = await undici.fetch(request.url, { method: request.method, headers: request.headers, body: request.body, dispatcher });
      let body: string;
      try {
        body = await readReplyText(res as unknown as ReplyLike, TOKEN_REPLY_LIMIT, 'token endpoint');
      } catch (err) {
        if (!(err instanceof ReplyTooLarge)) throw err;
        return { kind: 'transient', reason: 'bad_response', status: res.status, retryAfterMs: null, detail: `reply larger than ${TOKEN_REPLY_LIMIT} bytes` };
      }
      return provider.classifyRefresh(res.status, body, { retryAfter: res.headers.get('retry-after') }, opts.nowMs());
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
