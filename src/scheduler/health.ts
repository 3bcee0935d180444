import type { JobSettings } from '../config/job-settings.js';
import type { JobSnapshot } from '../coordination/run-records.js';
import { Schedule } from './schedule.js';
import { systemClock } from '../time/clock.js';

export type Health = 'healthy' | 'idle' | 'late' | 'stuck' | 'failing' | 'disabled';

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
 * - late:     no round started by the expected slot + jitter + timeout + slack.
 * - failing:  the latest finished round failed or timed out.
 * - idle:     enabled, never ran, first slot not yet overdue.
 * - healthy:  otherwise.
 */
export function judgeHealth(p: { settings: JobSettings; snapshot: JobSnapshot | undefined; since: Date; abortGraceMs: number; now?: Date }): HealthVerdict {
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
  const expectedBy = schedule.next(base) + settings.jitterMs + settings.timeoutMs + slack;
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
