import { Billing } from './store/billing.js';
import { Notifications } from '../notifications/index.js';
import { ChannelBudget } from '../notifications/index.js';
import { Notifier } from '../notifications/index.js';
import { Payments } from './payments.js';
import { SmtpChannel, WebhookChannel, type Channel } from '../notifications/index.js';
import { GenericJsonProvider, type PaymentProvider } from './payment-provider.js';
import type { Services } from '../../jobs/services.js';
import type { WiringContext, Wired } from '../../app/wiring.js';

export function buildBilling(w: WiringContext): Wired<Pick<Services, 'billing' | 'notifications' | 'notifier' | 'payments'>> {
  const { config, db, clock, log, metrics } = w;
  const n = config.notify;
  const channels = new Map<string, Channel>();
  if (n.smtp) channels.set('email', new SmtpChannel(n.smtp, n.send_timeout));
  if (n.webhook) channels.set('webhook', new WebhookChannel(n.webhook, n.send_timeout));
  const notifications = new Notifications(db, () => w.liveness?.key ?? null);
  const rateLimits = Object.fromEntries(Object.entries(n.rate_limit).map(([channel, l]) => [channel, { count: l.count, periodMs: l.period }]));
  const notifier = new Notifier(
    notifications,
    new ChannelBudget(db),
    channels,
    { perSecond: n.per_second, rateLimits, maxAttempts: n.max_attempts, retryBaseMs: n.retry_base, batch: n.batch, sendTimeoutMs: n.send_timeout },
    clock,
    metrics,
    log,
  );
  const providers = new Map<string, PaymentProvider>(
    Object.entries(config.payments.providers).map(([name, c]) => [name, new GenericJsonProvider(name, c, config.payments.request_timeout, config.payments.webhook_tolerance)]),
  );
  const billing = new Billing(db);
  return {
    services: { billing, notifications, notifier, payments: new Payments(billing, providers, clock, metrics, log) },
    rungs: [{ name: 'notifier', stop: () => notifier.close() }],
  };
}
