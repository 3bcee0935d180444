import type { Config } from '../../config/load.js';
import type { Notifications } from '../notifications/index.js';
import { jobsFor } from '../../modules/define-job.js';
import type { BillingServices } from './wiring.js';
import { BillingMetrics } from './metrics.js';
import { sqlNow } from '../../store/sql-now.js';

/**
 * subscription_expiry: active subscriptions past their end become `expired` (one statement);
 * reminders for the windows before expiry (`billing.reminder_days`, default 7, 3, 1: one
 * reminder per window) are recorded as intents in the outbox, then due notifications are sent.
 * Correct by construction: the unique intent key, not a lock, keeps a reminder single.
 */
/** Reminder settings: the admin's (`PUT /api/v1/notifications/settings`) over the config file's. */
export async function reminderSettings(config: Config, notifications: Notifications): Promise<{ reminders_enabled: boolean; reminder_days: number[] }> {
  const stored = await notifications.settings();
  const days = Array.isArray(stored.reminder_days) ? (stored.reminder_days as number[]) : config.billing.reminder_days;
  return { reminders_enabled: stored.reminders_enabled !== false, reminder_days: [...new Set(days)].sort((a, b) => b - a) };
}

const defineJob = jobsFor<BillingServices>();

export const subscriptionExpiryJob = defineJob({
  name: 'subscription_expiry',
  description: 'Expires subscriptions past their end, records expiry reminders once per window, sends due notifications',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '5m' },
  needs: ['billing', 'notifications', 'notifier', 'metrics'],
  async run(ctx, s, _o, config) {
    const bm = s.metrics.group(BillingMetrics);
    const expired = await s.billing.expireSubscriptions(sqlNow(ctx.clock));
    if (expired) {
      bm.subscriptionsExpired.inc(expired);
      ctx.log.info({ expired }, 'subscriptions expired');
    }
    let queued = 0;
    const { reminders_enabled, reminder_days: days } = await reminderSettings(config, s.notifications);
    for (const channel of (reminders_enabled ? s.notifier.channels.keys() : []) as Iterable<'email' | 'webhook'>) {
      for (let i = 0; i < days.length; i++) {
        const n = await s.notifications.queueReminders(channel, days[i]!, days[i + 1] ?? 0);
        if (n) bm.remindersQueued.inc({ days: String(days[i]) }, n);
        queued += n;
      }
    }
    const d = await s.notifier.deliverDue(ctx.instanceId, (x) => s.notifications.reminderStillDue(x), ctx.signal);
    const down = [...s.notifier.health].filter(([, h]) => !h.up).map(([c, h]) => `${c} down: ${h.last_error}`);
    return {
      items: expired + queued + d.sent,
      note: `${expired} expired, ${queued} reminders queued, ${d.sent} sent, ${d.failed} failed, ${d.skipped} skipped, ${d.deferred} deferred, ${d.rate_limited} rate-limited${down.length ? `; ${down.join('; ')}` : ''}`,
    };
  },
});
