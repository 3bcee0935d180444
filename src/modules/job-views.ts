import { formatDuration } from '../config/duration.js';
import { judgeHealth, judgeReplicas, type HealthVerdict } from '../scheduler/health.js';
import type { InstanceRegistry } from '../coordination/instance-registry.js';
import type { RunRecord, RunRecords } from '../coordination/run-records.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { BuiltJob } from './define-job.js';
import { describePause, type JobPause } from '../coordination/job-pauses.js';
import type { ScheduleDrift } from '../scheduler/schedule-book.js';

export const HEALTH_STATES = ['healthy', 'idle', 'late', 'stuck', 'failing', 'disabled', 'paused', 'config_drift'] as const;

/**
 * Pause and resume (issue 49), as the routes and the CLI use it: the runtime's pause book
 * (`scheduler/pause-book.ts`) over `job_state` (`coordination/job-pauses.ts`).
 */
export interface JobPauseControl {
  pause(job: string, actor: string, reason: string): Promise<{ changed: boolean; pause: JobPause }>;
  resume(job: string, actor: string, reason?: string | null): Promise<{ changed: boolean; was: JobPause | null }>;
  audit(job: string, limit?: number): Promise<Array<{ action: 'pause' | 'resume'; actor: string; reason: string | null; at: string }>>;
  read(): Promise<Map<string, JobPause>>;
}

/** A pause as the API shows it. */
export interface PauseView {
  at: string;
  by: string;
  reason: string;
}

export function pauseView(p: JobPause): PauseView {
  return { at: p.at.toISOString(), by: p.by, reason: p.reason };
}

/** A job as the API, the CLI and the heartbeat's gauges show it: settings, cluster-wide health, last run. */
export interface JobView {
  name: string;
  description: string;
  scope: string;
  enabled: boolean;
  /** Null when enabled; otherwise why it is off (a disabled job can still be run by hand). */
  disabled_reason: string | null;
  schedule: { every?: string; cron?: string; timezone?: string };
  timeout: string;
  lock_ttl: string;
  jitter: string;
  health: HealthVerdict['health'];
  health_reason: string;
  expected_by: string | null;
  next_attempt: string | null;
  last_slot: string | null;
  lease_holder: string | null;
  last_run: RunRecord | null;
  last_success_at: string | null;
  /** Instance-scoped jobs: each live replica's verdict (null for cluster jobs). */
  instances: ReplicaHealth[] | null;
  /** The replica the job's health comes from when it is not healthy (instance-scoped jobs), else null. */
  worst_instance: string | null;
  /** Set while an operator has the job paused (health `paused`): when, by whom (the admin token, a session, the CLI) and why. */
  paused: PauseView | null;
  /** Set while this replica's schedule of the job differs from the cluster's (issue 49): the differing keys, both values. */
  config_drift: { keys: Array<{ key: string; here: string; cluster: string }>; adopted_at: string } | null;
}

export interface ReplicaHealth {
  instance_id: string;
  health: HealthVerdict['health'];
  health_reason: string;
  last_round: RunRecord | null;
}

export async function jobViews(p: {
  jobs: readonly BuiltJob[];
  records: RunRecords;
  registry: InstanceRegistry;
  scheduler: Scheduler;
  startedAt: Date;
  abortGraceMs: number;
  /** The paused jobs (issue 49); without it none reads as paused. */
  pauses?: Pick<JobPauseControl, 'read'>;
  /** This replica's schedule drift per job (scheduler/schedule-book.ts); without it none drifts. */
  drift?: (job: string) => ScheduleDrift | null;
}): Promise<JobView[]> {
  const [snapshots, paused] = await Promise.all([p.records.snapshots(), p.pauses?.read() ?? new Map<string, JobPause>()]);
  // Health of a job that never ran counts from the start of the cluster's current life: the oldest live replica's start.
  const known = await p.registry.list();
  const live = known.filter((i) => i.alive);
  // Judged per replica: the live ones and any that still hold their leases, such as a frozen (SIGSTOP) one, late until it resumes.
  const judgedReplicas = known.filter((i) => i.alive || i.lease_alive);
  const since = live.reduce((min, i) => (i.started_at < min ? i.started_at : min), p.startedAt);
  // Jobs that run on every replica are judged per live replica (scheduler/health.ts judgeReplicas).
  const perReplica = p.jobs.filter((j) => j.scope === 'instance' && j.settings.enabled).map((j) => j.name);
  const rounds = await p.records.replicaRounds(
    perReplica,
    judgedReplicas.map((i) => i.instance_id),
  );
  return Promise.all(
    p.jobs.map(async (job) => {
      const snap = snapshots.get(job.name);
      let verdict: HealthVerdict;
      let instances: ReplicaHealth[] | null = null;
      let worst: string | null = null;
      if (job.scope === 'instance') {
        const mine = rounds.get(job.name);
        const replicas = judgedReplicas.map((i) => ({ instanceId: i.instance_id, startedAt: i.started_at, lastRound: mine?.get(i.instance_id) ?? null, beatAt: i.heartbeat_at, loops: i.loops }));
        // Each replica's loop report and heartbeat come with its beat (issue 49): its idle rounds' recording lag, its loops' failures and stalls.
        const judged = judgeReplicas({ settings: job.settings, snapshot: snap, replicas, since, abortGraceMs: p.abortGraceMs, heartbeatMs: p.registry.heartbeatMs, loops: job.loops });
        verdict = judged.verdict;
        worst = judged.worst;
        instances = judged.replicas.map((r) => ({ instance_id: r.instanceId, health: r.health, health_reason: r.reason, last_round: r.lastRound }));
      } else {
        verdict = judgeHealth({ settings: job.settings, snapshot: snap, since, abortGraceMs: p.abortGraceMs });
      }
      // A job's own rule may say more than its rounds do (backup: no verified backup recently).
      if (job.health && (verdict.health === 'healthy' || verdict.health === 'idle')) {
        const own = await job.health({ settings: job.settings, createdAt: snap?.createdAt ?? null, nowMs: (snap?.dbNow ?? p.startedAt).getTime() }).catch(() => null);
        if (own) Object.assign(verdict, own);
      }
      // A cluster job this replica is off the cluster's schedule for is not run here, whatever its rounds say (issue 49).
      const drift = p.drift?.(job.name) ?? null;
      if (drift && job.scope === 'cluster') verdict = { health: 'config_drift', reason: drift.reason, expectedBy: null };
      // A pause says more than any round: no round starts anywhere until it is resumed.
      const pause = paused.get(job.name) ?? null;
      if (pause) {
        verdict = { health: 'paused', reason: describePause(pause), expectedBy: null };
        worst = null;
      }
      const s = job.settings.schedule;
      return {
        name: job.name,
        description: job.description,
        scope: job.scope,
        enabled: job.settings.enabled,
        disabled_reason: job.settings.enabled ? null : (job.disabledReason ?? 'disabled'),
        schedule: s.kind === 'every' ? { every: formatDuration(s.everyMs) } : { cron: s.expr, timezone: s.timezone },
        timeout: formatDuration(job.settings.timeoutMs),
        lock_ttl: formatDuration(job.settings.lockTtlMs),
        jitter: formatDuration(job.settings.jitterMs),
        health: verdict.health,
        health_reason: verdict.health === 'disabled' ? (job.disabledReason ?? verdict.reason) : verdict.reason,
        expected_by: verdict.expectedBy?.toISOString() ?? null,
        next_attempt: p.scheduler.nextAttempt(job.name)?.toISOString() ?? null,
        last_slot: snap?.lastSlot?.toISOString() ?? null,
        lease_holder: snap?.leaseUntil && snap.leaseUntil > snap.dbNow ? snap.holder : null,
        last_run: snap?.lastRun ?? null,
        last_success_at: snap?.lastSuccessAt?.toISOString() ?? null,
        instances,
        worst_instance: worst,
        paused: pause ? pauseView(pause) : null,
        config_drift: drift && { keys: drift.keys, adopted_at: drift.adoptedAt.toISOString() },
      };
    }),
  );
}
