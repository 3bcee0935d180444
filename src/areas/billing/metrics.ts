import { Counter, type Registry } from 'prom-client';

/** Subscriptions and payment orders: expiry, reminders, payments and their webhooks. */
export class BillingMetrics {
  readonly subscriptionsExpired: Counter;
  readonly remindersQueued: Counter<'days'>;
  readonly ordersPaid: Counter<'source'>;
  readonly ordersExpired: Counter;
  readonly providerFailures: Counter<'provider'>;
  readonly webhooksRejected: Counter<'provider' | 'reason'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.subscriptionsExpired = new Counter({ name: 'relay_jobs_subscriptions_expired_total', help: 'Subscriptions set expired', registers });
    this.remindersQueued = new Counter({ name: 'relay_jobs_subscription_reminders_queued_total', help: 'Reminder intents recorded', labelNames: ['days'], registers });
    this.ordersPaid = new Counter({
      name: 'relay_jobs_payment_orders_paid_total',
      help: 'Orders marked paid, by source (webhook, reconcile, expiry_check)',
      labelNames: ['source'],
      registers,
    });
    this.ordersExpired = new Counter({ name: 'relay_jobs_payment_orders_expired_total', help: 'Orders expired after a last check at the provider', registers });
    this.providerFailures = new Counter({
      name: 'relay_jobs_payment_provider_failures_total',
      help: 'Provider queries or closes that failed (retried next round)',
      labelNames: ['provider'],
      registers,
    });
    this.webhooksRejected = new Counter({ name: 'relay_jobs_payment_webhooks_rejected_total', help: 'Webhooks refused, by reason', labelNames: ['provider', 'reason'], registers });
  }
}
