import { statfs } from 'node:fs/promises';
import { formatDuration } from '../../../config/duration.js';
import { combine, fail, ok, warn, type CheckOutcome, type DoctorCheck } from '../check.js';

const mib = (b: number) => `${Math.round(b / 1048576)}MiB`;
const age = (ms: number) => formatDuration(Math.round(ms / 60_000) * 60_000 || 60_000);

/** The server runs autovacuum at all, and counts the dead tuples it needs to see. */
export const autovacuumServer: DoctorCheck = {
  name: 'autovacuum_server',
  group: 'postgres',
  modes: ['cluster'],
  async run({ facts }) {
    const s = await facts.settings(['autovacuum', 'track_counts']);
    if (s.autovacuum === 'off') return fail('autovacuum is off on the server', 'set autovacuum = on in postgresql.conf (the cleanup jobs delete every day; without it the tables only grow)');
    if (s.track_counts === 'off') return fail('track_counts is off: autovacuum cannot see dead tuples', 'set track_counts = on in postgresql.conf');
    return ok('autovacuum = on, track_counts = on', 'keep autovacuum = on in postgresql.conf');
  },
};

/**
 * Autovacuum on and recent on the tables the cleanup jobs churn (usage_logs partitions, job_runs,
 * ops tables, …): off on a table with dead tuples is `fail` (it only grows); a dead-tuple ratio
 * over `jobs.doctor.dead_tuple_ratio` with no vacuum for `jobs.doctor.autovacuum_max_age` warns.
 */
export const autovacuum: DoctorCheck = {
  name: 'autovacuum',
  group: 'postgres',
  modes: ['cluster'],
  async run({ facts, options, nowMs }) {
    const tables = await facts.tableHealth();
    const findings: CheckOutcome[] = [];
    let worstRatio = 0;
    for (const t of tables) {
      const ratio = t.dead / Math.max(1, t.live + t.dead);
      worstRatio = Math.max(worstRatio, ratio);
      const last = [t.lastAutovacuum, t.lastVacuum].reduce<Date | null>((m, x) => (x && (!m || x > m) ? x : m), null);
      if (!t.autovacuumEnabled && t.dead > 0) {
        findings.push(fail(`${t.table}: autovacuum_enabled = off with ${t.dead} dead tuples`, `run ALTER TABLE ${t.table} RESET (autovacuum_enabled), then VACUUM ${t.table}`));
      } else if (!t.autovacuumEnabled) {
        findings.push(warn(`${t.table}: autovacuum_enabled = off`, `run ALTER TABLE ${t.table} RESET (autovacuum_enabled)`));
      } else if (t.dead > 1000 && ratio > options.deadTupleRatio && (!last || nowMs - last.getTime() > options.autovacuumMaxAgeMs)) {
        findings.push(
          warn(
            `${t.table}: ${Math.round(ratio * 100)}% dead tuples (${t.dead}), last vacuum ${last ? `${age(nowMs - last.getTime())} ago` : 'never'}`,
            `VACUUM ${t.table}, and lower its autovacuum_vacuum_scale_factor (ALTER TABLE ${t.table} SET (autovacuum_vacuum_scale_factor = 0.05)); threshold jobs.doctor.dead_tuple_ratio`,
          ),
        );
      }
    }
    return combine(
      findings,
      ok(`${tables.length} churned tables with autovacuum on, worst dead-tuple ratio ${Math.round(worstRatio * 100)}%`, 'keep autovacuum on; VACUUM a table whose dead-tuple ratio stays high'),
    );
  },
};

/** Transaction-ID age of the database against `autovacuum_freeze_max_age`: wraparound stops every write. */
export const xidAge: DoctorCheck = {
  name: 'xid_age',
  group: 'postgres',
  modes: ['cluster'],
  async run({ facts }) {
    const a = await facts.xidAge();
    const freeze = Number((await facts.settings(['autovacuum_freeze_max_age'])).autovacuum_freeze_max_age ?? 200_000_000);
    const measured = `transaction-ID age ${a.toLocaleString('en-US')} (autovacuum_freeze_max_age ${freeze.toLocaleString('en-US')}, wraparound at 2.1 billion)`;
    const fix =
      'VACUUM (FREEZE) the oldest tables (SELECT relname, age(relfrozenxid) FROM pg_class ORDER BY 2 DESC) and find what blocks autovacuum (long transactions, prepared transactions, replication slots)';
    if (a > 1_500_000_000) return fail(measured, fix);
    if (a > 2 * freeze) return warn(measured, fix);
    return ok(measured, fix);
  },
};

/**
 * Disk headroom: embedded, the free share of the data directory's filesystem against
 * `jobs.doctor.disk_min_free_percent`; cluster, the database's growth per day (from the doctor's
 * own size samples) against `jobs.doctor.db_growth_budget_mb_per_day`.
 */
export const diskHeadroom: DoctorCheck = {
  name: 'disk_headroom',
  group: 'postgres',
  modes: ['cluster', 'embedded'],
  async run({ config, facts, options }) {
    if (config.mode === 'embedded') {
      const dir = config.database.data_dir;
      const s = await statfs(dir);
      const free = s.bavail * s.bsize;
      const pct = (100 * s.bavail) / Math.max(1, s.blocks);
      const measured = `${dir}: ${mib(free)} free (${pct.toFixed(1)}%), limit jobs.doctor.disk_min_free_percent ${options.diskMinFreePercent}%`;
      const fix = `free space on the filesystem of ${dir} (RELAY_JOBS_DATA_DIR), or shorten usage.retention / ops.retention_days`;
      if (pct < options.diskMinFreePercent) return fail(measured, fix);
      if (pct < 2 * options.diskMinFreePercent) return warn(measured, fix);
      return ok(measured, fix);
    }
    const size = await facts.sampleSize();
    const growth = await facts.growthPerDay();
    const budget = options.dbGrowthBudgetBytesPerDay;
    const fix = 'shorten usage.retention or ops.retention_days, or raise jobs.doctor.db_growth_budget_mb_per_day after giving the server the disk';
    if (growth === null) return ok(`database ${mib(size)}; growth per day known after an hour of doctor rounds`, fix);
    const measured = `database ${mib(size)}, growing ${mib(growth)}/day over the last week (budget ${mib(budget)}/day)`;
    return growth > budget ? warn(measured, fix) : ok(measured, fix);
  },
};
