import type { Migration } from '../../../../store/migrations/index.js';
import { sql as providerConformance } from './029_provider_conformance.js';
import { sql as tokenNotify } from './039_token_notify.js';

/** The accounts area's own migrations (versions are unique across the kernel's and every area's: app/migrations.ts). */
export const accountsMigrations: readonly Migration[] = [
  { version: 29, name: 'provider_conformance', sql: providerConformance },
  { version: 39, name: 'token_notify', sql: tokenNotify },
];
