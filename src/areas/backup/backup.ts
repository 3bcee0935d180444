import { jobsFor } from '../../modules/define-job.js';
import type { BackupServices } from './wiring.js';
import { BackupBusy } from './backup-service.js';
import { Schedule } from '../../scheduler/schedule.js';
import { formatDuration } from '../../config/duration.js';

const defineJob = jobsFor<BackupServices>();

/**
 * backup: once per occurrence cluster-wide (the slot claim), a full backup of the database,
 * verified by restoring it when `backup.verify` is on. A manual backup (POST /api/v1/backups)
 * that is still running when the occurrence comes makes the round `no_work`, naming it.
 * A backup that fails or fails verification fails the round, so the job's health says so.
 */
export const backupJob = defineJob({
  name: 'backup',
  description: 'Backs up the whole database (pg_dump or PGlite dump), gzip + SHA-256, to a directory or S3; verifies by restoring; prunes old backups',
  scope: 'cluster',
  defaults: { enabled: true, cron: '0 3 * * *', timeout: '6h', jitter: '0s' },
  needs: ['backup'],
  onStart({ backup }, log) {
    backup.startReaper();
    void backup.loadMetrics().catch((err) => log.warn({ err: (err as Error).message }, 'could not read the last backups for the metrics'));
  },
  onStop: ({ backup }, by) => backup.stop(by),
  // Late when no good backup is younger than 1.5× the cadence (counted from the job's first start when none ever was).
  async health({ backup }, h) {
    const period = new Schedule(h.settings.schedule).periodAt(h.nowMs);
    const good = await backup.lastGoodAt();
    const since = good ?? h.createdAt;
    if (!since || h.nowMs - since.getTime() <= 1.5 * period) return null;
    const age = formatDuration(Math.round((h.nowMs - since.getTime()) / 1000) * 1000);
    const limit = formatDuration(Math.round((1.5 * period) / 1000) * 1000);
    return {
      health: 'late',
      reason: good ? `the newest good backup is ${age} old, over 1.5× the cadence (${limit})` : `no good backup yet, ${age} after the job was first scheduled (limit ${limit})`,
    };
  },
  async run(ctx, { backup }) {
    let started;
    try {
      started = await backup.start(ctx.trigger, { signal: ctx.signal });
    } catch (err) {
      if (err instanceof BackupBusy) return { items: 0, note: `not started: ${err.message}` };
      throw err;
    }
    const rec = await started.done;
    if (rec.state === 'failed' || rec.state === 'verify_failed') throw new Error(`backup ${rec.id} ${rec.state}: ${rec.error ?? rec.verify_error}`);
    return { items: 1, note: `backup ${rec.id} ${rec.state}: ${rec.size_bytes} bytes at ${rec.location}` };
  },
});
