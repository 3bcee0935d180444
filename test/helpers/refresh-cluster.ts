import pg from 'pg';
import { ServiceProcess } from './cli.js';
import { TEST_MASTER_KEY, freePort } from './services.js';

/** Shared by the refresh e2e scenarios: replicas of one cluster, a lapse watcher, polling. */
export const ADMIN = 'e2e-refresh-admin-token-0123';

export async function startReplica(id: string, env: Record<string, string>): Promise<{ proc: ServiceProcess; port: number }> {
  const port = await freePort();
  const proc = ServiceProcess.start(id, {
    RELAY_JOBS_INSTANCE_ID: id,
    RELAY_JOBS_ENV: 'e2e',
    RELAY_JOBS_HTTP_PORT: String(port),
    RELAY_JOBS_ADMIN_TOKEN: ADMIN,
    RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    RELAY_JOBS__DATABASE__POOL_SIZE: '8',
    RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT: '1s',
    RELAY_JOBS__JOBS__TOKEN_REFRESH__EVERY: '1s',
    RELAY_JOBS__JOBS__TOKEN_REFRESH__JITTER: '0s',
    ...env,
  });
  return { proc, port };
}

export async function importAccounts(port: number, accounts: unknown[]): Promise<void> {
  const res = await fetch(`http://127.0.0.1:${port}/api/v1/accounts/import`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ accounts }),
  });
  if (res.status !== 201) throw new Error(`import: ${res.status} ${await res.text()}`);
}

/** Watches every account's token expiry from the database four times a second: the longest lapse per account. */
export function watchLapses(sql: pg.Client): { lapsed: Map<number, number>; stop: () => Promise<void> } {
  const lapsed = new Map<number, number>();
  let watching = true;
  const loop = (async () => {
    while (watching) {
      const { rows } = await sql.query<{ id: number; lapsed_ms: number }>(
        `SELECT id, (extract(epoch FROM clock_timestamp() - token_expires_at) * 1000)::float8 AS lapsed_ms FROM accounts WHERE token_expires_at < clock_timestamp()`,
      );
      for (const r of rows) lapsed.set(Number(r.id), Math.max(lapsed.get(Number(r.id)) ?? 0, r.lapsed_ms));
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return {
    lapsed,
    stop: async () => {
      watching = false;
      await loop;
    },
  };
}

export { sleep, waitFor } from './wait.js';

/**
 * Accounts not active with a token still valid (the end state both scenarios require), listed.
 * `inFlight`: while replicas run, `refreshing` is a refresh under way, not a fault.
 */
export async function notHealthy(sql: pg.Client, inFlight = false): Promise<Array<{ id: number; status: string; status_reason: string | null; left_ms: number | null }>> {
  const { rows } = await sql.query(
    `SELECT id, status, status_reason, (extract(epoch FROM token_expires_at - clock_timestamp()) * 1000)::float8 AS left_ms FROM accounts
      WHERE NOT (status = 'active' OR ($1 AND status = 'refreshing')) OR token_expires_at IS NULL OR token_expires_at <= clock_timestamp() ORDER BY id`,
    [inFlight],
  );
  return rows as Array<{ id: number; status: string; status_reason: string | null; left_ms: number | null }>;
}
