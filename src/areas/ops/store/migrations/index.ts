import type { Migration } from '../../../../store/migrations/index.js';
import { sql as opsDefaults } from './036_ops_defaults.js';

/** The ops area's own migrations (versions are unique across the kernel's and every area's: app/migrations.ts). */
export const opsMigrations: readonly Migration[] = [{ version: 36, name: 'ops_defaults', sql: opsDefaults }];
