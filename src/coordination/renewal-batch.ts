/**
 * One statement for every lease renewal a replica makes at one instant, whatever the number of
 * leases it holds. Lease keepers tick on a shared one-second grid (`LeaseKeeper`), so the
 * renewals due at the same second arrive here in the same turn of the event loop; each
 * `renew(item)` joins the batch of that turn, and the batch is sent once, through `renewMany`,
 * when the turn ends (`setImmediate`). Each caller learns whether its own lease was renewed; a
 * failed statement fails every caller of that batch (each keeper then keeps its trust window and
 * retries on its next tick, as for a single renewal).
 */
export class RenewalBatch<T> {
  private pending: Array<{ item: T; resolve: (ok: boolean) => void; reject: (err: unknown) => void }> = [];
  private scheduled = false;
  /** Statements sent, for the benchmarks and tests. */
  batches = 0;

  constructor(private readonly renewMany: (items: T[]) => Promise<boolean[]>) {}

  renew(item: T): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    const batch = this.pending;
    this.pending = [];
    this.scheduled = false;
    if (!batch.length) return;
    this.batches++;
    try {
      const results = await this.renewMany(batch.map((b) => b.item));
      batch.forEach((b, i) => b.resolve(results[i] === true));
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }
}
