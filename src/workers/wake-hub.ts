/**
 * The wake-up spacing (`ServiceLoop.wakeSpacingMs`) of the loops that consume a busy table's
 * notifications: the scheduler outbox and the change events. Every write notifies and every
 * replica hears it, so a burst of token refreshes made each replica claim once per commit (about
 * half of the statements of a refresh under load). Spaced, a replica looks at most every 20 ms
 * while the burst lasts; a lone change (the latency benchmark's, 100-400 ms apart) is still
 * looked at at once.
 */
export const WAKE_SPACING_MS = 20;

/**
 * Routes wake-ups to the loops that consume them. A topic names a kind of work (the payload the
 * migration 026 triggers send: `scheduler_outbox`, `monitors`, `account_tests`, `image_queue`).
 * The listener (`coordination/wake-listener.ts`) feeds it; loops register here, so neither knows
 * the other.
 *
 * `listening` is the promise behind the long sleeps: while no listener is up (wake-ups off,
 * LISTEN lost, no liveness session), `idleMs` gives each loop its own short poll interval back,
 * so a missed notification never costs more than today's poll-only path.
 */
export class WakeHub {
  private readonly loops = new Map<string, Set<(reason: string) => void>>();
  private up = false;

  constructor(
    /** `wakeups.enabled`: false keeps every loop on its poll interval (today's path, the benchmark baseline). */
    readonly enabled: boolean,
    /** `wakeups.backstop`: the sleep of an idle loop while the listener is up. */
    readonly backstopMs: number,
    private readonly onListening?: (up: boolean) => void,
  ) {}

  get listening(): boolean {
    return this.enabled && this.up;
  }

  /** The sleep of an idle loop whose own poll interval is `pollMs`: the backstop while notifications arrive. */
  idleMs(pollMs: number): () => number {
    return () => (this.listening ? Math.max(pollMs, this.backstopMs) : pollMs);
  }

  /** Registers a loop's wake for a topic; returns the unregister. */
  on(topic: string, wake: (reason: string) => void): () => void {
    const set = this.loops.get(topic) ?? this.loops.set(topic, new Set()).get(topic)!;
    set.add(wake);
    return () => set.delete(wake);
  }

  /** A notification arrived: wakes the loops of its topic (unknown topics are ignored); `detail` (after the topic's `:`) is their reason. */
  emit(topic: string, detail?: string): number {
    const set = this.loops.get(topic);
    if (!set) return 0;
    for (const wake of set) wake(detail ?? topic);
    return set.size;
  }

  /** The listener came up or went down: every loop looks once (covers what was missed) and re-reads its sleep. */
  setListening(up: boolean): void {
    const changed = up !== this.up;
    this.up = up;
    if (changed) this.onListening?.(up);
    this.wakeAll(up ? 'listener_connected' : 'listener_lost');
  }

  wakeAll(reason: string): void {
    for (const set of this.loops.values()) for (const wake of set) wake(reason);
  }
}

/**
 * When an idle loop looks again: with the listener up, when its work is next due by the data
 * (`nextDueMs`; already due but held by another replica: after `pollMs`; nothing scheduled: null,
 * so a wake-up or the backstop ends the sleep); with no listener, after `pollMs`, as before.
 */
export async function idleUntil(nowMs: number, pollMs: number, wakes: WakeHub | undefined, nextDueMs: (() => Promise<number | null>) | undefined): Promise<number | null> {
  if (!wakes?.listening || !nextDueMs) return nowMs + pollMs;
  const ms = await nextDueMs();
  return ms === null ? null : nowMs + (ms <= 0 ? pollMs : ms);
}
