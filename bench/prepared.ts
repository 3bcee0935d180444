/**
 * `database.prepared_statements` (`BENCH_ONLY=prepared`): a replica's steady statements with and
 * without server-side prepared statements, on one connection each, alternated. The work is what an
 * idle replica repeats most: the schedule check (`ClusterSchedules.publish`, 20 jobs, 3 replicas
 * voting; nothing changes between checks, so since 6-Dec-2026 its one read-only statement, before
 * that 5 statements in a transaction) and the heartbeat's registry update. The figures are the
 * server's CPU for that connection (its backend's /proc utime+stime: PostgreSQL on this machine)
 * and the wall time per check; the baseline is the same work unprepared, in the same run.
 */
import { readFileSync } from 'node:fs';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { ClusterSchedules, type ScheduleVote } from '../src/coordination/cluster-schedules.js';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { SlotClaims } from '../src/coordination/slot-claim.js';
import { systemClock } from '../src/time/clock.js';
import { freshDatabase } from '../test/helpers/services.js';

const JOBS = Array.from({ length: 20 }, (_, i) => `job_${i}`);
const VOTES: ScheduleVote[] = JOBS.map((job) => ({ job, fingerprint: `fp-${job}`, spec: { enabled: true, schedule: 'every 1m' } as never }));
const TICKS = Number(process.env.CLK_TCK ?? 100);

/** CPU seconds of one server process (Linux /proc; the server must run on this machine). */
function backendCpuS(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS;
}

export interface PreparedRow {
  mode: 'unprepared (baseline)' | 'prepared';
  checks: number;
  serverMsPerCheck: number;
  wallMsPerCheck: number;
}

export async function benchPrepared(checks = Number(process.env.BENCH_PREPARED_CHECKS ?? 2000), rounds = 3): Promise<PreparedRow[]> {
  const fresh = await freshDatabase();
  try {
    const setup = await PgDb.connect({ url: fresh.url, poolSize: 1, connectTimeoutMs: 5000 });
    await migrate(setup);
    await new SlotClaims(setup, 'bench').ensureJobs(JOBS);
    for (const id of ['r1', 'r2', 'r3']) {
      const registry = new InstanceRegistry(setup, systemClock, { instanceId: id, env: 'bench', mode: 'cluster', httpPort: null, version: 'b', heartbeatMs: 1000 });
      await registry.register();
      await new ClusterSchedules(setup, id, 3000).publish(VOTES);
    }
    await setup.close();
    const totals = new Map<PreparedRow['mode'], { cpu: number; wall: number; n: number }>();
    for (let round = 0; round < rounds; round++) {
      for (const prepared of [false, true]) {
        const db = await PgDb.connect({ url: fresh.url, poolSize: 1, connectTimeoutMs: 5000, preparedStatements: prepared });
        const id = `b${round}-${prepared ? 'p' : 'u'}`; // stopped after its turn: never a live voter of a later one
        const registry = new InstanceRegistry(db, systemClock, { instanceId: id, env: 'bench', mode: 'cluster', httpPort: null, version: 'b', heartbeatMs: 1000 });
        await registry.register();
        const schedules = new ClusterSchedules(db, id, 3000);
        const pid = (await db.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
        for (let i = 0; i < 50; i++) await schedules.publish(VOTES); // warm: the first five runs plan per run either way
        const cpu0 = backendCpuS(pid);
        const t0 = performance.now();
        for (let i = 0; i < checks; i++) {
          await schedules.publish(VOTES);
          await registry.beat(0);
        }
        const wall = performance.now() - t0;
        const cpu = backendCpuS(pid) - cpu0;
        await registry.markStopped();
        await db.close();
        const mode = prepared ? 'prepared' : 'unprepared (baseline)';
        const t = totals.get(mode) ?? { cpu: 0, wall: 0, n: 0 };
        totals.set(mode, { cpu: t.cpu + cpu, wall: t.wall + wall, n: t.n + checks });
      }
    }
    return [...totals].map(([mode, t]) => ({ mode, checks: t.n, serverMsPerCheck: (t.cpu * 1000) / t.n, wallMsPerCheck: t.wall / t.n }));
  } finally {
    await fresh.drop();
  }
}

export function preparedTable(rows: PreparedRow[]): string {
  const base = rows.find((r) => r.mode !== 'prepared')!;
  const lines = ['| statements | checks | server CPU ms per check | wall ms per check |', '|---|---|---|---|'];
  for (const r of rows) lines.push(`| ${r.mode} | ${r.checks} | ${r.serverMsPerCheck.toFixed(3)} | ${r.wallMsPerCheck.toFixed(3)} |`);
  const p = rows.find((r) => r.mode === 'prepared')!;
  lines.push('', `ratio (server CPU, prepared / unprepared): ${(p.serverMsPerCheck / base.serverMsPerCheck).toFixed(2)}x; wall: ${(p.wallMsPerCheck / base.wallMsPerCheck).toFixed(2)}x`);
  return lines.join('\n');
}
