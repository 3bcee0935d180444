import { jobsFor } from '../../modules/define-job.js';
import type { BillingServices } from './wiring.js';

const defineJob = jobsFor<BillingServices>();

/**
 * payment_order_expiry: reconcile first (pending orders created recently or about to expire are
 * queried at the provider, so a missed webhook still credits the user), then expire (an order
 * past its expiry is checked one last time, closed at the provider, and only then set expired,
 * conditionally). Provider failures are counted and retried next round.
 */
export const paymentOrderExpiryJob = defineJob({
  name: 'payment_order_expiry',
  description: 'Reconciles pending payment orders with their provider, then expires unpaid ones past their expiry',
  scope: 'cluster',
  defaults: { enabled: true, every: '1m', timeout: '5m' },
  needs: ['payments'],
  async run(ctx, { payments }, _o, config) {
    const p = config.payments;
    const r = await payments.reconcile(p.reconcile_window, p.batch, p.retry_base, ctx.signal);
    const e = await payments.expire(p.batch, p.retry_base, ctx.signal);
    const errors = r.providerErrors + e.providerErrors;
    if (errors && r.checked + e.checked === 0) throw new Error(`every provider check failed (${errors}); no order was changed, retried next round`);
    const settled = r.settled + e.settled;
    return {
      items: r.paid + e.paid + e.expired,
      note: `reconciled ${r.checked} (${r.paid} paid), expiry checks ${e.checked} (${e.paid} paid, ${e.expired} expired), ${errors} provider errors${settled ? `, ${settled} settled meanwhile (webhook)` : ''}`,
    };
  },
});
