import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Logger } from '../telemetry/logger.js';

const ADMIN_TOKEN_FILE = 'admin-token';

/** The admin token embedded mode keeps in its data directory, if one was generated. */
export function readEmbeddedAdminToken(dataDir: string): string | undefined {
  const path = join(dataDir, ADMIN_TOKEN_FILE);
  return existsSync(path) ? readFileSync(path, 'utf8').trim() : undefined;
}

/** Embedded mode keeps an admin token in the data directory (mode 0600) so the API works out of the box. */
export function embeddedAdminToken(dataDir: string, log: Logger): string {
  const existing = readEmbeddedAdminToken(dataDir);
  if (existing) return existing;
  const path = join(dataDir, ADMIN_TOKEN_FILE);
  const token = randomBytes(24).toString('base64url');
  writeFileSync(path, token + '\n', { mode: 0o600 });
  log.info({ path }, 'generated an admin token for the API; read it from this file');
  return token;
}
