/**
 * Scheduled rounds this replica did not run because another replica led the slot. They used to
 * be one `job_runs` row each (a committing write per replica per slot, growing with replicas);
 * a skip starts no round, so it is counted here and written by the heartbeat as one summary
 * row per job and replica (`job_skip_counts`), in the heartbeat's own statement. Manual rounds
 * that were refused still get their `skipped_not_leader` record: an operator asked for them.
 */
export interface SkipSummary {
  job: string;
  n: number;
  at: string;
  reason: string;
}

export class SkipCounter {
  private pending = new Map<string, SkipSummary>();

  add(job: string, at: Date, reason: string): void {
    const cur = this.pending.get(job);
    if (cur) {
      cur.n++;
      cur.at = at.toISOString();
      cur.reason = reason;
    } else this.pending.set(job, { job, n: 1, at: at.toISOString(), reason });
  }

  /** Takes what is pending; hand it back with `restore` if it could not be written. */
  take(): SkipSummary[] {
    const out = [...this.pending.values()];
    this.pending = new Map();
    return out;
  }

  restore(batch: SkipSummary[]): void {
    for (const s of batch) {
      const cur = this.pending.get(s.job);
      if (cur) cur.n += s.n;
      else this.pending.set(s.job, { ...s });
    }
  }
}
