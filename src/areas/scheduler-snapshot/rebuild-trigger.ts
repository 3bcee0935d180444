/** When the outbox is judged too far behind to catch up event by event. */
export interface DegradationRules {
  /** Lag (age of the oldest unconsumed event) at or above which a poll counts as lagging. */
  lagBoundSeconds: number;
  /** Consecutive lagging polls that trigger a rebuild. */
  lagPolls: number;
  /** Backlog at or above which a rebuild is triggered at once. */
  backlogLimit: number;
}

export type DegradedReason = 'lag' | 'backlog';

/**
 * The degradation latch of one replica. A rebuild is requested once when the outbox degrades
 * (lag ≥ bound for `lagPolls` polls in a row, or backlog ≥ limit), then the latch holds until both
 * are back under their bounds: a backlog that takes a while to drain after the rebuild never
 * requests rebuild after rebuild (Sub2API #3693, a rebuild storm). The request itself is
 * coalesced cluster-wide by the outbox (one pending rebuild at most).
 */
export class RebuildTrigger {
  private lagging = 0;
  private latched = false;

  constructor(private readonly rules: DegradationRules) {}

  get isLatched(): boolean {
    return this.latched;
  }

  /** One poll's measurements; the reason to request a rebuild now, or null. */
  observe(lagSeconds: number, backlog: number): DegradedReason | null {
    this.lagging = lagSeconds >= this.rules.lagBoundSeconds ? this.lagging + 1 : 0;
    const reason: DegradedReason | null = backlog >= this.rules.backlogLimit ? 'backlog' : this.lagging >= this.rules.lagPolls ? 'lag' : null;
    if (!reason) {
      if (lagSeconds < this.rules.lagBoundSeconds) this.latched = false;
      return null;
    }
    if (this.latched) return null;
    this.latched = true;
    return reason;
  }
}

/** Delay before a failed rebuild is tried again: base, doubling per attempt, capped. */
export function rebuildBackoffMs(attempt: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(30, attempt - 1)));
}
