import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { ServiceProcess } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { hasPostgresServer } from './helpers/private-postgres.js';
import { pace, waitFor } from './helpers/wait.js';

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
        await pace(50); // 20 events a second
      }
    })();
    /** Acknowledged events numbered from `first` on (sent after that point). */
    const ackedFrom = (first: number) => acknowledged.filter((id) => Number(id.slice('pgr-'.length)) >= first).length;

    // Before the outage: the stream is acknowledged (40 events, two seconds of it).
    await waitFor(() => acknowledged.length >= 40, { what: () => `40 events acknowledged before the outage (${acknowledged.length})` });
    expect(await ready()).toBe(200);
    await server.stopServer('immediate');
    const readiness: number[] = [];
    // The outage: sixteen readiness samples, two a second (PostgreSQL stays down those eight seconds).
    for (let i = 0; i < 16; i++) {
      readiness.push(await ready());
      await pace(500);
    }
    expect(readiness.filter((s) => s === 503).length, `readiness during the outage: ${readiness.join(',')}`).toBeGreaterThanOrEqual(10);
    await server.startServer();
    await waitFor(async () => (await ready()) === 200, { what: 'ready again after PostgreSQL came back', timeoutMs: 30_000, intervalMs: 100 });
    // After it: events sent since readiness came back are acknowledged again (40, two seconds of the stream).
    const firstAfter = sent + 1;
    await waitFor(() => ackedFrom(firstAfter) >= 40, { what: () => `40 events sent after the recovery acknowledged (${ackedFrom(firstAfter)})` });
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
