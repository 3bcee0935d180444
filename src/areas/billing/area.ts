import { defineArea } from '../../modules/area.js';
import { BillingMetrics } from './metrics.js';
import { billingConfig } from './config.js';
import type { NotificationsFace } from '../notifications/index.js';
import { subscriptionExpiryJob } from './subscription-expiry.js';
import { paymentOrderExpiryJob } from './payment-order-expiry.js';
import { registerBillingRoutes, registerPaymentWebhook } from './billing-routes.js';
import { registerBillingListRoutes } from './billing-list-routes.js';

/** The billing area as the area list sees it (README.md: its invariants). Reminders go through the notifications area. */
export const billingArea = defineArea({
  name: 'billing',
  config: billingConfig,
  wiring: async () => {
    const { buildBilling } = await import('./wiring.js');
    // Its jobs and routes queue through the notifications outbox (read at use: notifications is wired later in the list).
    return (w, _uses: NotificationsFace) => buildBilling(w);
  },
  jobs: [subscriptionExpiryJob, paymentOrderExpiryJob],
  metrics: [BillingMetrics],
  routes(api, deps) {
    registerBillingRoutes(api, deps);
    registerBillingListRoutes(api, deps);
  },
  // The payment webhook authenticates by its signature, not the admin token.
  publicRoutes: (app, deps) => registerPaymentWebhook(app, deps),
});
