import { createHmac, timingSafeEqual } from 'node:crypto';
import { AppError } from '../../errors/app-error.js';
import { failureText } from '../../upstream/error-text.js';
import { JSON_REPLY_LIMIT, ReplyTooLarge, readReplyText } from '../../upstream/reply-limit.js';

export type ProviderOrderStatus = 'paid' | 'pending' | 'closed' | 'not_found';

/** The provider could not be asked (network, 5xx, a reply we cannot read): try again next round, change nothing. */
export class ProviderError extends AppError {
  constructor(
    readonly provider: string,
    message: string,
  ) {
    super('upstream_failed', 'provider_error', `payment provider ${provider}: ${message}`);
  }
}

export interface WebhookEvent {
  event_id: string;
  provider_order_id: string;
  status: 'paid';
  amount: number;
}

export type WebhookVerdict = { ok: true; event: WebhookEvent } | { ok: false; reason: string };

/**
 * What relay-jobs needs from a payment provider. WeChat Pay, Alipay or Stripe adapters implement
 * the same four operations over their own APIs and signature schemes.
 */
export interface PaymentProvider {
  readonly name: string;
  queryOrder(providerOrderId: string): Promise<{ status: ProviderOrderStatus; amount: number | null }>;
  /** Closes an unpaid order so it can no longer be paid; returns `paid` if it was paid first. */
  closeOrder(providerOrderId: string): Promise<'closed' | 'paid' | 'not_found'>;
  verifyWebhook(rawBody: string, headers: Record<string, string | string[] | undefined>, nowMs: number): WebhookVerdict;
}

export interface GenericProviderConfig {
  base_url: string;
  api_key?: string;
  webhook_secret: string;
}

/** HMAC-SHA256 over `<timestamp>.<raw body>`, hex: the generic adapter's webhook signature. */
export function signWebhook(secret: string, timestamp: string, rawBody: string): string {
  return createHmac('sha256', secret).update(`${timestamp}.${rawBody}`).digest('hex');
}

const header = (h: Record<string, string | string[] | undefined>, name: string) => {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
};

/**
 * A generic JSON provider: `GET {base}/orders/{id}` → `{status, amount}`, `POST
 * {base}/orders/{id}/close` → `{status}` (409 with `{status: "paid"}` when already paid), and
 * webhooks signed with `X-Signature: hex(HMAC-SHA256(secret, X-Timestamp + "." + body))`.
 */
export class GenericJsonProvider implements PaymentProvider {
  constructor(
    readonly name: string,
    private readonly c: GenericProviderConfig,
    private readonly timeoutMs: number,
    private readonly toleranceMs: number,
  ) {}

  private async call(method: 'GET' | 'POST', path: string): Promise<{ status: number; body: Record<string, unknown> | null }> {
    let res: Response;
    const url = `${this.c.base_url.replace(/\/$/, '')}${path}`;
    try {
      res = await fetch(url, {
        method,
        headers: { accept: 'application/json', ...(this.c.api_key ? { authorization: `Bearer ${this.c.api_key}` } : {}) },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      const e = err as Error;
      throw new ProviderError(this.name, e.name === 'TimeoutError' ? `no answer within ${this.timeoutMs}ms` : `unreachable (${failureText(err, [url, this.c.base_url], 200)})`);
    }
    let text: string;
    try {
      text = await readReplyText(res, JSON_REPLY_LIMIT, `${method} ${path}`);
    } catch (err) {
      throw new ProviderError(this.name, err instanceof ReplyTooLarge ? err.message : `reply cut off on ${method} ${path} (${failureText(err, [url, this.c.base_url], 200)})`);
    }
    if (res.status >= 500) throw new ProviderError(this.name, `HTTP ${res.status} on ${method} ${path}`);
    try {
      const body = JSON.parse(text) as unknown;
      return { status: res.status, body: body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : null };
    } catch {
      return { status: res.status, body: null };
    }
  }

  async queryOrder(id: string): Promise<{ status: ProviderOrderStatus; amount: number | null }> {
    const r = await this.call('GET', `/orders/${encodeURIComponent(id)}`);
    if (r.status === 404) return { status: 'not_found', amount: null };
    const status = r.body?.status;
    if (r.status !== 200 || (status !== 'paid' && status !== 'pending' && status !== 'closed')) {
      throw new ProviderError(this.name, `malformed reply to order query ${id} (HTTP ${r.status}): expected {status: paid|pending|closed}`);
    }
    const amount = r.body!.amount;
    if (status === 'paid' && (typeof amount !== 'number' || !Number.isSafeInteger(amount)))
      throw new ProviderError(this.name, `malformed reply to order query ${id}: a paid order without an integer amount`);
    return { status, amount: typeof amount === 'number' ? amount : null };
  }

  async closeOrder(id: string): Promise<'closed' | 'paid' | 'not_found'> {
    const r = await this.call('POST', `/orders/${encodeURIComponent(id)}/close`);
    if (r.status === 404) return 'not_found';
    if (r.body?.status === 'paid') return 'paid';
    if ((r.status === 200 || r.status === 409) && r.body?.status === 'closed') return 'closed';
    throw new ProviderError(this.name, `malformed reply to close ${id} (HTTP ${r.status})`);
  }

  verifyWebhook(rawBody: string, headers: Record<string, string | string[] | undefined>, nowMs: number): WebhookVerdict {
    const ts = header(headers, 'x-timestamp');
    const sig = header(headers, 'x-signature');
    if (!ts || !sig) return { ok: false, reason: 'missing X-Timestamp or X-Signature header' };
    const t = Number(ts) * 1000;
    if (!Number.isFinite(t) || Math.abs(nowMs - t) > this.toleranceMs) return { ok: false, reason: `timestamp outside the ${this.toleranceMs / 1000}s tolerance (replayed or clock skew)` };
    const want = Buffer.from(signWebhook(this.c.webhook_secret, ts, rawBody));
    const got = Buffer.from(sig);
    if (want.length !== got.length || !timingSafeEqual(want, got)) return { ok: false, reason: 'bad signature' };
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(rawBody) as Record<string, unknown>;
    } catch {
      return { ok: false, reason: 'body is not JSON' };
    }
    const { event_id, provider_order_id, status, amount } = body ?? {};
    if (typeof event_id !== 'string' || typeof provider_order_id !== 'string' || status !== 'paid' || typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0) {
      return { ok: false, reason: 'expected {event_id, provider_order_id, status: "paid", amount: positive integer}' };
    }
    return { ok: true, event: { event_id, provider_order_id, status, amount } };
  }
}
