import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { hasPostgresServer } from './helpers/private-postgres.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * PostgreSQL stops (as a crash: `pg_ctl stop -m immediate`) for eight seconds and starts again
 * under a steady stream of usage events: the pool recovers without a process restart, `/readyz`
 * is 503 meanwhile and 200 after, and every event the service acknowledged (2xx: committed) is
 * stored; requests made during the outage wait and are stored, or fail and were never acknowledged.
 */
describe.runIf(hasPostgresServer())('a PostgreSQL restart under load', () => {
  let cluster: Cluster;
  let replica: ServiceProcess;

  beforeAll(async () => {
    // A PostgreSQL server of its own (cluster.postgres), stopped and started by the test; the replica migrates it.
    cluster = await startCluster({
      replicas: ['pgr-1'],
      database: 'private',
      migrate: false,
      waitStarted: false,
      env: {
        // The defaults for these, not the harness's.
        RELAY_JOBS__DATABASE__POOL_SIZE: undefined,
        RELAY_JOBS__REDIS__COMMAND_TIMEOUT: undefined,
        RELAY_JOBS__JOBS__SESSION_CLEANUP__ENABLED: undefined,
        RELAY_JOBS__DATABASE__CONNECT_TIMEOUT: '1s',
        RELAY_JOBS__SHUTDOWN__GRACE: '10s',
      },
    });
  });
  afterAll(() => cluster?.stop());

  it('readiness flips and recovers; no acknowledged usage event is lost', async () => {
    const server = cluster.postgres!;
    const ADMIN = cluster.adminToken;
    replica = cluster.replica(0).proc;
    await replica.waitForLine(/relay-jobs started/);
    const base = cluster.replica(0).url();
    const ready = async () => (await fetch(`${base}/readyz`).catch(() => null))?.status ?? 0;

    const acknowledged: string[] = [];
    let sent = 0;
    let stop = false;
    const inflight: Promise<void>[] = [];
    const pump = (async () => {
      while (!stop) {
        const id = `pgr-${++sent}`;
        inflight.push(
          fetch(`${base}/api/v1/usage`, {
            method: 'POST',
            headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
            body: JSON.stringify({ events: [{ request_id: id, user_id: 'u1', platform: 'openai', model: 'm', input_tokens: 1, output_tokens: 1, cost: '0.01' }] }),
            signal: AbortSignal.timeout(60_000),
          })
            .then((r) => {
              if (r.ok) acknowledged.push(id);
            })
            .catch(() => undefined),
        );
        await sleep(50); // 20 events a second
      }
    })();

    await sleep(2000);
    expect(await ready()).toBe(200);
    await server.stopServer('immediate');
    const readiness: number[] = [];
    for (let i = 0; i < 16; i++) {
      readiness.push(await ready());
      await sleep(500);
    }
    expect(readiness.filter((s) => s === 503).length, `readiness during the outage: ${readiness.join(',')}`).toBeGreaterThanOrEqual(10);
    await server.startServer();
    const back = Date.now();
    for (;;) {
      if ((await ready()) === 200) break;
      expect(Date.now() - back, 'ready again after PostgreSQL came back').toBeLessThan(30_000);
      await sleep(100);
    }
    await sleep(2000);
    stop = true;
    await pump;
    await Promise.all(inflight);
    expect(acknowledged.length).toBeGreaterThan(60);

    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      const { rows } = await client.query<{ request_id: string }>(`SELECT request_id FROM usage_logs`);
      const stored = new Set(rows.map((r) => r.request_id));
      expect(
        acknowledged.filter((id) => !stored.has(id)),
        'acknowledged events missing from usage_logs',
      ).toEqual([]);
    } finally {
      await client.end();
    }
    replica.proc.kill('SIGTERM');
    expect(await replica.exited).toBe(0);
  }, 150_000);
});
