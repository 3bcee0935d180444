import { z } from 'zod';
import { duration } from '../../config/schema.js';
import type { Config } from '../../config/load.js';

const DAY = 86_400_000;

/** The doctor's own keys under `jobs.doctor` (next to the common ones: `every`, `enabled`, …). */
export const DOCTOR_OPTIONS = {
  /** A check that turns `fail` raises an ops alert event (rule `doctor`); false only records it. */
  alert: z.boolean().optional(),
  /** Embedded mode: the data directory's filesystem must keep this share free (percent). */
  disk_min_free_percent: z.coerce.number().min(0).max(100).optional(),
  /** Cluster mode: database growth per day (MiB) above which disk headroom warns. */
  db_growth_budget_mb_per_day: z.coerce.number().positive().optional(),
  /** A restore drill (a verified backup: restored into a scratch database) older than this warns. */
  restore_drill_max_age: duration.optional(),
  /** A churned table with dead tuples and no autovacuum for longer than this warns. */
  autovacuum_max_age: duration.optional(),
  /** Dead tuples over live + dead on a churned table above which it warns. */
  dead_tuple_ratio: z.coerce.number().min(0).max(1).optional(),
  /** One check may take this long; longer is a `fail` naming the check. */
  check_timeout: duration.optional(),
};

export interface DoctorOptions {
  alert: boolean;
  diskMinFreePercent: number;
  dbGrowthBudgetBytesPerDay: number;
  restoreDrillMaxAgeMs: number;
  autovacuumMaxAgeMs: number;
  deadTupleRatio: number;
  checkTimeoutMs: number;
}

type Raw = { [K in keyof typeof DOCTOR_OPTIONS]?: z.infer<(typeof DOCTOR_OPTIONS)[K]> };

export function resolveDoctorOptions(o: Raw): DoctorOptions {
  return {
    alert: o.alert ?? true,
    diskMinFreePercent: o.disk_min_free_percent ?? 10,
    dbGrowthBudgetBytesPerDay: (o.db_growth_budget_mb_per_day ?? 1024) * 1_048_576,
    restoreDrillMaxAgeMs: o.restore_drill_max_age ?? 30 * DAY,
    autovacuumMaxAgeMs: o.autovacuum_max_age ?? 7 * DAY,
    deadTupleRatio: o.dead_tuple_ratio ?? 0.2,
    checkTimeoutMs: o.check_timeout ?? 15_000,
  };
}

/** `jobs.doctor`'s own keys from a loaded config (the job registry has validated the section already). */
export function doctorOptions(config: Config): DoctorOptions {
  const parsed = z.object(DOCTOR_OPTIONS).safeParse(config.jobs.doctor ?? {});
  return resolveDoctorOptions(parsed.success ? parsed.data : {});
}
