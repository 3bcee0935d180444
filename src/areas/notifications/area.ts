import { defineArea } from '../../modules/area.js';
import { NotificationMetrics } from './metrics.js';
import { notificationsConfig } from './config.js';

/** The notifications area as the area list sees it: the outbox and the notifier, no jobs or routes of its own (billing and ops send through it). */
export const notificationsArea = defineArea({
  name: 'notifications',
  config: notificationsConfig,
  wiring: async () => (await import('./wiring.js')).buildNotifications,
  jobs: [],
  metrics: [NotificationMetrics],
});
