/**
 * Repeated warnings, sampled with a count: the first occurrence of a key is logged at once, then
 * at most one line per interval, carrying `suppressed: n` (how many were not logged since the last
 * line). Unauthenticated traffic (unsigned webhooks) can repeat a warning thousands of times a
 * second; the metric counts every one, the log keeps a few. Keys are chosen by the caller from
 * configured names only (never from request input), so the map cannot grow with traffic.
 */
export class WarnSampler {
  private readonly seen = new Map<string, { lastAt: number; suppressed: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly now: () => number,
  ) {}

  /** `null`: do not log this one. Otherwise log it, with `suppressed` (0 on the first line of a key). */
  take(key: string): { suppressed: number } | null {
    const t = this.now();
    const s = this.seen.get(key);
    if (!s) {
      this.seen.set(key, { lastAt: t, suppressed: 0 });
      return { suppressed: 0 };
    }
    if (t - s.lastAt < this.intervalMs) {
      s.suppressed++;
      return null;
    }
    const suppressed = s.suppressed;
    s.lastAt = t;
    s.suppressed = 0;
    return { suppressed };
  }
}
