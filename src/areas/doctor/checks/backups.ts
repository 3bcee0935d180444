import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { formatDuration } from '../../../config/duration.js';
import { Schedule } from '../../../scheduler/schedule.js';
import { Backups } from '../../backup/index.js';
import { databaseCreator } from '../../../store/db-inventory.js';
import { fail, ok, warn, type DoctorCheck, type DoctorContext } from '../check.js';

const age = (ms: number) => formatDuration(Math.max(60_000, Math.round(ms / 60_000) * 60_000));

function backupJob(ctx: DoctorContext) {
  return ctx.jobs.find((j) => j.name === 'backup' && j.settings.enabled);
}

/** The newest good backup (verified, or completed where verification is off) against 1.5× the backup job's cadence. */
export const backupAge: DoctorCheck = {
  name: 'backup_age',
  group: 'backups',
  modes: ['cluster', 'embedded'],
  async run(ctx) {
    const job = backupJob(ctx);
    if (!job) return warn('the backup job is disabled', 'set jobs.backup.enabled: true (or back the database up another way and accept this warning)');
    const cadence = new Schedule(job.settings.schedule).periodAt(ctx.nowMs);
    const good = await new Backups(ctx.db).lastGood();
    const newest = good.reduce<Date | null>((m, g) => (!m || g.at > m ? g.at : m), null);
    const fix = 'look at the backup rounds (relay-jobs backups, GET /api/v1/jobs/backup) and run relay-jobs backup --wait';
    if (!newest) return warn(`no good backup yet (cadence ${formatDuration(cadence)})`, fix);
    const a = ctx.nowMs - newest.getTime();
    const measured = `newest good backup ${age(a)} old, cadence ${formatDuration(cadence)}`;
    if (a > 3 * cadence) return fail(measured, fix);
    if (a > 1.5 * cadence) return warn(measured, fix);
    return ok(measured, fix);
  },
};

/** A restore drill: a backup restored and checked (verification restores into a scratch database), no older than `jobs.doctor.restore_drill_max_age`. */
export const restoreDrill: DoctorCheck = {
  name: 'restore_drill',
  group: 'backups',
  modes: ['cluster', 'embedded'],
  async run(ctx) {
    const max = ctx.options.restoreDrillMaxAgeMs;
    if (ctx.config.mode === 'cluster' && (ctx.config.backup.verify ?? true) && backupJob(ctx)) {
      // Verification creates its scratch database as the service's role: without CREATEDB every backup ends verify_failed.
      const { role, can } = await databaseCreator(ctx.db);
      if (!can)
        return fail(
          `backup.verify is on, but the service's role ${role} may not create databases: every backup's verification fails (verify_failed) and no drill is recorded`,
          `as a superuser: ALTER ROLE ${role} CREATEDB; or set backup.verify: false and drill by hand with relay-jobs restore into a scratch database`,
        );
    }
    const finished = await new Backups(ctx.db).finished();
    const drilled = finished.map((b) => (b.verified_at ? Date.parse(b.verified_at) : 0)).reduce((m, t) => Math.max(m, t), 0);
    if (ctx.config.mode !== 'cluster') {
      // Embedded: nothing can restore a backup for the doctor to see (backup.verify needs a scratch
      // PostgreSQL and is refused; a restore by id needs DATABASE_URL), so a warning here could never
      // clear and every healthy install would exit 1. The check says so and gives the drill that
      // works here: the backup's file restored into a new data directory, and a service on it.
      const good = finished.filter((b) => b.state === 'completed' || b.state === 'verified');
      const file = good[0]?.location || '<backup.dir>/<file>.dump.gz';
      return ok(
        `embedded mode: backups are not restored automatically (backup.verify needs cluster mode); ${good.length} good backup(s) to drill by hand`,
        `drill by hand: relay-jobs restore ${file} --target ./restore-drill (a new data directory), then RELAY_JOBS_DATA_DIR=./restore-drill RELAY_JOBS_HTTP_PORT=8089 relay-jobs start and check its /readyz and jobs`,
      );
    }
    const fix = 'leave backup.verify on (each backup is restored into a scratch database), or run relay-jobs restore into a scratch database; limit jobs.doctor.restore_drill_max_age';
    if (!drilled) return warn(`no backup has been restored and checked (limit ${formatDuration(max)})`, fix);
    const a = ctx.nowMs - drilled;
    const measured = `last restore drill (verified backup) ${age(a)} ago, limit ${formatDuration(max)}`;
    return a > max ? warn(measured, fix) : ok(measured, fix);
  },
};

/** Backup files hold every account's sealed credentials and every user's data: not readable by others. */
export const backupPermissions: DoctorCheck = {
  name: 'backup_permissions',
  group: 'backups',
  modes: ['cluster', 'embedded'],
  async run({ backupDir }) {
    if (!backupDir) return ok('backups go to S3 (backup.storage: s3): bucket policy is the provider’s', 'keep the bucket private');
    let names: string[];
    try {
      names = await readdir(backupDir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return ok(`${backupDir} does not exist yet (no backup written)`, 'nothing to do');
      throw err;
    }
    const dirMode = (await stat(backupDir)).mode & 0o777;
    const open: string[] = [];
    for (const n of names) {
      const s = await stat(join(backupDir, n)).catch(() => null);
      if (s?.isFile() && s.mode & 0o004) open.push(`${n} (${(s.mode & 0o777).toString(8)})`);
    }
    const fix = `chmod 600 the files and chmod 700 ${backupDir} (backup.dir), and run the service with umask 077`;
    if (dirMode & 0o002) return fail(`${backupDir} is world-writable (${dirMode.toString(8)})`, fix);
    if (open.length) return fail(`${open.length} world-readable backup file(s) in ${backupDir}: ${open.slice(0, 5).join(', ')}`, fix);
    return ok(`${names.length} file(s) in ${backupDir}, none readable by others (directory ${dirMode.toString(8)})`, fix);
  },
};
