import type { Agent, Dispatcher, ProxyAgent } from 'undici';
import { systemClock } from '../../time/clock.js';
import { readCappedChunks } from '../../upstream/reply-limit.js';
import { loadUndici, type Undici } from '../../upstream/undici.js';

/** Why a probe failed; `null` on a probe that passed. */
export type ErrorClass = 'timeout' | 'connect' | 'auth' | 'rate_limited' | '5xx' | 'http_4xx' | 'bad_body';
export const ERROR_CLASSES: readonly ErrorClass[] = ['timeout', 'connect', 'auth', 'rate_limited', '5xx', 'http_4xx', 'bad_body'];

export interface ProbeTarget {
  baseUrl: string;
  model: string;
  apiKey: string;
  proxyUrl?: string | null;
  timeoutMs: number;
  /** Sent as `x-relay-probe-slot`: the due time this probe is for, so an upstream's logs can tell slots apart. */
  slot?: Date;
}

export interface ProbeResult {
  ok: boolean;
  status: number | null;
  latencyMs: number;
  ttfbMs: number | null;
  errorClass: ErrorClass | null;
  /** A short reason for logs and the API; never the key, never the body. */
  detail: string | null;
}

const MAX_BODY = 64 * 1024;
const CONNECT_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED']);

/**
 * The one probe: `POST <base_url>/v1/chat/completions` with a one-token `ping`. It never throws:
 * refusals, resets, hangs and garbage are classified results. Time to first byte is when the
 * status line and headers arrived; latency is until the body was read.
 */
export class ProbeClient {
  /** Made at the first probe without a proxy (undici is loaded on first use). */
  private direct: Agent | undefined;
  private readonly proxies = new Map<string, ProxyAgent>();

  constructor(
    private readonly now: () => number = () => performance.now(),
    private readonly connections = 256,
  ) {}

  async probe(t: ProbeTarget, signal?: AbortSignal): Promise<ProbeResult> {
    // Before the clock starts: the first probe's latency does not include loading the client.
    const undici = await loadUndici();
    const started = this.now();
    const elapsed = () => Math.round(this.now() - started);
    let ttfb: number | null = null;
    let status: number | null = null;
    // One controller per probe: the caller's signal (shared by a whole pool) gets one listener, removed after.
    const ctl = new AbortController();
    let timedOutFlag = false;
    const timer = setTimeout(() => {
      timedOutFlag = true;
      ctl.abort(new Error('probe timeout'));
    }, t.timeoutMs);
    const onAbort = () => ctl.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const timeout = {
      get aborted(): boolean {
        return timedOutFlag;
      },
    };
    const both = ctl.signal;
    try {
      const headers: Record<string, string> = { authorization: `Bearer ${t.apiKey}`, 'content-type': 'application/json', 'user-agent': 'relay-jobs-probe' };
      if (t.slot) headers['x-relay-probe-slot'] = t.slot.toISOString();
      // When this client gives up: an upstream (or a test) can tell a request it read too late from one still awaited.
      headers['x-relay-probe-deadline'] = new Date(systemClock.now() + t.timeoutMs).toISOString();
      const res = await undici.request(chatUrl(t.baseUrl), {
        method: 'POST',
        headers,
        body: JSON.stringify({ model: t.model, messages: [{ role: 'user', content: 'ping' }], max_tokens: 1 }),
        signal: both,
        dispatcher: t.proxyUrl ? this.proxy(undici, t.proxyUrl) : (this.direct ??= new undici.Agent({ connections: this.connections, keepAliveTimeout: 30_000 })),
        headersTimeout: t.timeoutMs,
        bodyTimeout: t.timeoutMs,
      });
      ttfb = elapsed();
      status = res.statusCode;
      // Stops reading at the cap and drops the connection: a huge reply costs 64 KiB, not its size.
      const body = (await readCappedChunks(res.body, MAX_BODY)).text;
      const errorClass = classifyStatus(status) ?? (looksLikeCompletion(body) ? null : 'bad_body');
      return { ok: errorClass === null, status, latencyMs: elapsed(), ttfbMs: ttfb, errorClass, detail: errorClass ? `${errorClass}${status ? ` (HTTP ${status})` : ''}` : null };
    } catch (err) {
      const e = err as Error & { code?: string; cause?: { code?: string } };
      const code = String(e.code ?? e.cause?.code ?? '');
      const timedOut = timeout.aborted || e.name === 'TimeoutError' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT';
      let errorClass: ErrorClass;
      if (timedOut) errorClass = 'timeout';
      else if (status !== null) errorClass = classifyStatus(status) ?? 'bad_body';
      else if (CONNECT_CODES.has(code) || e.name === 'SocketError' || e.name === 'ConnectTimeoutError') errorClass = 'connect';
      else errorClass = signal?.aborted ? 'timeout' : 'connect';
      return { ok: false, status, latencyMs: elapsed(), ttfbMs: ttfb, errorClass, detail: `${errorClass}: ${String(code || e.name).slice(0, 60)}` };
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
  }

  private proxy({ ProxyAgent }: Undici, url: string): Dispatcher {
    let a = this.proxies.get(url);
    if (!a) this.proxies.set(url, (a = new ProxyAgent(url)));
    return a;
  }

  async close(): Promise<void> {
    const agents: Dispatcher[] = [...(this.direct ? [this.direct] : []), ...this.proxies.values()];
    this.direct = undefined;
    this.proxies.clear();
    await Promise.all(agents.map((a) => a.close().catch(() => undefined)));
  }
}

export function chatUrl(baseUrl: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/v1/chat/completions`;
}

export function classifyStatus(status: number): ErrorClass | null {
  if (status === 401 || status === 403) return 'auth';
  if (status === 429) return 'rate_limited';
  if (status >= 500) return '5xx';
  if (status >= 400) return 'http_4xx';
  if (status < 200 || status >= 300) return 'bad_body';
  return null;
}

/** A chat completion: JSON with a `choices` array (content is not judged; one token is enough). */
function looksLikeCompletion(text: string): boolean {
  try {
    const v = JSON.parse(text) as { choices?: unknown };
    return Array.isArray(v.choices);
  } catch {
    return false;
  }
}
