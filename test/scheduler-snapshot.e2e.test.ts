import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCluster, type Cluster, type Replica } from './helpers/cluster.js';
import { TEST_MASTER_KEY } from './helpers/services.js';
import type { PgDb } from '../src/store/pg-db.js';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { SecretBox } from '../src/store/secret-box.js';

/**
 * The scheduler snapshot under faults, with real processes: three replicas over 2,000 accounts
 * while a stream of changes runs (disable/enable, schedulable flips, 401 cooldowns, account
 * expiry through account_expiry, a proxy expiring to its fallback and renewed through
 * proxy_expiry); one replica is SIGKILLed, Redis is stopped and restarted EMPTY.
 * Asserted: every surviving replica's read API converges to exactly what PostgreSQL says, served
 * from the snapshot, within CONVERGE_MS of the last change; no replica ever serves a bucket at an
 * older epoch than it served before; the outbox ends empty.
 */
const ACCOUNTS = 2000;
const PLATFORMS = ['openai', 'claude', 'gemini'];
const GROUPS = ['', 'vip'];
const TOKEN = 'e2e-admin-token-snapshot-0123';
/** The stated bound: poll (1 s) + claim expiry of a killed replica (5 s here) + a rebuild, with room for a loaded CI machine. */
const CONVERGE_MS = 20_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Answer {
  source: string;
  epoch: number;
  accounts: { id: number }[];
}

describe('scheduler snapshot: three real replicas, a SIGKILL and a Redis that comes back empty', () => {
  let cluster: Cluster;
  let client: pg.Client;
  let writers: pg.Pool;
  let replicas: Replica[] = [];

  /** 2,000 accounts over three platforms, two proxies (p1 falls back to p2), in the migrated database. */
  async function seedAccounts(seed: PgDb): Promise<void> {
    const sealed = new Accounts(seed, SecretBox.fromBase64(TEST_MASTER_KEY)).seal({ access_token: 'e2e-secret-token' });
    await seed.query(
      `INSERT INTO proxies (id, name, url_sealed, url_display, fallback_mode, backup_proxy_id) VALUES (1, 'p1', 'x', 'http://p1', 'proxy', NULL), (2, 'p2', 'x', 'http://p2', 'none', NULL)`,
    );
    await seed.query(`UPDATE proxies SET backup_proxy_id = 2 WHERE id = 1`);
    await seed.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at, proxy_id, sched_group, priority)
       SELECT ($2::text[])[1 + g % 3], 'acc-' || g, $1, false, now() + interval '30 days', CASE WHEN g % 4 = 0 THEN 1 WHEN g % 4 = 1 THEN 2 END,
              CASE WHEN g % 10 = 0 THEN 'vip' END, g % 7
       FROM generate_series(1, ${ACCOUNTS}) g`,
      [sealed, PLATFORMS],
    );
  }

  beforeAll(async () => {
    cluster = await startCluster({
      replicas: 0,
      adminToken: TOKEN,
      seed: seedAccounts,
      env: {
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__SHUTDOWN__GRACE: '5s',
        RELAY_JOBS__AUTH__REFRESH_ENABLED: 'false',
        RELAY_JOBS__JOBS__ACCOUNT_EXPIRY__EVERY: '1s',
        RELAY_JOBS__JOBS__PROXY_EXPIRY__EVERY: '1s',
        RELAY_JOBS__SNAPSHOT__CLAIM_TTL: '5s',
      },
    });
    client = await cluster.sql();
    writers = new pg.Pool({ connectionString: cluster.databaseUrl, max: 5 });
  });
  afterAll(async () => {
    await writers?.end();
    await cluster?.stop();
  });

  const truth = async (platform: string, group: string) =>
    (
      await client.query(
        `SELECT id FROM accounts WHERE platform = $1 AND COALESCE(sched_group, '') = $2 AND schedulable AND scheduler_routing_status(status, status_before_refresh) = 'active'
         AND (temp_unschedulable_until IS NULL OR temp_unschedulable_until <= now()) ORDER BY priority, id`,
        [platform, group],
      )
    ).rows.map((r) => Number(r.id));

  async function read(port: number, platform: string, group: string): Promise<Answer> {
    const res = await fetch(`http://127.0.0.1:${port}/api/v1/scheduler/accounts?platform=${platform}${group ? `&group=${group}` : ''}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    if (res.status !== 200) throw new Error(`read answered ${res.status}`);
    return (await res.json()) as Answer;
  }

  it('converges to PostgreSQL after the last change and after Redis returns empty; epochs never go back; the outbox ends empty', async () => {
    for (let i = 0; i < 3; i++) await cluster.addReplica(`s${i}`);
    replicas = cluster.replicas;
    await Promise.all(replicas.map((r) => r.proc.waitForLine(/relay-jobs started/)));

    // Watch every replica's answers throughout: a snapshot answer never has an older epoch than the last one.
    const lastEpoch = new Map<string, number>();
    const regressions: string[] = [];
    let snapshotAnswers = 0;
    const sources: Record<string, number> = {};
    const errors = new Set<string>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        for (const r of replicas) {
          if (r.proc.proc.exitCode !== null || r.proc.proc.killed) continue;
          for (const p of PLATFORMS)
            for (const g of GROUPS) {
              const a = await read(r.port, p, g).catch((err: Error) => {
                errors.add(`${r.proc.name} ${err.message} ${String((err as { cause?: { code?: string } }).cause?.code)} exit=${r.proc.proc.exitCode}`);
                return null;
              });
              sources[a?.source ?? 'error'] = (sources[a?.source ?? 'error'] ?? 0) + 1;
              if (!a || a.source !== 'snapshot') continue;
              snapshotAnswers++;
              const k = `${r.proc.name} ${p}/${g}`;
              if (a.epoch < (lastEpoch.get(k) ?? 0)) regressions.push(`${k}: epoch ${a.epoch} after ${lastEpoch.get(k)}`);
              lastEpoch.set(k, Math.max(a.epoch, lastEpoch.get(k) ?? 0));
            }
        }
        await sleep(100);
      }
    })();

    // The stream of changes, ~12 s, with the faults at fixed points in it.
    const rnd = (n: number) => 1 + Math.floor(Math.random() * n);
    const changes = [
      (id: number) => writers.query(`UPDATE accounts SET status = CASE WHEN status = 'disabled' THEN 'active' ELSE 'disabled' END WHERE id = $1`, [id]),
      (id: number) => writers.query(`UPDATE accounts SET schedulable = NOT schedulable WHERE id = $1 AND NOT auto_pause_on_expired`, [id]),
      (id: number) =>
        writers.query(
          `UPDATE accounts SET temp_unschedulable_until = GREATEST(COALESCE(temp_unschedulable_until, '-infinity'), now() + interval '2 seconds'), temp_unschedulable_reason = 'oauth_401' WHERE id = $1`,
          [id],
        ),
      (id: number) => writers.query(`UPDATE accounts SET auto_pause_on_expired = true, expires_at = now() + interval '300 milliseconds' WHERE id = $1`, [id]),
      (id: number) => writers.query(`UPDATE accounts SET priority = $2 WHERE id = $1`, [id, rnd(9)]),
    ];
    const t0 = Date.now();
    let made = 0;
    const victim = replicas[1]!;
    const done = { kill: false, proxyOut: false, redisDown: false, redisUp: false, proxyBack: false };
    while (Date.now() - t0 < 12_000) {
      const at = Date.now() - t0;
      if (at > 1500 && !done.proxyOut) {
        done.proxyOut = true;
        await client.query(`UPDATE proxies SET expires_at = now() WHERE id = 1`);
      }
      if (at > 3000 && !done.kill) {
        done.kill = true;
        victim.proc.proc.kill('SIGKILL');
        await victim.proc.exited;
      }
      if (at > 5000 && !done.redisDown) {
        done.redisDown = true;
        await cluster.redis!.stop();
      }
      if (at > 8000 && !done.redisUp) {
        done.redisUp = true;
        await cluster.redis!.start(); // the same port, no data: the snapshot is gone
      }
      if (at > 9500 && !done.proxyBack) {
        done.proxyBack = true;
        await client.query(`UPDATE proxies SET expires_at = now() + interval '1 hour' WHERE id = 1`);
      }
      await Promise.all(Array.from({ length: 5 }, () => changes[rnd(changes.length) - 1]!(rnd(ACCOUNTS))));
      made += 5;
      await sleep(40);
    }
    const lastChange = Date.now();
    expect(Object.values(done).every(Boolean)).toBe(true);

    // Converged: each survivor serves exactly PostgreSQL's answer from the snapshot, for every bucket.
    const survivors = replicas.filter((r) => r !== victim);
    let convergedAt: number;
    for (;;) {
      let ok = true;
      for (const r of survivors)
        for (const p of PLATFORMS)
          for (const g of GROUPS) {
            const before = await truth(p, g);
            const a = await read(r.port, p, g).catch(() => null);
            const after = await truth(p, g);
            const got = a?.accounts.map((x) => x.id);
            if (!a || a.source !== 'snapshot' || (JSON.stringify(got) !== JSON.stringify(before) && JSON.stringify(got) !== JSON.stringify(after))) ok = false;
          }
      if (ok) {
        convergedAt = Date.now();
        break;
      }
      if (Date.now() - lastChange > CONVERGE_MS) throw new Error(`no convergence within ${CONVERGE_MS} ms of the last change`);
      await sleep(200);
    }
    // Proxy expiry and its restore went through proxy_expiry, and the accounts came back.
    expect((await client.query(`SELECT count(*) AS n FROM accounts WHERE proxy_fallback_origin_id IS NOT NULL`)).rows[0].n).toBe('0');

    // The outbox ends empty (events consumed and deleted, rebuild requests done).
    const outboxDeadline = Date.now() + CONVERGE_MS;
    let left = -1;
    while (Date.now() < outboxDeadline && left !== 0) {
      left = Number((await client.query(`SELECT count(*) AS n FROM scheduler_outbox`)).rows[0].n);
      if (left) await sleep(200);
    }
    watching = false;
    await watcher;
    expect(left, 'rows left in scheduler_outbox').toBe(0);
    expect(regressions).toEqual([]);
    expect(snapshotAnswers).toBeGreaterThan(0);
    const rebuilds = (await client.query(`SELECT last_rebuild_reason FROM scheduler_snapshot_state`)).rows[0].last_rebuild_reason;
    console.log(
      `scheduler snapshot e2e: ${made} changes, converged ${convergedAt - lastChange} ms after the last change; last rebuild: ${rebuilds}; answers watched by source ${JSON.stringify(sources)} ${[...errors].join('; ')}`,
    );

    for (const r of survivors) r.proc.proc.kill('SIGTERM');
    expect(await Promise.all(survivors.map((r) => r.proc.exited))).toEqual([0, 0]);
  }, 120_000);
});
