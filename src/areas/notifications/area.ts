import type { AreaModule } from '../../jobs/area.js';

/** The notifications area as the area list sees it: no jobs or routes of its own (billing and ops send through it). */
export const notificationsArea: AreaModule = { name: 'notifications', jobs: [] };
