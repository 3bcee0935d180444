/** A place in a Semaphore's queue; `promote` moves a waiting holder to the urgent queue. */
export interface Ticket {
  readonly granted: Promise<void>;
  promote(): void;
}

interface Waiter {
  resolve: () => void;
  urgent: boolean;
}

/**
 * At most `limit` holders at once; waiters are served urgent first, then in arrival order.
 * The hot path's refreshes are urgent so a backlog of scheduled refreshes never delays a request,
 * and a hot-path caller that joins a scheduled refresh still waiting promotes it.
 */
export class Semaphore {
  private held = 0;
  private readonly urgent: Waiter[] = [];
  private readonly normal: Waiter[] = [];

  constructor(private readonly limit: number) {}

  get inUse(): number {
    return this.held;
  }

  get waiting(): number {
    return this.urgent.length + this.normal.length;
  }

  acquire(urgent = false): Promise<void> {
    return this.ticket(urgent).granted;
  }

  ticket(urgent = false): Ticket {
    if (this.held < this.limit) {
      this.held++;
      return { granted: Promise.resolve(), promote: () => undefined };
    }
    let waiter!: Waiter;
    const granted = new Promise<void>((resolve) => (waiter = { resolve, urgent }));
    (urgent ? this.urgent : this.normal).push(waiter);
    return {
      granted,
      promote: () => {
        const i = this.normal.indexOf(waiter);
        if (i < 0) return;
        this.normal.splice(i, 1);
        waiter.urgent = true;
        this.urgent.push(waiter);
      },
    };
  }

  release(): void {
    const next = this.urgent.shift() ?? this.normal.shift();
    if (next) next.resolve();
    else this.held--;
  }
}
