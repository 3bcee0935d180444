import type { Migration } from '../../../../store/migrations/index.js';
import { sql as monitorDialects } from './030_monitor_dialects.js';

/** The probes area's own migrations (versions are unique across the kernel's and every area's: app/migrations.ts). */
export const probesMigrations: readonly Migration[] = [{ version: 30, name: 'monitor_dialects', sql: monitorDialects }];
