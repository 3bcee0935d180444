import { sql as core } from './001_core.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Numbered, append-only. Never edit a migration that has shipped; add the next number. */
export const MIGRATIONS: Migration[] = [{ version: 1, name: 'core', sql: core }];
