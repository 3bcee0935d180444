import { Counter, Gauge, type Registry } from 'prom-client';

/** The notifier: deliveries, failures, deferrals and each channel's last outcome. */
export class NotificationMetrics {
  readonly notifySent: Counter<'channel' | 'template'>;
  readonly notifyFailures: Counter<'channel'>;
  readonly notifyDeferred: Counter<'channel' | 'reason'>;
  readonly notifyChannelUp: Gauge<'channel'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.notifySent = new Counter({ name: 'relay_jobs_notifications_sent_total', help: 'Notifications delivered', labelNames: ['channel', 'template'], registers });
    this.notifyFailures = new Counter({ name: 'relay_jobs_notification_failures_total', help: 'Notification attempts that failed', labelNames: ['channel'], registers });
    this.notifyDeferred = new Counter({
      name: 'relay_jobs_notifications_deferred_total',
      help: 'Claimed notifications put back for later without an attempt, by channel and reason (rate_limit: the cluster-wide budget was full; channel_down: the channel failed this round)',
      labelNames: ['channel', 'reason'],
      registers,
    });
    this.notifyChannelUp = new Gauge({ name: 'relay_jobs_notification_channel_up', help: "1 when the channel's last attempt succeeded", labelNames: ['channel'], registers });
  }
}
