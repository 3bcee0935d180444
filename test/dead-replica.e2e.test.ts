import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { runCli } from './helpers/cli.js';
import { waitFor } from './helpers/wait.js';
import type { DoctorReport } from '../src/areas/doctor/runner.js';

/**
 * Issue 49, point 4: a replica that stopped beating without a clean shutdown is named by the
 * doctor (run outside the replicas) and counted by `relay_jobs_replicas_dead` until it returns;
 * a clean SIGTERM stop is not a fault.
 */
describe('a dead replica is named', () => {
  let cluster: Cluster;

  beforeAll(async () => {
    cluster = await startCluster({ replicas: ['dr0', 'dr1', 'dr2'] });
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  /** `relay-jobs doctor --json` as an operator runs it: no instance id, the cluster's URLs. */
  async function doctor(): Promise<DoctorReport['checks'][number]> {
    const { RELAY_JOBS_INSTANCE_ID: _id, ...env } = cluster.baseEnv('outside', 0);
    const r = await runCli(['doctor', '--json'], env);
    const report = JSON.parse(r.stdout) as DoctorReport;
    return report.checks.find((c) => c.name === 'dead_replicas')!;
  }
  const gauge = async () => Number(/^relay_jobs_replicas_dead (\d+)/m.exec(await (await fetch(cluster.replica(0).url('/metrics'))).text())?.[1]);

  it('SIGKILL: named by relay-jobs doctor and the gauge within 30 s; a clean stop is not; a restart clears it', async () => {
    expect(await doctor()).toMatchObject({ status: 'ok' });
    await cluster.replica('dr1').kill('SIGKILL');
    // Not alive at once: its liveness session ended with it. Its last beat is made fresh here, so
    // nothing but the liveness key can say so (it read alive for three heartbeats after the kill).
    const sql = await cluster.sql();
    await sql.query(`UPDATE instances SET heartbeat_at = clock_timestamp() WHERE instance_id = 'dr1'`);
    const listed = ((await (await cluster.api('dr0', '/instances')).json()) as { instances: { instance_id: string; alive: boolean; lease_alive: boolean }[] }).instances;
    expect(listed.find((i) => i.instance_id === 'dr1')).toMatchObject({ alive: false, lease_alive: false });
    expect(listed.find((i) => i.instance_id === 'dr0')).toMatchObject({ alive: true, lease_alive: true });
    await cluster.replica('dr2').kill('SIGTERM');
    const named = await waitFor(
      async () => {
        const c = await doctor();
        return c.status === 'fail' && c;
      },
      { what: 'the doctor naming the killed replica', timeoutMs: 30_000, intervalMs: 1000 },
    );
    expect(named.measured).toMatch(/^1 replica\(s\) stopped beating without a clean shutdown: dr1 \(host .+, pid \d+, last beat \d+s ago\)$/);
    await waitFor(async () => (await gauge()) === 1, { what: 'relay_jobs_replicas_dead 1 on dr0', timeoutMs: 30_000 });
    await cluster.replica('dr1').restart();
    await waitFor(async () => (await doctor()).status === 'ok', { what: 'the doctor ok once dr1 beats again', timeoutMs: 30_000, intervalMs: 1000 });
  });
});
