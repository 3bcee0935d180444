import type { RedisClient } from '../../coordination/redis-client.js';
import type { Config } from '../../config/load.js';
import type { Db } from '../../store/db.js';
import type { DoctorFacts } from './store/doctor-facts.js';
import type { JobDefinition } from '../../scheduler/job.js';
import type { InstanceInfo } from '../../coordination/instance-registry.js';
import type { BackendIdentity } from '../../coordination/backend-identity.js';
import type { DoctorOptions } from './options.js';

export type CheckStatus = 'ok' | 'warn' | 'fail';
export const STATUSES: readonly CheckStatus[] = ['ok', 'warn', 'fail'];

/** One check's verdict: what was measured, and the fix in one sentence naming the config key or command. */
export interface CheckOutcome {
  status: CheckStatus;
  measured: string;
  fix: string;
}

export interface CheckResult extends CheckOutcome {
  name: string;
  group: string;
}

/** What a check may read: the live deployment as this replica sees it. */
export interface DoctorContext {
  config: Config;
  db: Db;
  redis: RedisClient | null;
  facts: DoctorFacts;
  /** Every job this build knows, with its resolved settings. */
  jobs: readonly Pick<JobDefinition, 'name' | 'scope' | 'settings'>[];
  /** Every registered replica (alive or not), this one included when it registered. */
  instances: InstanceInfo[];
  /**
   * Whether this process is one of the replicas. False in a one-shot CLI command (`relay-jobs
   * doctor`, which runs as `<instance id>-cli-<pid>`): it is not counted as a replica, and every
   * replica beating is counted from its heartbeat, one under the same id included.
   */
  replica: boolean;
  /** This process's own backends, read now. */
  self: BackendIdentity;
  options: DoctorOptions;
  nowMs: number;
  /** Open per-platform refresh breakers in this process. */
  breakers: () => Array<{ platform: string; ms: number; reason: string }>;
  /** Where `backup.storage: fs` writes, or null for S3. */
  backupDir: string | null;
}

/**
 * A check is a small object: its name (the `check` label of `relay_jobs_doctor_check`), its
 * group, the modes it applies to, and `run`. A new check is one file in `checks/` and one line
 * in `index.ts`.
 */
export interface DoctorCheck {
  name: string;
  group: string;
  modes: ReadonlyArray<'embedded' | 'cluster'>;
  run(ctx: DoctorContext): Promise<CheckOutcome>;
}

/**
 * The live replicas other than this process: all of them for a one-shot command (it is none of
 * them, even under a replica's id), the rest for a replica.
 */
export function otherLiveReplicas({ instances, config, replica }: Pick<DoctorContext, 'instances' | 'config' | 'replica'>): InstanceInfo[] {
  return instances.filter((i) => i.alive && !(replica && i.instance_id === config.instance.id));
}

export const ok = (measured: string, fix: string): CheckOutcome => ({ status: 'ok', measured, fix });
export const warn = (measured: string, fix: string): CheckOutcome => ({ status: 'warn', measured, fix });
export const fail = (measured: string, fix: string): CheckOutcome => ({ status: 'fail', measured, fix });

export function worst(statuses: Iterable<CheckStatus>): CheckStatus {
  let w: CheckStatus = 'ok';
  for (const s of statuses) if (STATUSES.indexOf(s) > STATUSES.indexOf(w)) w = s;
  return w;
}

/** Several findings of one check as one outcome: `whenOk` when none is bad, else the worst status, the bad findings joined, and the worst one's fix. */
export function combine(findings: CheckOutcome[], whenOk: CheckOutcome): CheckOutcome {
  const bad = findings.filter((f) => f.status !== 'ok');
  if (!bad.length) return whenOk;
  const status = worst(bad.map((f) => f.status));
  return { status, measured: bad.map((f) => f.measured).join('; '), fix: bad.find((f) => f.status === status)!.fix };
}
