import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { runCli } from './helpers/cli.js';
import type { DoctorReport } from '../src/areas/doctor/runner.js';

/**
 * Issue 49, point 4: the doctor's connection budget counts every connection on the server, grouped
 * by application name, the gateway's pool included. A PostgreSQL server of the test's own
 * (max_connections 100, 3 reserved: 97 for the pools), one replica (pool 4), and a "gateway" pool
 * that grows from 10 to 85 connections.
 */
describe('connection_budget counts the whole server', () => {
  let cluster: Cluster;
  const gateway: pg.Client[] = [];

  beforeAll(async () => {
    cluster = await startCluster({ replicas: ['cb0'], database: 'private' });
  });
  afterAll(async () => {
    await Promise.all(gateway.map((c) => c.end().catch(() => undefined)));
    await cluster?.stop();
  });

  /** The gateway's pool: `n` connections open, named as a gateway names its pool. */
  async function gatewayPool(n: number): Promise<void> {
    const opened = await Promise.all(
      Array.from({ length: n - gateway.length }, async () => {
        const c = new pg.Client({ connectionString: cluster.databaseUrl, application_name: 'sub2api-gateway' });
        await c.connect();
        return c;
      }),
    );
    gateway.push(...opened);
  }

  /** `relay-jobs doctor --json` as an operator runs it, outside the replicas. */
  async function budget(): Promise<DoctorReport['checks'][number]> {
    const { RELAY_JOBS_INSTANCE_ID: _id, ...env } = cluster.baseEnv('outside', 0);
    const r = await runCli(['doctor', '--json'], env);
    return (JSON.parse(r.stdout) as DoctorReport).checks.find((c) => c.name === 'connection_budget')!;
  }

  it("names the gateway's pool beside the replicas' pools, and warns once together they near max_connections", async () => {
    await gatewayPool(10);
    const small = await budget();
    // The replica's own connections (relay-jobs/cb0) are its pool's, counted once as 4 + 2; the command's own not at all.
    expect(small.measured).toMatch(
      /^1 live replica\(s\) can open 6 connections \(pools \+ liveness session \+ backup\), the server allows 97 .*; other client connections open now by application_name: sub2api-gateway 10; together 16 of 97$/,
    );
    expect(small.status).toBe('ok');

    await gatewayPool(85);
    const big = await budget();
    expect(big.measured).toMatch(/other client connections open now by application_name: sub2api-gateway 85; together 91 of 97$/);
    expect(big.status).toBe('warn');
    expect(big.fix).toContain("shrink sub2api-gateway's pool (85 open)");
  });
});
