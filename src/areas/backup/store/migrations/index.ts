import type { Migration } from '../../../../store/migrations/index.js';
import { sql as backupLiveness } from './041_backup_liveness.js';

/** The backup area's own migrations (versions are unique across the kernel's and every area's: app/migrations.ts). */
export const backupMigrations: readonly Migration[] = [{ version: 41, name: 'backup_liveness', sql: backupLiveness }];
