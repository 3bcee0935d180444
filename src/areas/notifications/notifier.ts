import type { Notifications, Delivery, ClaimedDelivery } from './store/notifications.js';
import type { ChannelBudget } from './store/channel-budget.js';
import type { Channel } from './channels.js';
import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import { RateLimiter } from '../../workers/rate-limiter.js';
import { NotificationMetrics } from './metrics.js';

/** Message templates: `{{name}}` is replaced by the delivery's params. */
export const TEMPLATES: Record<string, { subject: string; text: string }> = {
  subscription_reminder: {
    subject: 'Your {{plan}} subscription expires in {{days}} day(s)',
    text: 'Hello,\n\nyour {{plan}} subscription ends on {{expires_at}} ({{days}} day(s) from now). Renew it to keep your access.\n',
  },
  // The ops plane renders its own messages (alerts, reports) and passes them whole.
  ops_alert: { subject: '{{subject}}', text: '{{text}}' },
  ops_report: { subject: '{{subject}}', text: '{{text}}' },
};

export function render(template: string, params: Record<string, unknown>): { subject: string; text: string } {
  const t = TEMPLATES[template];
  if (!t) throw new Error(`unknown template ${template}`);
  const fill = (s: string) => s.replace(/\{\{(\w+)\}\}/g, (_, k: string) => String(params[k] ?? ''));
  return { subject: fill(t.subject), text: fill(t.text) };
}

export interface ChannelHealth {
  up: boolean;
  last_error: string | null;
  last_failure_at: string | null;
  last_success_at: string | null;
}

export interface NotifierSettings {
  /** Per channel and process: smooths one replica's sends. */
  perSecond: number;
  /** Per channel, cluster-wide (`notify.rate_limit`): at most `count` sends per `periodMs`; a channel absent or with count 0 is unlimited. */
  rateLimits: Record<string, { count: number; periodMs: number }>;
  maxAttempts: number;
  retryBaseMs: number;
  batch: number;
  /** One send's timeout; a claim's lease covers a chunk of sends at this worst case. */
  sendTimeoutMs: number;
}

/** Deliveries claimed at a time: small, so the lease stays short and a dead sender's rows come back soon. */
const CHUNK = 10;

export interface DeliveryOutcome {
  sent: number;
  failed: number;
  skipped: number;
  /** Put back for later: the channel is down this round, or the round was aborted. */
  deferred: number;
  /** Dropped unsent: the claim's lease lapsed and another sender took the row over (it sends it). */
  lost: number;
  /** Put back because the channel's cluster-wide rate limit is full (due when a slot frees; not an attempt). */
  rate_limited: number;
}

/** What one round knows of its channels: down after a failure, or full until a time. */
interface RoundState {
  down: Set<string>;
  full: Map<string, Date>;
}

/**
 * Sends due deliveries from the outbox. Per channel: a cluster-wide rate limit (a slot of the
 * channel's budget in PostgreSQL is taken before each send; when none is free the delivery goes
 * back to pending until one frees, which is neither a failure nor an attempt), a per-process
 * smoothing limit, and a circuit for the round — the first failure of a channel puts its
 * remaining deliveries back for later instead of trying each one against a broken server.
 * Failed deliveries back off (base × 4^(attempt−1)), so a broken SMTP server is not hammered
 * every minute; after `maxAttempts` a delivery is `failed`.
 * A `precheck` lets the owner of a delivery cancel it (a renewed subscription needs no reminder).
 */
export class Notifier {
  private readonly limiters = new Map<string, RateLimiter>();
  readonly health = new Map<string, ChannelHealth>();

  private readonly nm: NotificationMetrics;

  constructor(
    private readonly store: Notifications,
    private readonly budget: ChannelBudget,
    readonly channels: Map<string, Channel>,
    private readonly s: NotifierSettings,
    private readonly clock: Clock,
    metrics: Metrics,
    private readonly log: Logger,
  ) {
    this.nm = metrics.group(NotificationMetrics);
    for (const name of channels.keys()) this.health.set(name, { up: true, last_error: null, last_failure_at: null, last_success_at: null });
  }

  async deliverDue(owner: string, precheck: (d: Delivery) => Promise<string | null>, signal?: AbortSignal, templates: string[] | null = null): Promise<DeliveryOutcome> {
    const out: DeliveryOutcome = { sent: 0, failed: 0, skipped: 0, deferred: 0, rate_limited: 0, lost: 0 };
    const round: RoundState = { down: new Set(), full: new Map() };
    const blocked = () => [...new Set([...round.down, ...round.full.keys()])];
    for (let done = 0; done < this.s.batch && !signal?.aborted && blocked().length < this.channels.size;) {
      const due = await this.store.claim(owner, Math.min(CHUNK, this.s.batch - done), this.s.sendTimeoutMs * (CHUNK + 2), templates, blocked());
      if (!due.length) break;
      done += due.length;
      await this.deliver(due, precheck, round, out, signal);
    }
    return out;
  }

  /**
   * A slot of the channel's cluster-wide budget, or null when the delivery was put back because
   * the budget is full (the channel is then full for the rest of the round). Unlimited: no slot.
   */
  private async slot(d: ClaimedDelivery, round: RoundState, out: DeliveryOutcome): Promise<{ token: string | null } | null> {
    const limit = this.s.rateLimits[d.channel];
    if (!limit || limit.count <= 0) return { token: null };
    let retryAt = round.full.get(d.channel);
    if (!retryAt) {
      // Held past the send's worst case; settled to one period after the send once it is over.
      const got = await this.budget.take(d.channel, limit.count, this.s.sendTimeoutMs * 2 + limit.periodMs);
      if ('token' in got) return { token: got.token };
      retryAt = got.retryAt;
      round.full.set(d.channel, retryAt);
    }
    await this.store.defer(d.id, d.claim, retryAt);
    this.nm.notifyDeferred.inc({ channel: d.channel, reason: 'rate_limit' });
    out.rate_limited++;
    return null;
  }

  private async deliver(due: ClaimedDelivery[], precheck: (d: Delivery) => Promise<string | null>, round: RoundState, out: DeliveryOutcome, signal?: AbortSignal): Promise<void> {
    for (const d of due) {
      if (signal?.aborted || round.down.has(d.channel)) {
        await this.store.release(d.id, d.claim, signal?.aborted ? 0 : this.s.retryBaseMs);
        if (!signal?.aborted) this.nm.notifyDeferred.inc({ channel: d.channel, reason: 'channel_down' });
        out.deferred++;
        continue;
      }
      const skip = await precheck(d);
      const channel = this.channels.get(d.channel);
      if (skip || !channel) {
        await this.store.skipped(d.id, d.claim, skip ?? `channel ${d.channel} is not configured`);
        out.skipped++;
        continue;
      }
      let limiter = this.limiters.get(d.channel);
      if (!limiter) this.limiters.set(d.channel, (limiter = new RateLimiter(this.clock, this.s.perSecond)));
      await limiter.take();
      // The fence: the chunk's lease may have lapsed while this sender waited (smoothing, earlier
      // slow sends, a lost liveness session) and the row been taken over; then it is the new
      // holder's to send, not this one's. Held again, the lease covers this send.
      if (!(await this.store.hold(d.id, d.claim, this.s.sendTimeoutMs * 2))) {
        this.log.warn({ channel: d.channel, delivery_id: d.id }, 'notification claim lapsed and taken over before its send; left to its new holder');
        out.lost++;
        continue;
      }
      const slot = await this.slot(d, round, out);
      if (!slot) continue;
      const { subject, text } = render(d.template, d.params);
      try {
        await channel.send({
          to: d.recipient,
          subject,
          text,
          html: typeof d.params.html === 'string' ? d.params.html : undefined,
          messageId: `<${d.dedup_key.replace(/[^A-Za-z0-9.:_-]/g, '_')}@relay-jobs>`,
          dedupKey: d.dedup_key,
        });
        // False only if the send outlasted its lease and the row was taken over: at least once.
        if (!(await this.store.sent(d.id, d.claim))) this.log.warn({ channel: d.channel, delivery_id: d.id }, 'notification sent after its claim lapsed; its new holder may send it again');
        this.mark(d.channel, null);
        this.nm.notifySent.inc({ channel: d.channel, template: d.template });
        out.sent++;
      } catch (err) {
        const msg = (err as Error).message;
        const retryMs = this.s.retryBaseMs * 4 ** Math.min(d.attempts, 6);
        const state = await this.store.failed(d.id, d.claim, msg, retryMs, this.s.maxAttempts);
        this.mark(d.channel, msg);
        round.down.add(d.channel);
        this.nm.notifyFailures.inc({ channel: d.channel });
        this.log.warn(
          { channel: d.channel, delivery_id: d.id, attempt: d.attempts + 1, retry_in_s: state === 'retry' ? retryMs / 1000 : null, err: msg },
          state === 'retry' ? 'notification failed; retried later' : state === 'lost' ? 'notification failed after its claim was taken over; left to its new holder' : 'notification failed for good',
        );
        out.failed++;
      } finally {
        const limit = this.s.rateLimits[d.channel];
        if (slot.token && limit) await this.budget.settle(d.channel, slot.token, limit.periodMs);
      }
    }
  }

  private mark(channel: string, error: string | null): void {
    const h = this.health.get(channel)!;
    const now = new Date(this.clock.now()).toISOString();
    if (error) Object.assign(h, { up: false, last_error: error, last_failure_at: now });
    else Object.assign(h, { up: true, last_success_at: now });
    this.nm.notifyChannelUp.set({ channel }, error ? 0 : 1);
  }

  close(): void {
    for (const c of this.channels.values()) c.close();
  }
}
