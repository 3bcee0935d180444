import type { Config } from '../config/load.js';
import { UserError } from '../config/errors.js';
import { readEmbeddedAdminToken } from '../app/admin-token.js';

/**
 * Commands that ask the running service (`relay-jobs backup`, `backups`): the admin API at
 * `--url` (default this config's http.port on loopback), with RELAY_JOBS_ADMIN_TOKEN or, in
 * embedded mode, the token file in the data directory.
 */
export async function adminRequest<T>(config: Config, url: string | undefined, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; body: T }> {
  const base = url ?? `http://127.0.0.1:${config.http.port}`;
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
