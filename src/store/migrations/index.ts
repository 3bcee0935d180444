import { sql as core } from './001_core.js';
import { sql as accounts } from './002_accounts.js';
import { sql as usage } from './003_usage.js';
import { sql as billing } from './004_billing.js';
import { sql as recomputeTasks } from './013_recompute_tasks.js';
import { sql as ops } from './006_ops.js';
import { sql as schedulerSnapshot } from './007_scheduler_snapshot.js';
import { sql as imageBatches } from './010_image_batches.js';
import { sql as probes } from './008_probes.js';
import { sql as deadLetters } from './005_dead_letters.js';
import { sql as coordinationV2 } from './011_coordination_v2.js';
import { sql as backups } from './009_backups.js';
import { sql as monitorAlerts } from './014_monitor_alerts.js';
import { sql as refreshShards } from './015_refresh_shards.js';
import { sql as instanceProcess } from './016_instance_process.js';
import { sql as notificationRateLimit } from './017_notification_rate_limit.js';
import { sql as jobRunsByInstance } from './022_job_runs_by_instance.js';
import { sql as doctor } from './025_doctor.js';
import { sql as snapshotEpochs } from './020_snapshot_epochs.js';
import { sql as sessionAdminFingerprint } from './018_session_admin_fingerprint.js';
import { sql as spreadTakeover } from './021_spread_takeover.js';
import { sql as refreshSent } from './019_refresh_sent.js';
import { sql as wakeups } from './026_wakeups.js';
import { sql as claimTakeover } from './027_claim_takeover.js';
import { sql as backupWake } from './028_backup_wake.js';
import { sql as jobPauses } from './031_job_pauses.js';
import { sql as jobSchedules } from './037_job_schedules.js';
import { sql as instanceMemberships } from './040_instance_memberships.js';
import { sql as instanceLoops } from './038_instance_loops.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/**
 * The kernel's migrations. Numbered, append-only: never edit a migration that has shipped; add the
 * next number above the highest (never a gap: 12, 23 and 24 were never used). 1-28 are the whole
 * database's history from before areas kept their own (many span areas: 002 creates the scheduler
 * outbox beside accounts, 027 alters three areas' queues), so they stay here. Since then an area's new tables are its own (`AreaModule.migrations`); the kernel's
 * tables are added here. app/migrations.ts joins both lists; versions are unique across them.
 */
export const KERNEL_MIGRATIONS: readonly Migration[] = [
  { version: 1, name: 'core', sql: core },
  { version: 2, name: 'accounts', sql: accounts },
  { version: 3, name: 'usage', sql: usage },
  { version: 4, name: 'billing', sql: billing },
  { version: 13, name: 'recompute_tasks', sql: recomputeTasks },
  { version: 6, name: 'ops', sql: ops },
  { version: 7, name: 'scheduler_snapshot', sql: schedulerSnapshot },
  { version: 10, name: 'image_batches', sql: imageBatches },
  { version: 8, name: 'probes', sql: probes },
  { version: 5, name: 'dead_letters', sql: deadLetters },
  { version: 11, name: 'coordination_v2', sql: coordinationV2 },
  { version: 9, name: 'backups', sql: backups },
  { version: 14, name: 'monitor_alerts', sql: monitorAlerts },
  { version: 15, name: 'refresh_shards', sql: refreshShards },
  { version: 16, name: 'instance_process', sql: instanceProcess },
  { version: 17, name: 'notification_rate_limit', sql: notificationRateLimit },
  { version: 22, name: 'job_runs_by_instance', sql: jobRunsByInstance },
  { version: 25, name: 'doctor', sql: doctor },
  { version: 20, name: 'snapshot_epochs', sql: snapshotEpochs },
  { version: 18, name: 'session_admin_fingerprint', sql: sessionAdminFingerprint },
  { version: 21, name: 'spread_takeover', sql: spreadTakeover },
  { version: 19, name: 'refresh_sent', sql: refreshSent },
  { version: 26, name: 'wakeups', sql: wakeups },
  { version: 27, name: 'claim_takeover', sql: claimTakeover },
  { version: 28, name: 'backup_wake', sql: backupWake },
  { version: 31, name: 'job_pauses', sql: jobPauses },
  { version: 37, name: 'job_schedules', sql: jobSchedules },
  { version: 38, name: 'instance_loops', sql: instanceLoops },
  { version: 40, name: 'instance_memberships', sql: instanceMemberships },
];
