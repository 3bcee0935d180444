import { Billing } from './store/billing.js';
import { Payments } from './payments.js';
import { GenericJsonProvider, type PaymentProvider } from './payment-provider.js';
import { wired, type WiringContext } from '../../modules/wiring.js';
import type { NotificationsFace } from '../notifications/index.js';

/** Subscriptions and payment orders; reminders and receipts go through the notifications area's outbox. */
export function buildBilling(w: WiringContext) {
  const { config, db, clock, log, metrics } = w;
  const providers = new Map<string, PaymentProvider>(
    Object.entries(config.payments.providers).map(([name, c]) => [name, new GenericJsonProvider(name, c, config.payments.request_timeout, config.payments.webhook_tolerance)]),
  );
  const billing = new Billing(db);
  return wired({ services: { billing, payments: new Payments(billing, providers, clock, metrics, log) }, rungs: [] });
}

/** What the billing area's jobs and routes use: its own services and the notifications outbox. */
export type BillingServices = ReturnType<typeof buildBilling>['services'] & NotificationsFace;
