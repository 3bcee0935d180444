/** The billing area's public face: other areas and the composition root import only this file. */
export { signWebhook, GenericJsonProvider, ProviderError, type PaymentProvider } from './payment-provider.js';
/** Balance holds for other areas' paid work (images), in the caller's transaction. */
export { lockBillingUser, holdBalance, settleHold, type HoldResult } from './store/balance-holds.js';
