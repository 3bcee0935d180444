import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCluster, type Cluster, type Replica } from './helpers/cluster.js';

/**
 * The epoch from outside, as a gateway sees it: three real replicas, ~300 accounts created and
 * changed through the accounts API (disable/enable, schedulable, credentials, expiry through
 * account_expiry), one replica SIGKILLed, Redis stopped and restarted EMPTY. Every live replica is
 * read every ~0.4 s for both buckets; asserted on EVERY answer, whichever its source
 * (`snapshot` or `postgres`), that a replica's epoch for a bucket never decreases. Then the
 * survivors converge to PostgreSQL's answer from the snapshot.
 */
const ACCOUNTS = 300;
const PLATFORMS = ['openai', 'anthropic'];
const TOKEN = 'e2e-admin-token-epoch-chaos-0123';
const CONVERGE_MS = 20_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Answer {
  source: string;
  epoch: number;
  accounts: { id: number }[];
}

describe('scheduler snapshot epoch under chaos: three replicas, a SIGKILL, Redis back empty', () => {
  let cluster: Cluster;
  let client: pg.Client;
  let replicas: Replica[] = [];

  beforeAll(async () => {
    cluster = await startCluster({
      replicas: 0,
      adminToken: TOKEN,
      env: {
        RELAY_JOBS__DATABASE__POOL_SIZE: '4',
        RELAY_JOBS__SHUTDOWN__GRACE: '5s',
        RELAY_JOBS__AUTH__REFRESH_ENABLED: 'false',
        RELAY_JOBS__JOBS__ACCOUNT_EXPIRY__EVERY: '1s',
        RELAY_JOBS__SNAPSHOT__CLAIM_TTL: '5s',
        RELAY_JOBS__SNAPSHOT__REBUILD_CHUNK: '50',
      },
    });
    client = await cluster.sql();
  });
  afterAll(() => cluster?.stop());

  const live = () => replicas.filter((r) => r.proc.proc.exitCode === null && !r.proc.proc.killed);
  async function api(port: number, method: string, path: string, body?: unknown): Promise<Response> {
    return fetch(`http://127.0.0.1:${port}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
  }
  async function read(port: number, platform: string): Promise<Answer> {
    const res = await api(port, 'GET', `/scheduler/accounts?platform=${platform}`);
    if (res.status !== 200) throw new Error(`read answered ${res.status}`);
    return (await res.json()) as Answer;
  }
  const truth = async (platform: string) =>
    (
      await client.query(
        `SELECT id FROM accounts WHERE platform = $1 AND sched_group IS NULL AND schedulable AND scheduler_routing_status(status, status_before_refresh) = 'active'
         AND (temp_unschedulable_until IS NULL OR temp_unschedulable_until <= now()) ORDER BY priority, id`,
        [platform],
      )
    ).rows.map((r) => Number(r.id));

  it('no replica ever answers a bucket at an older epoch than it answered before, from either source', async () => {
    for (let i = 0; i < 3; i++) await cluster.addReplica(`c${i}`);
    replicas = cluster.replicas;
    const tStart = Date.now();
    await Promise.all(replicas.map((r) => r.proc.waitForLine(/relay-jobs started/)));
    const phases: Record<string, number> = { start: Date.now() - tStart };

    // The gateway's view: every live replica, both buckets, every ~0.4 s; every answer checked.
    const high = new Map<string, number>();
    const regressions: string[] = [];
    const sources: Record<string, number> = {};
    const errors = new Map<string, number>();
    let reads = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const round = Date.now();
        await Promise.all(
          live().map(async (r) => {
            for (const p of PLATFORMS) {
              const a = await read(r.port, p).catch((err: Error) => {
                if (!r.proc.proc.killed) errors.set(err.message, (errors.get(err.message) ?? 0) + 1);
                return null;
              });
              if (!a) continue;
              reads++;
              sources[a.source] = (sources[a.source] ?? 0) + 1;
              const k = `${r.proc.name} ${p}`;
              const before = high.get(k) ?? 0;
              if (a.epoch < before) regressions.push(`${k}: ${a.source} answer at epoch ${a.epoch} after ${before}`);
              high.set(k, Math.max(before, a.epoch));
            }
          }),
        );
        await sleep(Math.max(0, 400 - (Date.now() - round)));
      }
    })();

    // Accounts created through the API, spread over the replicas, 10 at a time.
    const far = new Date(Date.now() + 30 * 86_400_000).toISOString();
    const ids: number[] = [];
    for (let i = 0; i < ACCOUNTS; i += 10) {
      const made = await Promise.all(
        Array.from({ length: Math.min(10, ACCOUNTS - i) }, async (_, j) => {
          const n = i + j;
          const r = replicas[n % 3]!;
          const res = await api(r.port, 'POST', '/accounts', {
            platform: PLATFORMS[n % 2],
            name: `chaos-${n}`,
            credentials: { access_token: `chaos-secret-${n}`, expires_at: far },
          });
          if (res.status !== 201 && res.status !== 200)
            throw new Error(
              `create on ${r.proc.name} answered ${res.status}: ${await res.text()}; its errors:\n${r.proc.lines
                .filter((l) => /"level":"(error|fatal|warn)"/.test(l))
                .slice(-5)
                .join('\n')}`,
            );
          return ((await res.json()) as { id: number }).id;
        }),
      );
      ids.push(...made);
    }

    phases.create = Date.now() - tStart - phases.start!;
    // Changes through the API, with the faults at fixed points.
    const pick = () => ids[Math.floor(Math.random() * ids.length)]!;
    const changes: ((port: number, id: number) => Promise<Response>)[] = [
      (port, id) => api(port, 'POST', `/accounts/${id}/disable`),
      (port, id) => api(port, 'POST', `/accounts/${id}/enable`),
      (port, id) => api(port, 'PATCH', `/accounts/${id}`, { schedulable: Math.random() < 0.5 }),
      (port, id) =>
        api(port, 'PATCH', `/accounts/${id}`, {
          credentials: { access_token: `rotated-${id}-${Date.now()}`, expires_at: new Date(Date.now() + 86_400_000 + Math.floor(Math.random() * 1e6)).toISOString() },
        }),
      (port, id) => api(port, 'PATCH', `/accounts/${id}`, { auto_pause_on_expired: true, expires_at: new Date(Date.now() + 300).toISOString() }),
    ];
    const victim = replicas[1]!;
    const done = { kill: false, redisDown: false, redisUp: false };
    const t0 = Date.now();
    let made = 0;
    while (Date.now() - t0 < 12_000) {
      const at = Date.now() - t0;
      if (at > 2500 && !done.kill) {
        done.kill = true;
        victim.proc.proc.kill('SIGKILL');
        await victim.proc.exited;
      }
      if (at > 5000 && !done.redisDown) {
        done.redisDown = true;
        await cluster.redis!.stop();
      }
      if (at > 7500 && !done.redisUp) {
        done.redisUp = true;
        await cluster.redis!.start(); // the same port, no data
      }
      const targets = live();
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          const res = await changes[Math.floor(Math.random() * changes.length)]!(targets[Math.floor(Math.random() * targets.length)]!.port, pick()).catch(() => null);
          if (res) await res.arrayBuffer();
        }),
      );
      made += 4;
      await sleep(50);
    }
    const lastChange = Date.now();
    expect(Object.values(done).every(Boolean)).toBe(true);

    // The survivors converge to PostgreSQL, from the snapshot (the watcher keeps checking meanwhile).
    const survivors = replicas.filter((r) => r !== victim);
    for (;;) {
      let ok = true;
      for (const r of survivors)
        for (const p of PLATFORMS) {
          const before = await truth(p);
          const a = await read(r.port, p).catch(() => null);
          const after = await truth(p);
          const got = JSON.stringify(a?.accounts.map((x) => x.id));
          if (!a || a.source !== 'snapshot' || (got !== JSON.stringify(before) && got !== JSON.stringify(after))) ok = false;
        }
      if (ok) break;
      if (Date.now() - lastChange > CONVERGE_MS) throw new Error(`no convergence within ${CONVERGE_MS} ms of the last change`);
      await sleep(200);
    }
    await sleep(1000); // a few more rounds of reads after convergence
    watching = false;
    await watcher;

    console.log(
      `scheduler epoch chaos: ${ACCOUNTS} accounts, ${made} changes, ${reads} answers checked ${JSON.stringify(sources)}, converged ${Date.now() - lastChange - 1000} ms after the last change; phases ${JSON.stringify(phases)} ms; read errors ${JSON.stringify([...errors])}`,
    );
    expect(regressions).toEqual([]);
    expect(sources.snapshot ?? 0).toBeGreaterThan(0);
    expect(sources.postgres ?? 0).toBeGreaterThan(0); // Redis down and back empty: some answers came from PostgreSQL
    expect(reads).toBeGreaterThan(50);

    for (const r of survivors) r.proc.proc.kill('SIGTERM');
    expect(await Promise.all(survivors.map((r) => r.proc.exited))).toEqual([0, 0]);
  }, 90_000);
});
