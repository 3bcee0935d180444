import type { Clock, TimerHandle } from '../time/clock.js';

export interface LeaseKeeperOptions {
  clock: Clock;
  leaseMs: number;
  /** The authoritative lease: false means it is no longer ours; a throw means "could not tell". */
  renewLease: () => Promise<boolean>;
  /** The leader lock that admitted the round; its failures are reported but do not end the round. */
  renewLock?: () => Promise<boolean>;
  onLost: (reason: string) => void;
  onLockRenewFailed?: (reason: string) => void;
}

/**
 * Renewal ticks of leases of 6 s or more (a tick every 2 s or more) fall on whole multiples of this
 * on the process clock, so every lease a replica holds renews at the same instants and `RenewalBatch`
 * sends them as one statement (a tick is up to one grid step early, never late).
 */
export const RENEW_GRID_MS = 1000;

/**
 * Keeps a round's lease alive: renews every third of the lease and trusts the lease only until
 * `start of the last successful renewal + lease − margin` (River's trust window). A lease
 * refused by the store is lost at once; a store that cannot be reached is retried on the next
 * tick and given up when the trust window closes, which is before the lease can expire anywhere.
 */
export class LeaseKeeper {
  private tick: TimerHandle | null = null;
  private deadline: TimerHandle | null = null;
  private stopped = false;
  private renewing = false;
  lostReason: string | null = null;

  constructor(private readonly opts: LeaseKeeperOptions) {}

  /** The margin kept before the lease's own expiry: a tenth of the lease, at most one second. */
  get marginMs(): number {
    return Math.min(1000, Math.floor(this.opts.leaseMs / 10));
  }

  start(grantedAt: number = this.opts.clock.now()): void {
    this.armDeadline(grantedAt);
    this.scheduleTick();
  }

  stop(): void {
    this.stopped = true;
    if (this.tick) this.opts.clock.clearTimeout(this.tick);
    if (this.deadline) this.opts.clock.clearTimeout(this.deadline);
  }

  private scheduleTick(): void {
    if (this.stopped) return;
    const every = Math.max(1, Math.floor(this.opts.leaseMs / 3));
    const now = this.opts.clock.now();
    // On the grid when the lease is long enough for a step early not to matter.
    const delay = every >= 2 * RENEW_GRID_MS ? Math.floor((now + every) / RENEW_GRID_MS) * RENEW_GRID_MS - now : every;
    this.tick = this.opts.clock.setTimeout(() => void this.renew(), delay);
  }

  private armDeadline(from: number): void {
    if (this.deadline) this.opts.clock.clearTimeout(this.deadline);
    const trustUntil = from + this.opts.leaseMs - this.marginMs;
    this.deadline = this.opts.clock.setTimeout(() => this.lose('lease could not be renewed before it would expire'), trustUntil - this.opts.clock.now());
  }

  private async renew(): Promise<void> {
    if (this.stopped || this.renewing) return this.scheduleTick();
    this.renewing = true;
    const attemptStart = this.opts.clock.now();
    try {
      const ok = await this.opts.renewLease();
      if (this.stopped) return;
      if (!ok) return this.lose('lease taken over: the store refused the renewal (another holder has it)');
      this.armDeadline(attemptStart);
    } catch {
      // Unknown outcome: keep the old trust window; the next tick tries again.
    } finally {
      this.renewing = false;
    }
    if (this.opts.renewLock) {
      try {
        if (!(await this.opts.renewLock())) this.opts.onLockRenewFailed?.('lock no longer ours');
      } catch (err) {
        this.opts.onLockRenewFailed?.((err as Error).message);
      }
    }
    this.scheduleTick();
  }

  private lose(reason: string): void {
    if (this.stopped || this.lostReason) return;
    this.lostReason = reason;
    this.stop();
    this.opts.onLost(reason);
  }
}
