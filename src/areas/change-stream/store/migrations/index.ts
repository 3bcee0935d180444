import type { Migration } from '../../../../store/migrations/index.js';
import { sql as changeStream } from './035_change_stream.js';

/** The change-stream area's own migrations (versions are unique across the kernel's and every area's: app/migrations.ts). */
export const changeStreamMigrations: readonly Migration[] = [{ version: 35, name: 'change_stream', sql: changeStream }];
