/**
 * Refresh work shared, not repeated (issue 18): N real replicas (`relay-jobs start`, only
 * `token_refresh` on, default heartbeat 5 s) share M accounts whose tokens live 30 s and are
 * refreshed 15 s before expiry, against the loopback OAuth server. Measured:
 *   - scheduled guard requests (each tries the account's lease) per refresh, cluster-wide
 *     (`relay_jobs_token_refresh_total` of every replica, triggers schedule/retry/recovery, /
 *     refreshes the OAuth server granted), in steady state;
 *   - after a SIGKILL of one replica: how long until every survivor's shard map dropped it (its
 *     accounts have an owner again), and whether any account's token lapsed (the database's
 *     `token_expires_at` polled every 250 ms), the accounts it was refreshing at the kill apart.
 * `BENCH_CLI=/path/to/cli/main.js` measures another build (the "before" row: a build without
 * sharding, where every replica attempts every refresh).
 */
import { spawn } from 'node:child_process';
import pg from 'pg';
import { Redis } from 'ioredis';
import { CLI, ServiceProcess, cleanEnv } from '../test/helpers/cli.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freePort, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { FakeOAuthServer } from '../test/fixtures/oauth-server.js';
import { OTHER_JOBS } from './replicas.js';
import { waitFor } from '../test/helpers/wait.js';

const LIFETIME_S = 30;
const ADMIN = 'bench-admin-token-0123456789';
// Every scheduled request through the refresh guard (each one tries the account's lease), in a form both builds export.
const SCHEDULED = /relay_jobs_token_refresh_total\{[^}]*trigger="(schedule|retry|recovery)"[^}]*\} (\d+)/g;

export interface ShardResult {
  build: string;
  replicas: number;
  accounts: number;
  refreshes: number;
  attemptsPerRefresh: number;
  /** Kill → every survivor's shard map without the dead replica (ms); null for a build without sharding. */
  ownerlessMs: number | null;
  inFlightAtKill: number;
  lapsed: number;
  refreshesPerSec: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export async function benchRefreshShards(replicas: number, accounts: number, cli = CLI, build = 'this build'): Promise<ShardResult> {
  const db = await freshDatabase();
  const oauth = await FakeOAuthServer.start({ lifetimeSec: LIFETIME_S, clientId: 'bench-client' });
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const prefix = uniqueName('rjshb');
  const procs: ServiceProcess[] = [];
  const ports: number[] = [];
  try {
    for (let i = 0; i < replicas; i++) {
      ports.push(await freePort());
      const env: Record<string, string> = {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: `b${i}`,
        RELAY_JOBS_ENV: 'bench',
        RELAY_JOBS_HTTP_PORT: String(ports[i]),
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: String(replicas),
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'bench-client',
        RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '1000',
        RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '15',
        RELAY_JOBS__AUTH__REFRESH_CONCURRENCY: '8',
        RELAY_JOBS__JOBS__TOKEN_REFRESH__EVERY: '2s',
        RELAY_JOBS__JOBS__TOKEN_REFRESH__JITTER: '0s',
      };
      for (const j of [...OTHER_JOBS, 'canary']) env[`RELAY_JOBS__JOBS__${j.toUpperCase()}__ENABLED`] = 'false';
      procs.push(new ServiceProcess(`b${i}`, spawn(process.execPath, [cli, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })));
    }
    await Promise.all(procs.map((p) => p.waitForLine(/relay-jobs started/, 120_000)));
    await sleep(6000); // two heartbeats: every replica knows every other
    const list = Array.from({ length: accounts }, (_, i) => ({ platform: 'openai', name: `a${i}`, credentials: oauth.issue(`a${i}`, 16 + (i % 14)) }));
    for (let i = 0; i < list.length; i += 1000) {
      const res = await fetch(`http://127.0.0.1:${ports[0]}/api/v1/accounts/import`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ accounts: list.slice(i, i + 1000) }),
      });
      if (res.status !== 201) throw new Error(`import: ${res.status} ${await res.text()}`);
    }
    const lapsed = new Set<number>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const { rows } = await sql.query<{ id: string }>(`SELECT id FROM accounts WHERE token_expires_at < clock_timestamp()`);
        for (const r of rows) lapsed.add(Number(r.id));
        await sleep(250);
      }
    })();
    const attempts = async (i: number) => [...(await (await fetch(`http://127.0.0.1:${ports[i]}/metrics`)).text()).matchAll(SCHEDULED)].reduce((n, m) => n + Number(m[2]), 0);

    // Steady state: one and a half refresh cycles.
    const t0 = Date.now();
    await waitFor(() => oauth.successes >= accounts * 1.5, { timeoutMs: 300_000, what: () => `${oauth.successes} refreshes` });
    const steadySecs = (Date.now() - t0) / 1000;
    let tried = 0;
    for (let i = 0; i < replicas; i++) tried += await attempts(i);
    const refreshes = oauth.successes;
    const lapsedBefore = new Set(lapsed);

    // SIGKILL the last replica; the survivors' logs say when their shard map dropped it.
    const victim = procs.at(-1)!;
    const seen = procs.slice(0, -1).map((p) => p.lines.length);
    victim.proc.kill('SIGKILL');
    await victim.exited;
    const killedAt = Date.now();
    // In flight: the accounts whose PostgreSQL lease or Redis lock the dead replica held (they wait for the lock's TTL).
    const dead = `b${replicas - 1}:`;
    const { rows: held } = await sql.query<{ account_id: string }>(`SELECT account_id FROM account_refresh_leases WHERE owner LIKE $1`, [`${dead}%`]);
    const inFlight = new Set(held.map((r) => Number(r.account_id)));
    const redis = new Redis(REDIS_URL);
    for (const key of await redis.keys(`${prefix}:bench:oauth:refresh_lock:*`)) if ((await redis.get(key))?.startsWith(dead)) inFlight.add(Number(/\{(\d+)\}/.exec(key)![1]));
    redis.disconnect();
    const dropped = new RegExp(`"members":\\[(?![^\\]]*"b${replicas - 1}")`);
    let ownerlessMs: number | null = null;
    const sharded = procs[0]!.lines.some((l) => l.includes('"members":'));
    if (sharded) {
      await waitFor(() => procs.slice(0, -1).every((p, i) => p.lines.slice(seen[i]).some((l) => dropped.test(l))), { timeoutMs: 60_000, what: () => 'survivors never dropped the dead replica' });
      ownerlessMs = Math.max(...procs.slice(0, -1).map((p, i) => Date.parse(JSON.parse(p.lines.slice(seen[i]).find((l) => dropped.test(l))!).time) - killedAt));
    }
    const after = oauth.successes;
    await waitFor(() => oauth.successes >= after + accounts, { timeoutMs: 300_000, what: () => `${oauth.successes - after} refreshes after the kill` });
    watching = false;
    await watcher;
    for (const p of procs.slice(0, -1)) p.proc.kill('SIGTERM');
    await Promise.all(procs.map((p) => p.exited));
    const lapsedAfter = [...lapsed].filter((id) => !lapsedBefore.has(id) && !inFlight.has(id)).length;
    return {
      build,
      replicas,
      accounts,
      refreshes,
      attemptsPerRefresh: tried / refreshes,
      ownerlessMs,
      inFlightAtKill: inFlight.size,
      lapsed: lapsedBefore.size + lapsedAfter,
      refreshesPerSec: refreshes / steadySecs,
    };
  } finally {
    for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGKILL');
    await sql.end();
    await oauth.close();
    await dropRedisPrefix(prefix);
    await db.drop();
  }
}

export function shardTable(rows: ShardResult[]): string {
  const head =
    '| build | replicas | accounts | refreshes (steady) | scheduled lease attempts (guard requests) per refresh | kill → dead replica dropped by every survivor | in flight at the kill | tokens lapsed |\n|---|---|---|---|---|---|---|---|';
  return [
    head,
    ...rows.map(
      (r) =>
        `| ${r.build} | ${r.replicas} | ${r.accounts} | ${r.refreshes} | ${r.attemptsPerRefresh.toFixed(2)} | ${r.ownerlessMs === null ? 'n/a (no sharding)' : `${(r.ownerlessMs / 1000).toFixed(1)} s`} | ${r.inFlightAtKill} | ${r.lapsed} |`,
    ),
  ].join('\n');
}
