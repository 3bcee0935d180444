import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { runCli } from './helpers/cli.js';
import { waitFor } from './helpers/wait.js';
import type { DoctorReport } from '../src/areas/doctor/runner.js';

/**
 * Issue 49, point 1: two real replicas configured differently, the canary (cluster-scoped) `every 2s`
 * on sd0 (started first: its schedule is adopted) and `every 3s` on sd1 (per-replica environment).
 * - No slot off the cluster's schedule runs: every scheduled canary round of the window is on a
 *   2 s slot and run by sd0 (before issue 49: 3 s slots of sd1 in between, rounds < 1.5 s apart).
 * - sd1 runs none: health there reads `config_drift` naming `every` (3s here, 2s in the cluster); its
 *   skip summary says `config_drift: …`; `relay_jobs_config_drift{job="canary"}` is 1.
 * - `relay-jobs doctor`, run outside the replicas, names the job, the replica and the key (warn).
 * - The replica leaving ends the drift: sd0 stops (SIGTERM), sd1 is then alone, its check adopts its
 *   own schedule and it runs the canary on 3 s slots; the doctor is ok again.
 */
describe('one schedule per job across replicas configured differently', () => {
  let cluster: Cluster;
  let sql: pg.Client;

  beforeAll(async () => {
    cluster = await startCluster({
      replicas: ['sd0'],
      env: { RELAY_JOBS__JOBS__CANARY__ENABLED: 'true', RELAY_JOBS__JOBS__CANARY__EVERY: '2s', RELAY_JOBS__JOBS__CANARY__OFFSET: '0s', RELAY_JOBS__JOBS__CANARY__SLEEP: '100ms' },
    });
    sql = await cluster.sql();
    // sd0 has published and adopted its schedule before sd1 starts (its start-up check precedes its job loops).
    await waitFor(async () => (await sql.query(`SELECT 1 FROM job_state WHERE job_name = 'canary' AND schedule_fingerprint IS NOT NULL`)).rowCount === 1, {
      what: "sd0's canary schedule adopted",
      timeoutMs: 60_000,
    });
    await cluster.addReplica('sd1', { RELAY_JOBS__JOBS__CANARY__EVERY: '3s' }, true);
  });
  afterAll(() => cluster?.stop());

  /** Scheduled canary rounds that started after `since`, oldest first. */
  const rounds = async (since: Date) =>
    (await sql.query(`SELECT instance_id, slot, started_at FROM job_runs WHERE job_name = 'canary' AND trigger = 'schedule' AND started_at > $1 ORDER BY slot`, [since])).rows as Array<{
      instance_id: string;
      slot: Date;
      started_at: Date;
    }>;
  const jobView = async (replica: string) => ((await (await cluster.api(replica, '/jobs')).json()) as { jobs: Array<Record<string, any>> }).jobs.find((j) => j.name === 'canary')!;
  async function doctorCheck(): Promise<DoctorReport['checks'][number]> {
    const { RELAY_JOBS_INSTANCE_ID: _id, ...env } = cluster.baseEnv('outside', 0);
    const r = await runCli(['doctor', '--json'], env);
    expect(r.stdout, `relay-jobs doctor exited ${r.code}: ${r.stderr}`).toMatch(/^\{/);
    return (JSON.parse(r.stdout) as DoctorReport).checks.find((c) => c.name === 'config_drift')!;
  }
  const gauge = async (replica: string) => Number(/^relay_jobs_config_drift\{job="canary"\} (\d+)/m.exec(await (await fetch(cluster.replica(replica).url('/metrics'))).text())?.[1]);
  /**
   * Every round on an `everyMs` slot (offset 0: multiples of the cadence since the epoch), run by `by`;
   * consecutive slots a whole number of cadences apart (one, unless a loaded machine made the loop miss one:
   * `run_late` then runs the latest). A slot of the other schedule (3 s: 3, 9, 15 … are not even) fails.
   */
  function onSchedule(rs: Awaited<ReturnType<typeof rounds>>, everyMs: number, by: string): void {
    for (const [i, r] of rs.entries()) {
      expect(r.instance_id, `round of slot ${r.slot.toISOString()}`).toBe(by);
      expect(r.slot.getTime() % everyMs, `slot ${r.slot.toISOString()} on the ${everyMs}ms schedule`).toBe(0);
      if (i > 0) expect(r.slot.getTime() - rs[i - 1]!.slot.getTime(), `slots ${rs[i - 1]!.slot.toISOString()} → ${r.slot.toISOString()}`).toBeGreaterThanOrEqual(everyMs);
    }
  }

  it('only the adopted schedule runs; the drifting replica reads config_drift with the key; the doctor and the gauge name it; its leaving ends it', async () => {
    // Both replicas up: the window starts once sd1 knows it drifts (its start-up check precedes its loops, so from its first slot).
    const drift = await waitFor(async () => ((await jobView('sd1')).health === 'config_drift' ? jobView('sd1') : false), { what: 'config_drift on sd1', timeoutMs: 60_000 });
    expect(drift.config_drift.keys).toEqual([{ key: 'every', here: '3s', cluster: '2s' }]);
    expect(drift.health_reason).toMatch(/^config_drift: this replica's jobs\.canary differs from the cluster's schedule \(adopted .*\): every 3s here, 2s in the cluster; this replica runs no/);
    expect(await jobView('sd0')).toMatchObject({ config_drift: null, health: expect.not.stringMatching(/config_drift/) });
    const since = new Date((await sql.query(`SELECT clock_timestamp() AS now`)).rows[0].now as Date);
    await waitFor(async () => (await rounds(since)).length >= 7, { what: '7 canary rounds with both replicas up', timeoutMs: 90_000, intervalMs: 500 });
    expect(cluster.replica('sd1').alive).toBe(true);
    onSchedule(await rounds(since), 2000, 'sd0');
    // sd1 let its own slots go as config_drift (its skip summary, written by its heartbeat).
    await waitFor(
      async () =>
        /^config_drift: .*every 3s here, 2s in the cluster/.test(
          (await sql.query(`SELECT last_reason FROM job_skip_counts WHERE job_name = 'canary' AND instance_id = 'sd1'`)).rows[0]?.last_reason ?? '',
        ),
      { what: "sd1's skip summary naming config_drift", timeoutMs: 30_000 },
    );
    await waitFor(async () => (await gauge('sd0')) === 1, { what: 'relay_jobs_config_drift{job="canary"} 1 on sd0', timeoutMs: 30_000 });
    const check = await doctorCheck();
    expect(check.status).toBe('warn');
    expect(check.measured).toMatch(/job canary \(not run there\): replica sd1: every 3s on sd1, 2s in the cluster/);

    // sd0 leaves cleanly: sd1 is the only live replica, adopts its own schedule and runs the canary every 3 s.
    expect(await cluster.replica('sd0').kill('SIGTERM')).toBe(0);
    await waitFor(async () => (await jobView('sd1')).config_drift === null, { what: 'the drift on sd1 to end', timeoutMs: 60_000 });
    const after = new Date((await sql.query(`SELECT clock_timestamp() AS now`)).rows[0].now as Date);
    await waitFor(async () => (await rounds(after)).length >= 3, { what: '3 canary rounds by sd1 alone', timeoutMs: 90_000, intervalMs: 500 });
    onSchedule(await rounds(after), 3000, 'sd1');
    await waitFor(async () => (await gauge('sd1')) === 0, { what: 'relay_jobs_config_drift{job="canary"} 0 on sd1', timeoutMs: 30_000 });
    expect(await doctorCheck()).toMatchObject({ status: 'ok' });
  });
});
