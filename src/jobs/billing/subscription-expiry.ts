import type { Config } from '../../config/load.js';
import type { Db } from '../../store/db.js';
import type { Delivery, Notifications } from '../../store/notifications.js';
import { defineJob } from '../define-job.js';

// One statement per (window, channel): the reminder intent for every active subscription whose
// end falls inside the window. The key names the subscription, the window and the period end, so
// each is recorded once, and a renewed subscription (new period end) is a new key.
const QUEUE_REMINDERS = (channel: 'email' | 'webhook') => `
INSERT INTO notification_deliveries (dedup_key, channel, recipient, template, params)
SELECT 'reminder:' || s.id || ':' || $1::int || 'd:' || to_char(s.expires_at AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS.US') || ':${channel}', '${channel}',
       ${channel === 'email' ? 'u.email' : 'u.id::text'}, 'subscription_reminder',
       jsonb_build_object('subscription_id', s.id, 'period_end', s.expires_at, 'days', $1::int, 'plan', p.name,
                          'expires_at', to_char(s.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI "UTC"'))
FROM subscriptions s JOIN billing_users u ON u.id = s.user_id JOIN plans p ON p.id = s.plan_id
WHERE s.status = 'active' AND s.expires_at > clock_timestamp() + $2::int * interval '1 day' AND s.expires_at <= clock_timestamp() + $1::int * interval '1 day'
  ${channel === 'email' ? 'AND u.email IS NOT NULL' : ''}
ON CONFLICT (dedup_key) DO NOTHING`;

/** A reminder whose subscription was renewed, cancelled or has expired is not sent. */
async function stillDue(db: Db, d: Delivery): Promise<string | null> {
  if (d.template !== 'subscription_reminder') return null;
  const { rowCount } = await db.query(`SELECT 1 FROM subscriptions WHERE id = $1 AND status = 'active' AND expires_at = $2::timestamptz AND expires_at > clock_timestamp()`, [
    d.params.subscription_id,
    d.params.period_end,
  ]);
  return rowCount === 1 ? null : 'subscription renewed, cancelled or ended since the reminder was queued';
}

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

export const subscriptionExpiryJob = defineJob({
    name: 'subscription_expiry',
    description: 'Expires subscriptions past their end, records expiry reminders once per window, sends due notifications',
    scope: 'cluster',
    defaults: { enabled: true, every: '1m', timeout: '5m' },
    needs: ['billing', 'notifications', 'notifier', 'metrics'],
    async run(ctx, s, _o, config) {
      const expired = await s.billing.expireSubscriptions();
      if (expired) {
        s.metrics.subscriptionsExpired.inc(expired);
        ctx.log.info({ expired }, 'subscriptions expired');
      }
      let queued = 0;
      const { reminders_enabled, reminder_days: days } = await reminderSettings(config, s.notifications);
      for (const channel of (reminders_enabled ? s.notifier.channels.keys() : []) as Iterable<'email' | 'webhook'>) {
        for (let i = 0; i < days.length; i++) {
          const n = (await ctx.db.query(QUEUE_REMINDERS(channel), [days[i], days[i + 1] ?? 0])).rowCount;
          if (n) s.metrics.remindersQueued.inc({ days: String(days[i]) }, n);
          queued += n;
        }
      }
      const d = await s.notifier.deliverDue(ctx.instanceId, (x) => stillDue(ctx.db, x), ctx.signal);
      const down = [...s.notifier.health].filter(([, h]) => !h.up).map(([c, h]) => `${c} down: ${h.last_error}`);
      return { items: expired + queued + d.sent, note: `${expired} expired, ${queued} reminders queued, ${d.sent} sent, ${d.failed} failed, ${d.skipped} skipped, ${d.deferred} deferred${down.length ? `; ${down.join('; ')}` : ''}` };
    },
});
