import type { JobSettings } from '../config/job-settings.js';
import type { JobSnapshot, RunRecord } from '../coordination/run-records.js';
import { Schedule } from './schedule.js';
import { systemClock } from '../time/clock.js';
import { judgeLoops } from './loop-health.js';
import type { LoopsReport } from '../workers/loop-book.js';

/**
 * `paused`: an operator paused the job (issue 49); set by the job views from `job_state`, never by the judgement below.
 * `config_drift`: this replica's schedule of a cluster-scoped job is not the cluster's, so it does not run it (issue 49;
 * set by the job views from the replica's schedule book, never by the judgement below).
 */
export type Health = 'healthy' | 'idle' | 'late' | 'stuck' | 'failing' | 'disabled' | 'paused' | 'config_drift';

export interface HealthVerdict {
  health: Health;
  reason: string;
  /** When a round is expected at the latest before the job counts as late. */
  expectedBy: Date | null;
}

/**
 * Judges one job cluster-wide against its own cadence (invariant 3): a daily cleanup is late a
 * while after its missed slot, not five minutes after its last run. Order matters: a job
 * nobody runs is `late` even if its last round failed; `stuck` beats everything because a
 * round is holding the job.
 *
 * - disabled: turned off in config.
 * - stuck:    a round is still `running` past its timeout plus the abort grace.
 * - late:     no round started by the expected slot + jitter + timeout + slack (one replica's
 *             own rounds: the slot after its last round ended + jitter + slack + its heartbeat).
 * - failing:  the latest finished round failed or timed out.
 * - idle:     enabled, never ran, first slot not yet overdue.
 * - healthy:  otherwise.
 */
export function judgeHealth(p: {
  settings: JobSettings;
  snapshot: JobSnapshot | undefined;
  since: Date;
  abortGraceMs: number;
  now?: Date;
  /** One replica's own rounds (judgeReplicas): see `replicaExpectedBy`. */
  replica?: { recordLagMs: number };
}): HealthVerdict {
  const { settings, snapshot } = p;
  if (!settings.enabled) return { health: 'disabled', reason: 'disabled in config', expectedBy: null };
  const now = (p.now ?? snapshot?.dbNow ?? new Date(systemClock.now())).getTime();
  const last = snapshot?.lastRun ?? null;

  if (last?.status === 'running') {
    const deadline = (last.deadline_at?.getTime() ?? last.started_at.getTime() + settings.timeoutMs) + p.abortGraceMs;
    if (now > deadline) {
      return { health: 'stuck', reason: `round ${last.id} on ${last.instance_id} running since ${last.started_at.toISOString()}, past its ${settings.timeoutMs}ms timeout`, expectedBy: null };
    }
  }

  const schedule = new Schedule(settings.schedule);
  const base = Math.max(snapshot?.lastSlot?.getTime() ?? 0, last?.started_at.getTime() ?? 0) || Math.max(p.since.getTime(), snapshot?.createdAt.getTime() ?? 0);
  const period = schedule.periodAt(base);
  const slack = Math.min(Math.max(period / 4, 5000), 3_600_000);
  const expectedBy =
    p.replica && last?.status !== 'running'
      ? replicaExpectedBy(schedule, base, last, settings.jitterMs + slack, p.replica.recordLagMs)
      : schedule.next(base) + settings.jitterMs + settings.timeoutMs + slack;
  if (now > expectedBy) {
    const lastSeen = last ? `last round started ${last.started_at.toISOString()}` : 'no round has run';
    // Replicas that skipped as not leader are counted, not recorded per round: say so, so "nobody leads" is not read as "nobody tried".
    const skipping = snapshot?.lastSkipAt && snapshot.lastSkipAt.getTime() > base ? `; replicas skipped as not leader until ${snapshot.lastSkipAt.toISOString()}` : '';
    return { health: 'late', reason: `${lastSeen}; one was due by ${new Date(expectedBy).toISOString()}${skipping}`, expectedBy: new Date(expectedBy) };
  }
  if (last && (last.status === 'failed' || last.status === 'timed_out')) {
    return { health: 'failing', reason: `last round ${last.status}: ${last.error ?? 'no error recorded'}`, expectedBy: new Date(expectedBy) };
  }
  if (!last) return { health: 'idle', reason: 'waiting for its first slot', expectedBy: new Date(expectedBy) };
  return { health: 'healthy', reason: `last round ${last.status} at ${last.started_at.toISOString()}`, expectedBy: new Date(expectedBy) };
}

/**
 * When one replica's next round is due at the latest, its last round over (or none yet): the next
 * slot after that round ended, plus jitter and slack, plus `recordLagMs`, the longest a finished
 * round may wait to be recorded. A no-work instance round is written by the replica's next
 * heartbeat (coordination/idle-rounds.ts), so that is its heartbeat interval: judged by the job's
 * cadence alone, a job with a cadence shorter than the heartbeat read `late` on every healthy
 * replica between two beats (issue 49). No round running, no timeout to wait for.
 */
function replicaExpectedBy(schedule: Schedule, base: number, last: RunRecord | null, slackMs: number, recordLagMs: number): number {
  const ended = Math.max(base, last?.finished_at?.getTime() ?? 0);
  return schedule.next(ended) + slackMs + recordLagMs;
}

/** How bad a verdict is, for "the worst replica": a round holding the job, then no round, then a failed one. */
const SEVERITY: Record<Health, number> = { stuck: 5, late: 4, failing: 3, idle: 1, healthy: 0, disabled: 0, paused: 0, config_drift: 0 };

export interface ReplicaVerdict extends HealthVerdict {
  instanceId: string;
  lastRound: RunRecord | null;
}

/**
 * Judges an instance-scoped job (one that runs on every replica) per live replica, each against
 * the job's own cadence with only its own rounds, so one replica's dead or failing loop is not
 * hidden by another's newest round. A live replica with no round at all is judged from its own
 * start: late once a round was due. Each replica's no-work rounds reach the database with its next
 * beat, so its window is widened by its heartbeat interval; the loops the job owns are judged
 * from the report that beat carried (`loop-health.ts`): a loop whose ticks keep failing makes the
 * replica `failing`, one that has not finished a tick within its stall bound `late`. A frozen
 * replica (SIGSTOP) neither rounds nor beats: it alone reads late, by the same window, and its
 * first rounds after it resumes arrive with its next beat. The job's verdict is the worst replica's, naming it (ties:
 * the first in `replicas` order); `worst` is null when every replica is healthy.
 *
 * With no live replica known (nothing to judge per replica) the cluster-wide verdict stands.
 */
export function judgeReplicas(p: {
  settings: JobSettings;
  snapshot: JobSnapshot | undefined;
  replicas: Array<{
    instanceId: string;
    startedAt: Date;
    lastRound: RunRecord | null;
    /** Its newest beat (database time) and the loop report it carried (instance-registry.ts). */
    beatAt?: Date;
    loops?: LoopsReport | null;
  }>;
  since: Date;
  abortGraceMs: number;
  now?: Date;
  /** The heartbeat interval, when a replica's report does not say its own: how late its no-work rounds may be recorded. */
  heartbeatMs?: number;
  /** The loops the job owns (`JobModule.loops`): a replica whose loop fails or stalls reads so. */
  loops?: readonly string[];
}): { verdict: HealthVerdict; replicas: ReplicaVerdict[]; worst: string | null } {
  const clusterWide = judgeHealth({ settings: p.settings, snapshot: p.snapshot, since: p.since, abortGraceMs: p.abortGraceMs, now: p.now });
  if (!p.settings.enabled || !p.replicas.length) return { verdict: clusterWide, replicas: [], worst: null };
  const replicas = p.replicas.map((r): ReplicaVerdict => {
    // The replica's own history: its newest round, no cluster-wide slot; a replica that never ran counts from its own start.
    const own: JobSnapshot | undefined = p.snapshot && { ...p.snapshot, lastSlot: null, lastRun: r.lastRound, lastSkipAt: null };
    const recordLagMs = r.loops?.heartbeat_ms ?? p.heartbeatMs ?? 0;
    const rounds = judgeHealth({ settings: p.settings, snapshot: own, since: r.startedAt, abortGraceMs: p.abortGraceMs, now: p.now, replica: { recordLagMs } });
    const now = (p.now ?? p.snapshot?.dbNow ?? new Date(systemClock.now())).getTime();
    const loop = r.beatAt ? judgeLoops({ loops: p.loops ?? [], report: r.loops, beatAt: r.beatAt, beatAgeMs: now - r.beatAt.getTime() }) : null;
    // The rounds' verdict unless a loop says worse (a stuck round stays stuck); as bad, both are said.
    let v = rounds;
    if (loop && SEVERITY[loop.health] > SEVERITY[rounds.health]) v = { ...loop, expectedBy: rounds.expectedBy };
    else if (loop && loop.health === rounds.health) v = { ...rounds, reason: `${rounds.reason}; ${loop.reason}` };
    return { ...v, instanceId: r.instanceId, lastRound: r.lastRound };
  });
  const worst = replicas.reduce((w, r) => (SEVERITY[r.health] > SEVERITY[w.health] ? r : w));
  if (SEVERITY[worst.health] === 0) {
    // Every live replica is fine. The cluster-wide window has no room for a heartbeat's recording lag: where it disagrees, the replica with the newest round speaks.
    const newest = replicas.reduce((n, r) => ((r.lastRound?.started_at.getTime() ?? 0) > (n.lastRound?.started_at.getTime() ?? 0) ? r : n));
    return { verdict: SEVERITY[clusterWide.health] === 0 ? clusterWide : { health: newest.health, reason: newest.reason, expectedBy: newest.expectedBy }, replicas, worst: null };
  }
  const others = replicas.filter((r) => r !== worst && SEVERITY[r.health] >= SEVERITY.failing).map((r) => `${r.instanceId} ${r.health}`);
  const also = others.length ? ` (also ${others.join(', ')})` : '';
  return {
    verdict: { health: worst.health, reason: `replica ${worst.instanceId}: ${worst.reason}${also}`, expectedBy: worst.expectedBy },
    replicas,
    worst: worst.instanceId,
  };
}
