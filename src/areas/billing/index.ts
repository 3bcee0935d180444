/** The billing area's public face: other areas and the composition root import only this file. */
export { signWebhook, GenericJsonProvider, ProviderError, type PaymentProvider } from './payment-provider.js';
