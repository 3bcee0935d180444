import { Notifications } from './store/notifications.js';
import { ChannelBudget } from './store/channel-budget.js';
import { Notifier } from './notifier.js';
import { SmtpChannel, WebhookChannel, type Channel } from './channels.js';
import { wired, type WiringContext } from '../../modules/wiring.js';

/** The notifications outbox and the notifier that sends it (billing and ops queue through them). */
export function buildNotifications(w: WiringContext) {
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
  return wired({ services: { notifications, notifier }, rungs: [{ name: 'notifier', stop: () => notifier.close() }] });
}

/** What other areas use of notifications (exported from index.ts as `NotificationsFace`). */
export type NotificationsServices = ReturnType<typeof buildNotifications>['services'];
