import type { Billing, Order } from './store/billing.js';
import { ProviderError, type PaymentProvider } from './payment-provider.js';
import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import { WarnSampler } from '../../telemetry/warn-sampler.js';
import type { Metrics } from '../../telemetry/metrics.js';
import type { ErrorKind } from '../../errors/app-error.js';
import { BillingMetrics } from './metrics.js';
import { sqlNow } from '../../store/sql-now.js';

/** What a webhook did: a result, or a refusal whose kind the HTTP layer maps to a status (no status codes here). */
export type WebhookAnswer = { ok: true; result: 'paid' | 'already_paid'; order_id: number } | { ok: false; kind: ErrorKind; code: string; message: string };

/** At most one "payment webhook rejected" (unverified) line per provider per minute; the others are counted in it. */
export const WEBHOOK_WARN_INTERVAL_MS = 60_000;

export interface RoundCounts {
  checked: number;
  paid: number;
  expired: number;
  providerErrors: number;
  /** Candidates settled by something else (a webhook) between the candidate query and the check: nothing to ask. */
  settled: number;
}

/**
 * Payment orders against their providers: webhooks (verified, then paid exactly once), the
 * reconcile pass (a missed webhook still credits the user) and the expire pass (a last check at
 * the provider, a close there, then a conditional `pending → expired`). An order is never
 * expired on a failed or unreadable provider answer.
 */
export class Payments {
  private readonly bm: BillingMetrics;

  constructor(
    private readonly billing: Billing,
    readonly providers: Map<string, PaymentProvider>,
    private readonly clock: Clock,
    metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.bm = metrics.group(BillingMetrics);
  }

  private readonly unverifiedLog = new WarnSampler(WEBHOOK_WARN_INTERVAL_MS, () => this.clock.now());

  private async reject(provider: string, orderId: number | null, kind: ErrorKind, reason: string, code: string, detail: Record<string, unknown> = {}): Promise<WebhookAnswer> {
    this.bm.webhooksRejected.inc({ provider, reason: code });
    await this.billing.event(this.billing.db, orderId, provider, 'webhook_rejected', null, null, 'webhook', { reason, ...detail });
    this.log.warn({ provider, order_id: orderId, reason }, 'payment webhook rejected');
    return { ok: false, kind, code, message: reason };
  }

  async webhook(providerName: string, rawBody: string, headers: Record<string, string | string[] | undefined>): Promise<WebhookAnswer> {
    const provider = this.providers.get(providerName);
    // Unauthenticated and named by the caller: no row, no metric label, no log line per name, so nothing grows with it.
    if (!provider) return { ok: false, kind: 'not_found', code: 'unknown_provider', message: 'unknown payment provider' };
    const v = provider.verifyWebhook(rawBody, headers, this.clock.now());
    if (!v.ok) {
      // Unsigned or mis-signed: anyone can send these, so they are counted (a configured label) and logged, never stored.
      this.bm.webhooksRejected.inc({ provider: providerName, reason: 'unverified' });
      // Sampled: 5,000 unsigned requests are 5,000 in the metric and a few log lines with `suppressed`.
      const sample = this.unverifiedLog.take(providerName);
      if (sample) this.log.warn({ provider: providerName, reason: v.reason, suppressed: sample.suppressed }, 'payment webhook rejected');
      return { ok: false, kind: 'unauthorized', code: 'unverified', message: v.reason };
    }
    const order = await this.billing.orderByProviderId(providerName, v.event.provider_order_id);
    if (!order) return this.reject(providerName, null, 'not_found', `unknown order ${v.event.provider_order_id}`, 'unknown_order', { provider_order_id: v.event.provider_order_id });
    const r = await this.billing.markPaid(order.id, 'webhook', v.event.amount, { event_id: v.event.event_id });
    if (r.changed) {
      this.bm.ordersPaid.inc({ source: 'webhook' });
      this.log.info({ order_id: order.id, provider: providerName, amount: order.amount }, 'order paid (webhook)');
      return { ok: true, result: 'paid', order_id: order.id };
    }
    if (r.reason === 'already_paid') return { ok: true, result: 'already_paid', order_id: order.id };
    this.bm.webhooksRejected.inc({ provider: providerName, reason: r.reason });
    const message = r.reason === 'amount_mismatch' ? `amount ${v.event.amount} does not match order ${order.id} (${order.amount})` : `order ${order.id} is ${order.status} and cannot be paid`;
    return { ok: false, kind: r.reason === 'amount_mismatch' ? 'invalid' : 'conflict', code: r.reason, message };
  }

  /**
   * Asks the provider about one order; paid → credited. Returns the provider's status and the order as read,
   * 'settled' when the order is no longer pending (a webhook paid it during the round: not a provider error),
   * or null when the provider could not be asked.
   */
  private async check(orderId: number, source: string): Promise<{ status: 'paid' | 'pending' | 'closed' | 'not_found'; order: Order } | 'settled' | null> {
    const order = await this.billing.order(orderId);
    if (!order || order.status !== 'pending') return 'settled';
    const provider = this.providers.get(order.provider);
    try {
      if (!provider) throw new ProviderError(order.provider, 'not configured (payments.providers)');
      const q = await provider.queryOrder(order.provider_order_id);
      await this.billing.checked(orderId);
      if (q.status === 'paid') {
        const r = await this.billing.markPaid(orderId, source, q.amount);
        if (r.changed) {
          this.bm.ordersPaid.inc({ source });
          this.log.info({ order_id: orderId, provider: order.provider, source }, 'order paid (found at the provider)');
        }
      }
      return { status: q.status, order };
    } catch (err) {
      if (!(err instanceof ProviderError)) throw err;
      await this.billing.checkFailed(orderId);
      this.bm.providerFailures.inc({ provider: order.provider });
      this.log.warn({ order_id: orderId, provider: order.provider, err: err.message }, 'payment provider check failed; retried next round');
      return null;
    }
  }

  async reconcile(windowMs: number, batch: number, retryBaseMs: number, signal?: AbortSignal): Promise<RoundCounts> {
    const c: RoundCounts = { checked: 0, paid: 0, expired: 0, providerErrors: 0, settled: 0 };
    for (const id of await this.billing.reconcileCandidates(windowMs, batch, retryBaseMs)) {
      signal?.throwIfAborted();
      const r = await this.check(id, 'reconcile');
      if (r === 'settled') c.settled++;
      else if (r === null) c.providerErrors++;
      else {
        c.checked++;
        if (r.status === 'paid') c.paid++;
      }
    }
    return c;
  }

  async expire(batch: number, retryBaseMs: number, signal?: AbortSignal): Promise<RoundCounts> {
    const c: RoundCounts = { checked: 0, paid: 0, expired: 0, providerErrors: 0, settled: 0 };
    for (const id of await this.billing.expiryCandidates(batch, retryBaseMs, sqlNow(this.clock))) {
      signal?.throwIfAborted();
      const r = await this.check(id, 'expiry_check');
      if (r === 'settled') {
        c.settled++;
        continue;
      }
      if (r === null) {
        c.providerErrors++;
        continue;
      }
      c.checked++;
      const { status: s, order } = r;
      if (s === 'paid') {
        c.paid++;
        continue;
      }
      if (s === 'pending') {
        // Close it at the provider first, so it cannot be paid after we call it expired.
        let closed: 'closed' | 'paid' | 'not_found';
        try {
          closed = await this.providers.get(order.provider)!.closeOrder(order.provider_order_id);
        } catch (err) {
          if (!(err instanceof ProviderError)) throw err;
          this.bm.providerFailures.inc({ provider: order.provider });
          c.providerErrors++;
          continue;
        }
        if (closed === 'paid') {
          const r = await this.billing.markPaid(id, 'expiry_check', null, { at: 'close' });
          if (r.changed) this.bm.ordersPaid.inc({ source: 'expiry_check' });
          c.paid++;
          continue;
        }
      }
      if (await this.billing.expireOrder(id, { provider_status: s })) {
        this.bm.ordersExpired.inc();
        c.expired++;
      }
    }
    return c;
  }
}
