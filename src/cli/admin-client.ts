import { resolve } from 'node:path';
import type { Config } from '../config/load.js';
import { UserError } from '../config/errors.js';
import { readEmbeddedAdminToken } from '../app/admin-token.js';
import { DataDirLock } from '../store/data-dir-lock.js';

/**
 * Where the running service answers, found the way every command finds it (`run`, `sql`, `jobs
 * pause`): `--url` when given; in embedded mode the data directory's lock file, which names the
 * live process that holds the directory and its HTTP port (a service started on another port is
 * found there, and none running is said at once instead of a connection refused); in cluster mode
 * this config's `http.port` on loopback (a replica on this host).
 */
export function serviceUrl(config: Config, url: string | undefined): string {
  if (url) return url;
  if (config.mode === 'embedded') {
    const owner = DataDirLock.liveOwner(config.database.data_dir);
    if (!owner) {
      throw new UserError(
        `no relay-jobs service is running on data directory ${resolve(config.database.data_dir)} (RELAY_JOBS_DATA_DIR; no live process holds its lock file): start it with \`relay-jobs start\`, or pass --url`,
      );
    }
    return `http://127.0.0.1:${owner.http_port ?? config.http.port}`;
  }
  return `http://127.0.0.1:${config.http.port}`;
}

/**
 * Commands that ask the running service (`relay-jobs backup`, `backups`, `accounts …`): the admin
 * API where `serviceUrl` finds it, with RELAY_JOBS_ADMIN_TOKEN or, in embedded mode, the token file
 * in the data directory.
 */
export async function adminRequest<T>(config: Config, url: string | undefined, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const base = serviceUrl(config, url);
  const token = config.http.admin_token ?? (config.mode === 'embedded' ? readEmbeddedAdminToken(config.database.data_dir) : undefined);
  if (!token) throw new UserError("no admin token: set RELAY_JOBS_ADMIN_TOKEN to the service's token");
  let res: Response;
  try {
    res = await fetch(new URL(`/api/v1${path}`, base), {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body !== undefined ? JSON.stringify(body) : undefined,
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    throw new UserError(
      `cannot reach relay-jobs at ${base} (${(err as Error).cause ? String(((err as Error).cause as Error).message) : (err as Error).message}): is \`relay-jobs start\` running? (--url)`,
    );
  }
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = { error: { message: text.slice(0, 200) } };
  }
  if (res.status === 401) throw new UserError(`relay-jobs at ${base} refused the admin token (401)`);
  return { status: res.status, body: parsed as T };
}
