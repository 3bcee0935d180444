/** The notifications area's public face: other areas and the composition root import only this file. */
export { SmtpChannel, WebhookChannel } from './channels.js';
export type { Channel } from './channels.js';
export { Notifier } from './notifier.js';
export { ChannelBudget } from './store/channel-budget.js';
export { Notifications } from './store/notifications.js';
