import type { AreaModule } from '../../jobs/area.js';
import { subscriptionExpiryJob } from './subscription-expiry.js';
import { paymentOrderExpiryJob } from './payment-order-expiry.js';
import { registerBillingRoutes, registerPaymentWebhook } from './billing-routes.js';
import { registerBillingListRoutes } from './billing-list-routes.js';

/** The billing area as the area list sees it (README.md: its invariants). */
export const billingArea: AreaModule = {
  name: 'billing',
  jobs: [subscriptionExpiryJob, paymentOrderExpiryJob],
  routes(api, deps) {
    registerBillingRoutes(api, deps);
    registerBillingListRoutes(api, deps);
  },
  // The payment webhook authenticates by its signature, not the admin token.
  publicRoutes: (app, deps) => registerPaymentWebhook(app, deps),
};
