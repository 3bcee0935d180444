import { sql as core } from './001_core.js';
import { sql as accounts } from './002_accounts.js';
import { sql as usage } from './003_usage.js';
import { sql as billing } from './004_billing.js';
import { sql as backups } from './009_backups.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Numbered, append-only. Never edit a migration that has shipped; add the next number. */
export const MIGRATIONS: Migration[] = [
  { version: 1, name: 'core', sql: core },
  { version: 2, name: 'accounts', sql: accounts },
  { version: 3, name: 'usage', sql: usage },
  { version: 4, name: 'billing', sql: billing },
  { version: 9, name: 'backups', sql: backups },
];
