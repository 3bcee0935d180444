import type { Clock, TimerHandle } from '../time/clock.js';
import type { Claim, RoundOutcome, SlotClaims } from '../coordination/slot-claim.js';
import type { IdleRounds } from '../coordination/idle-rounds.js';
import type { Logger } from '../telemetry/logger.js';
import { isTransientConnectError } from '../store/pg-startup.js';

/** A scheduled instance round still running this long gets its `running` record (what the console shows, what `stuck` reads). */
export const RECORD_RUNNING_AFTER_MS = 1000;

/**
 * The record of one scheduled instance-scoped round, written only when it says something
 * (issue 26). Every replica runs these rounds every few seconds and most find nothing to do:
 * - ends `no_work` within `RECORD_RUNNING_AFTER_MS`: no statement; the heartbeat writes its
 *   finished row (`idle-rounds.ts`), at most one beat later;
 * - ends otherwise (did work, failed, timed out) within it: one statement, its finished row, at once;
 * - still running after it: its `running` row (started when the round did, deadline from its
 *   timeout) is written then, and completed as before, so a hung round shows `stuck` on time.
 * Such a round has no fencing token (0): instance rounds hold no lease, every replica runs them.
 * A finished row the database cannot take (a connection error) goes to the heartbeat too
 * (`idle-rounds.ts`), outcome and all; so does the completion of a `running` row (the beat
 * completes it), which otherwise stayed `running` until the replica restarted.
 */
export class InstanceRoundRecord {
  private readonly startedMs: number;
  private readonly timer: TimerHandle;
  private started: Promise<Claim> | null = null;

  constructor(private readonly p: { claims: SlotClaims; clock: Clock; idle: IdleRounds; log: Logger; job: string; slot: Date; timeoutMs: number }) {
    this.startedMs = p.clock.now();
    this.timer = p.clock.setTimeout(() => void this.recordRunning().catch(() => undefined), RECORD_RUNNING_AFTER_MS);
  }

  /** The in-memory claim the round runs under until (if ever) it is recorded. */
  get claim(): Claim {
    return { runId: 0, job: this.p.job, token: 0, slot: this.p.slot, aliveKey: null };
  }

  private recordRunning(): Promise<Claim> {
    this.started ??= this.p.claims.startInstanceRound({ job: this.p.job, slot: this.p.slot, timeoutMs: this.p.timeoutMs, trigger: 'schedule', startedMsAgo: this.p.clock.now() - this.startedMs });
    return this.started;
  }

  /** Records the outcome (see the class comment); false when a running record was taken over as abandoned. May be retried. */
  async finish(outcome: RoundOutcome): Promise<boolean> {
    const { clock, claims } = this.p;
    clock.clearTimeout(this.timer);
    const started = this.started && (await this.started.catch(() => null));
    const finishedMs = clock.now();
    // The round as the heartbeat writes it: its finished row a beat later.
    const kept = { job: this.p.job, slot: this.p.slot.toISOString(), startedMs: this.startedMs, finishedMs, note: outcome.note ?? null };
    if (!started && outcome.status === 'no_work') {
      this.p.idle.add(kept);
      return true;
    }
    const durationMs = finishedMs - this.startedMs;
    try {
      if (started) return await claims.complete(started, outcome);
      await claims.recordInstanceRound({ job: this.p.job, slot: this.p.slot, startedMsAgo: durationMs, durationMs, timeoutMs: this.p.timeoutMs, outcome });
    } catch (err) {
      // Not reachable (often the outage that failed the round): the heartbeat writes it once a beat gets through
      // (completing its running row, when it has one). Anything else (the row refused for its content) is thrown
      // to the round runner, which retries and logs it.
      if (!isTransientConnectError(err)) throw err;
      const { status, items, error } = outcome;
      this.p.idle.add({ ...kept, outcome: { status, items, error: error ?? null, timeoutMs: this.p.timeoutMs }, ...(started ? { runId: started.runId } : {}) });
      this.p.log.warn({ err: (err as Error).message, status }, 'could not record round outcome; the heartbeat writes it once the database answers');
    }
    return true;
  }
}
