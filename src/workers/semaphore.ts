/**
 * At most `limit` holders at once; waiters are served urgent first, then in arrival order.
 * The hot path's refreshes are urgent so a backlog of scheduled refreshes never delays a request.
 */
export class Semaphore {
  private held = 0;
  private readonly urgent: Array<() => void> = [];
  private readonly normal: Array<() => void> = [];

  constructor(private readonly limit: number) {}

  get inUse(): number {
    return this.held;
  }

  get waiting(): number {
    return this.urgent.length + this.normal.length;
  }

  acquire(urgent = false): Promise<void> {
    if (this.held < this.limit) {
      this.held++;
      return Promise.resolve();
    }
    return new Promise((resolve) => (urgent ? this.urgent : this.normal).push(resolve));
  }

  release(): void {
    const next = this.urgent.shift() ?? this.normal.shift();
    if (next) next();
    else this.held--;
  }
}
