/** The notifications area's public face: other areas and the composition root import only this file. */
export { SmtpChannel, WebhookChannel } from './channels.js';
export type { Channel } from './channels.js';
export { Notifier } from './notifier.js';
export { ChannelBudget } from './store/channel-budget.js';
export { Notifications } from './store/notifications.js';
/** What other areas' jobs and routes use of notifications: the outbox and the notifier. */
export type { NotificationsServices as NotificationsFace } from './wiring.js';
/** The outbox's enqueue for other areas (ops), on the caller's transaction. */
export { enqueueDeliveries, type DeliveryIntent } from './store/delivery-intents.js';
