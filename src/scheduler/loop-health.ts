import type { LoopReport, LoopsReport } from '../workers/loop-book.js';

/** A loop's verdict (health.ts merges it with the replica's rounds). */
export interface LoopVerdict {
  health: 'late' | 'failing';
  reason: string;
}

/**
 * Judges the loops a job owns on one replica (issue 49, point 3) from the report its heartbeat
 * carried (`workers/loop-book.ts`), `beatAgeMs` after that beat (database time, so no skew):
 * - late:    a tick has been running longer than the loop's stall bound (it has not finished a
 *            tick for that long: a dependency that hangs, a retry that never ends);
 * - failing: its newest tick threw (one success clears it), with the last error's class.
 * Null when every named loop is fine, or the replica reported no loops (an older version).
 * A loop the report does not name is not running on that replica (not started, or already
 * stopped): nothing to judge.
 */
export function judgeLoops(p: { loops: readonly string[]; report: LoopsReport | null | undefined; beatAgeMs: number; beatAt: Date }): LoopVerdict | null {
  if (!p.loops.length || !p.report) return null;
  let worst: LoopVerdict | null = null;
  for (const r of p.report.loops) {
    if (!p.loops.includes(r.loop)) continue;
    const v = judgeLoop(r, Math.max(0, p.beatAgeMs), p.beatAt.getTime());
    if (v && (!worst || (v.health === 'late' && worst.health !== 'late'))) worst = v;
  }
  return worst;
}

function judgeLoop(r: LoopReport, beatAgeMs: number, beatAtMs: number): LoopVerdict | null {
  if (r.in_tick_ms !== null && r.in_tick_ms + beatAgeMs > r.stall_after_ms) {
    const since = new Date(beatAtMs - r.in_tick_ms).toISOString();
    return {
      health: 'late',
      reason: `loop ${r.loop} has not finished a tick for ${seconds(r.in_tick_ms + beatAgeMs)} (one running since ${since}, past its ${seconds(r.stall_after_ms)} stall bound)`,
    };
  }
  if (r.failed_in_row > 0) {
    const since = r.failing_for_ms === null ? '' : ` since ${new Date(beatAtMs - r.failing_for_ms).toISOString()}`;
    const last = r.last_error ? `; last error ${r.last_error.class}: ${r.last_error.message}` : '';
    return { health: 'failing', reason: `loop ${r.loop}: ${r.failed_in_row} tick${r.failed_in_row === 1 ? '' : 's'} failed in a row${since}${last}` };
  }
  return null;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10}s`;
}
