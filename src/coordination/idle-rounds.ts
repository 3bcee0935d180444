import type { Clock } from '../time/clock.js';

/**
 * Scheduled instance-scoped rounds that found nothing to do (issue 26). Every replica runs them
 * every few seconds; two `job_runs` statements each (start, finish) were most of an idle
 * replica's transactions. A round that ends `no_work` before its running record was due
 * (`instance-round.ts`) is kept here and written by the heartbeat as a finished `no_work` row,
 * in the heartbeat's own statement: the same row, up to one beat later, no transaction of its own.
 * Per-replica health (`scheduler/health.ts` judgeReplicas) reads it, widening each replica's window
 * by that replica's heartbeat interval for the wait (issue 49: judged by the cadence alone, a job
 * whose cadence is shorter than the heartbeat read `late` on healthy replicas between two beats);
 * a round that runs on, fails or does work is recorded at once, so stuck and failing are not delayed.
 * When the database cannot take that record (unreachable, a pooler restarting: a connection error,
 * not a refusal of its content), the round is kept here too, with its outcome, and the first beat
 * that gets through writes it: the outage that failed a round no longer takes its record with it.
 * A round that ran past a second already has its `running` row: the beat completes that row (only
 * while it is still `running`, so a beat sent twice completes it once) instead of inserting one.
 * Kept in memory, so up to `MAX_PENDING` rounds (idle ones dropped first) and not past a crash.
 */
export interface IdleRound {
  job: string;
  slot: string;
  /** This replica's clock (the heartbeat turns it into "ago" by the same clock: no skew in it). */
  startedMs: number;
  finishedMs: number;
  note: string | null;
  /** A round whose own record could not reach the database (a connection error): its outcome and timeout (absent: `no_work`, 0 items, no deadline). */
  outcome?: { status: string; items: number; error: string | null; timeoutMs: number };
  /** Its `running` row, written while it ran (it ran past a second): the beat completes that row instead of inserting one. */
  runId?: number;
}

/** The rows as the heartbeat's statement reads them (`jsonb_to_recordset`). */
export interface IdleRoundRow {
  job: string;
  slot: string;
  ago_ms: number;
  duration_ms: number;
  note: string | null;
  status?: string;
  items?: number;
  error?: string | null;
  timeout_ms?: number;
  run_id?: number;
}

/** Kept while the database is down: up to this many rounds; over it, the oldest idle one goes first, then the oldest with an outcome. */
export const MAX_PENDING = 1000;

export class IdleRounds {
  private pending: IdleRound[] = [];

  add(r: IdleRound): void {
    this.pending.push(r);
    this.trim();
  }

  /** Takes what is pending; hand it back with `restore` if it could not be written. */
  take(): IdleRound[] {
    const out = this.pending;
    this.pending = [];
    return out;
  }

  restore(batch: IdleRound[]): void {
    this.pending = [...batch, ...this.pending];
    this.trim();
  }

  private trim(): void {
    let over = this.pending.length - MAX_PENDING;
    if (over <= 0) return;
    // A failed round says more than a no-work one: the idle rounds go first.
    this.pending = this.pending.filter((r) => r.outcome || over-- <= 0);
    if (this.pending.length > MAX_PENDING) this.pending.splice(0, this.pending.length - MAX_PENDING);
  }
}

/** Text the database stores as it is: no NUL (text refuses it) and no lone surrogate (jsonb refuses it; a message cut mid-emoji). */
function storable(text: string | null): string | null {
  return text === null ? null : text.replaceAll('\u0000', '').replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, '\uFFFD');
}

export function idleRoundRows(batch: IdleRound[], clock: Clock): IdleRoundRow[] {
  const now = clock.now();
  return batch.map((r) => {
    const row: IdleRoundRow = { job: r.job, slot: r.slot, ago_ms: Math.max(0, now - r.startedMs), duration_ms: Math.max(0, Math.round(r.finishedMs - r.startedMs)), note: storable(r.note) };
    if (r.outcome) Object.assign(row, { status: r.outcome.status, items: Math.min(r.outcome.items, 2 ** 31 - 1), error: storable(r.outcome.error), timeout_ms: r.outcome.timeoutMs });
    if (r.runId !== undefined) row.run_id = r.runId;
    return row;
  });
}
