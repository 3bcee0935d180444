import type { Agent, Dispatcher, ProxyAgent } from 'undici';
import { systemClock } from '../time/clock.js';
import { readCappedChunks } from './reply-limit.js';
import { loadUndici, type Undici } from './undici.js';
import { monotonic, timeout } from '../time/wall.js';

/**
 * Why a probe failed; `null` on a probe that passed. The client gives every class but `not_sent`,
 * which the runners give a test that threw before any request left (`unsentTestClass`,
 * areas/accounts/account-tester.ts).
 */
export type ErrorClass = 'timeout' | 'connect' | 'auth' | 'rate_limited' | 'overloaded' | '5xx' | 'http_4xx' | 'bad_body' | 'wrong_answer' | 'not_sent';

/** One HTTP request to an upstream, fully shaped by whoever knows the provider: this client only sends it. */
export interface UpstreamRequest {
  method: 'POST';
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** How an upstream's answer reads (the provider's adapter decides). */
export interface Verdict {
  ok: boolean;
  errorClass: ErrorClass | null;
  /** A short reason in the provider's words (never a secret, never the whole body). */
  detail: string | null;
  /** The model's text, when the reply had one (a challenge compares it). */
  answer: string | null;
  /** A 429's reset as epoch ms, when the reply gave one. */
  resetAtMs: number | null;
}

/** Reads one reply: status, headers (lower-case names), the body as read (capped) and the wall clock. */
export type Judge = (status: number, headers: Record<string, string>, text: string, nowMs: number) => Verdict;

export interface ProbeTarget {
  request: UpstreamRequest;
  judge: Judge;
  proxyUrl?: string | null;
  timeoutMs: number;
  /** Sent as `x-relay-probe-slot`: the due time this probe is for, so an upstream's logs can tell slots apart. */
  slot?: Date;
}

export interface ProbeResult extends Verdict {
  status: number | null;
  latencyMs: number;
  ttfbMs: number | null;
  /** The reply's headers and the start of its body, for an operator's one-off test (never stored). */
  reply: { headers: Record<string, string>; bodyExcerpt: string } | null;
}

const MAX_BODY = 64 * 1024;
/** The furthest a reply may set a reset: a hostile or broken value (1e200, a date in year 5000) cannot park an account longer. */
const MAX_RESET_MS = 86_400_000;

/** A reset is a time still to come and at most a day away; anything else (past, NaN, absurd) is no reset at all. */
export function saneReset(resetAtMs: number | null, nowMs: number): number | null {
  if (resetAtMs === null || !Number.isFinite(resetAtMs) || resetAtMs <= nowMs) return null;
  return Math.min(resetAtMs, nowMs + MAX_RESET_MS);
}
const EXCERPT = 2048;
const CONNECT_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED']);

/**
 * The one probe transport: sends a request a provider adapter shaped (an account test, a
 * channel monitor's API-key call) through the account's proxy or directly, reads the reply with
 * a cap (a stream is read until it ends, the cap or the timeout), and lets the adapter's judge
 * read it. It never throws: refusals, resets, hangs and garbage are classified results. Time to
 * first byte is when the status line and headers arrived; latency is until the body was read.
 */
export class ProbeClient {
  /** Made at the first probe without a proxy (undici is loaded on first use). */
  private direct: Agent | undefined;
  private readonly proxies = new Map<string, ProxyAgent>();

  constructor(
    private readonly now: () => number = monotonic,
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
    let timedOut = false;
    // The request's own deadline: real time, like the socket it bounds.
    const cancelTimer = timeout(() => {
      timedOut = true;
      ctl.abort(new Error('probe timeout'));
    }, t.timeoutMs);
    const onAbort = () => ctl.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const failed = (errorClass: ErrorClass, detail: string): ProbeResult => ({ ok: false, errorClass, detail, answer: null, resetAtMs: null, status, latencyMs: elapsed(), ttfbMs: ttfb, reply: null });
    try {
      const headers: Record<string, string> = { ...t.request.headers };
      if (t.slot) headers['x-relay-probe-slot'] = t.slot.toISOString();
      // When this client gives up: an upstream (or a test) can tell a request it read too late from one still awaited.
      headers['x-relay-probe-deadline'] = new Date(systemClock.now() + t.timeoutMs).toISOString();
      const res = await undici.request(t.request.url, {
        method: t.request.method,
        headers,
        body: t.request.body,
        signal: ctl.signal,
        dispatcher: t.proxyUrl ? this.proxy(undici, t.proxyUrl) : (this.direct ??= new undici.Agent({ connections: this.connections, keepAliveTimeout: 30_000 })),
        headersTimeout: t.timeoutMs,
        bodyTimeout: t.timeoutMs,
      });
      ttfb = elapsed();
      status = res.statusCode;
      // Stops reading at the cap and drops the connection: a huge reply costs 64 KiB, not its size.
      const text = (await readCappedChunks(res.body, MAX_BODY)).text;
      const replyHeaders: Record<string, string> = {};
      for (const [k, v] of Object.entries(res.headers)) if (v !== undefined && k.toLowerCase() !== 'set-cookie') replyHeaders[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : String(v);
      const nowMs = systemClock.now();
      const verdict = t.judge(status, replyHeaders, text, nowMs);
      return { ...verdict, resetAtMs: saneReset(verdict.resetAtMs, nowMs), status, latencyMs: elapsed(), ttfbMs: ttfb, reply: { headers: replyHeaders, bodyExcerpt: text.slice(0, EXCERPT) } };
    } catch (err) {
      const e = err as Error & { code?: string; cause?: { code?: string } };
      const code = String(e.code ?? e.cause?.code ?? '');
      if (timedOut || e.name === 'TimeoutError' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT')
        return failed('timeout', `timeout after ${t.timeoutMs}ms${status ? ` (HTTP ${status}, body unfinished)` : ''}`);
      if (status !== null) return failed('bad_body', `HTTP ${status}: the body could not be read (${String(code || e.name).slice(0, 60)})`);
      if (CONNECT_CODES.has(code) || e.name === 'SocketError' || e.name === 'ConnectTimeoutError') return failed('connect', `connect: ${String(code || e.name).slice(0, 60)}`);
      return failed(signal?.aborted ? 'timeout' : 'connect', `${signal?.aborted ? 'aborted' : 'connect'}: ${String(code || e.name).slice(0, 60)}`);
    } finally {
      cancelTimer();
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
