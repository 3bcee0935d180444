import pg from 'pg';
import type { Cluster, Replica } from './cluster.js';
import { pace } from './wait.js';

/** Shared by the refresh e2e scenarios: replicas of one cluster (test/helpers/cluster.ts), a lapse watcher, polling. */

/** What every refresh scenario's replica runs with, over the harness's defaults: the refresh round every second, and Redis's default command timeout. */
export const REFRESH_ENV: Record<string, string | undefined> = {
  RELAY_JOBS__JOBS__TOKEN_REFRESH__EVERY: '1s',
  RELAY_JOBS__JOBS__TOKEN_REFRESH__JITTER: '0s',
  RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined,
};

/** Starts one replica of `cluster` (not waited for). */
export function startReplica(cluster: Cluster, id: string, env: Record<string, string | undefined>): Promise<Replica> {
  return cluster.addReplica(id, { ...REFRESH_ENV, ...env });
}

export async function importAccounts(cluster: Cluster, replica: Replica, accounts: unknown[]): Promise<void> {
  const res = await cluster.api(replica, '/accounts/import', { body: { accounts } });
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
      await pace(250); // the sampling cadence
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
