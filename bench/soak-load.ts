/**
 * The soak's running load and its observers, each a loop until `stop`:
 * - usage events over HTTP in batches, each event with its request id (the idempotency key), a
 *   failed batch retried as is on another replica, as a gateway does; `acked` holds what a 200 committed;
 * - image batches with an Idempotency-Key, retried the same way;
 * - snapshot changes (an account's `schedulable` flipped through PATCH /accounts/{id});
 * - the scheduler snapshot read on every replica, every answer's epoch kept with when it was sent
 *   and when it came back (the checker's "epochs never went back");
 * - active accounts whose stored token had lapsed, sampled from PostgreSQL.
 * Every failed request is logged with its time, for what each fault cost.
 */
import pg from 'pg';
import { alive, type SoakReplica } from './soak-services.js';
import { ADMIN, PLATFORMS, type Seeded } from './soak-setup.js';
import { prng, type Load } from './soak-schedule.js';

export interface Failure {
  at: number;
  what: 'usage' | 'image' | 'snapshot_change' | 'snapshot_read';
  detail: string;
}

export interface EpochRead {
  platform: string;
  replica: string;
  sent: number;
  at: number;
  epoch: number;
  source: string;
}

export interface LoadRecord {
  acked: Set<string>;
  usageSent: number;
  usageBatches: number;
  imageAccepted: Set<number>;
  imageRefused: Set<number>;
  snapshotChanges: number;
  epochs: EpochRead[];
  lapses: Array<{ at: number; ids: number[] }>;
  failures: Failure[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class LoadGenerator {
  readonly rec: LoadRecord = { acked: new Set(), usageSent: 0, usageBatches: 0, imageAccepted: new Set(), imageRefused: new Set(), snapshotChanges: 0, epochs: [], lapses: [], failures: [] };
  private stopped = false;
  /** Settles at `stop()`: a paced loop's wait for its next due time ends with it (a 20-minute run's one image batch a run was next due past the end, and the stop waited for it). */
  private stopSignal!: () => void;
  private readonly stopping = new Promise<void>((resolve) => (this.stopSignal = resolve));
  private rr = 0;
  private readonly loops: Array<Promise<void>> = [];

  constructor(
    private readonly replicas: SoakReplica[],
    private readonly load: Load,
    private readonly seeded: Seeded,
    private readonly sql: pg.Pool,
    private readonly tag: string,
    private readonly seed: number,
    private readonly runMs: number,
  ) {}

  /** The next live, not stopped replica, round robin. */
  private pick(): SoakReplica | null {
    for (let k = 0; k < this.replicas.length; k++) {
      const r = this.replicas[this.rr++ % this.replicas.length]!;
      if (alive(r) && !r.stopped) return r;
    }
    return null;
  }

  private async call(
    r: SoakReplica,
    path: string,
    init: { method?: string; body?: unknown; headers?: Record<string, string>; timeoutMs?: number } = {},
  ): Promise<{ status: number; json: Record<string, unknown> | null }> {
    const res = await fetch(`http://127.0.0.1:${r.port}/api/v1${path}`, {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { authorization: `Bearer ${ADMIN}`, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }), ...init.headers },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: AbortSignal.timeout(init.timeoutMs ?? 10_000),
    });
    const text = await res.text();
    let json: Record<string, unknown> | null;
    try {
      json = text ? (JSON.parse(text) as Record<string, unknown>) : null;
    } catch {
      json = { raw: text.slice(0, 200) };
    }
    return { status: res.status, json };
  }

  /** Until a replica answers 2xx (or one of `final`), retrying the same request on the next replica. */
  private async untilAnswered(what: Failure['what'], path: string, init: Parameters<LoadGenerator['call']>[2], final: number[] = []): Promise<number> {
    for (let attempt = 0; ; attempt++) {
      const r = this.pick();
      if (r) {
        try {
          const res = await this.call(r, path, init);
          if ((res.status >= 200 && res.status < 300) || final.includes(res.status)) return res.status;
          this.rec.failures.push({ at: Date.now(), what, detail: `${r.id} ${res.status} ${JSON.stringify(res.json).slice(0, 160)}` });
        } catch (err) {
          this.rec.failures.push({ at: Date.now(), what, detail: `${r.id} ${(err as Error).message}` });
        }
      }
      if (this.stopped && attempt > 600) throw new Error(`soak: ${what} ${path} never answered`);
      await sleep(Math.min(2000, 100 * (attempt + 1)));
    }
  }

  start(): void {
    this.loops.push(this.usage(), this.images(), this.snapshotChanges(), this.epochReader(), this.lapseSampler());
  }

  /** Stops the loops; batches in flight are still retried until a replica takes them. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopSignal();
    await Promise.all(this.loops);
  }

  private async paced(perSec: number, body: (n: number) => Promise<void>): Promise<void> {
    const inFlight = new Set<Promise<void>>();
    const t0 = Date.now();
    for (let n = 0; !this.stopped; n++) {
      const due = t0 + (n * 1000) / perSec;
      if (due > Date.now()) await Promise.race([sleep(due - Date.now()), this.stopping]);
      if (this.stopped) break;
      const p = body(n).finally(() => inFlight.delete(p));
      inFlight.add(p);
      // A backlog beyond 200 requests waits: the load generator must not itself run out of memory.
      while (inFlight.size > 200) await Promise.race(inFlight);
    }
    await Promise.all(inFlight);
  }

  private usage(): Promise<void> {
    const size = this.load.usageBatch;
    const accounts = this.seeded.accounts;
    return this.paced(this.load.usageEventsPerSec / size, async (b) => {
      const events = Array.from({ length: size }, (_, i) => {
        const a = accounts[(b * size + i) % accounts.length]!;
        return {
          request_id: `${this.tag}-${b}-${i}`,
          user_id: `u${(b + i) % 500}`,
          account_id: String(a.id),
          platform: a.platform,
          model: 'soak-model',
          input_tokens: 100 + i,
          output_tokens: 20,
          cost: '0.0012',
        };
      });
      this.rec.usageSent += size;
      this.rec.usageBatches++;
      await this.untilAnswered('usage', '/usage', { body: { events } });
      for (const e of events) this.rec.acked.add(e.request_id);
    });
  }

  /** The batches spread over the first 60% of the run. */
  private images(): Promise<void> {
    const users = [...this.seeded.users.keys()];
    const n = this.load.imageBatches;
    return this.paced(n / ((this.runMs * 0.6) / 1000), async (i) => {
      if (i >= n) return;
      const body = { user_id: users[i % users.length], model: 'img_soak', prompts: Array.from({ length: 1 + (i % 4) }, (_, p) => `soak prompt ${i}.${p}`), n: 1 + (i % 2) };
      const status = await this.untilAnswered('image', '/image-batches', { body, headers: { 'idempotency-key': `${this.tag}-img-${i}` } }, [402]);
      (status === 402 ? this.rec.imageRefused : this.rec.imageAccepted).add(i);
    });
  }

  private snapshotChanges(): Promise<void> {
    const rand = prng(this.seed ^ 0xc4a9);
    const accounts = this.seeded.accounts;
    return this.paced(this.load.snapshotChangesPerSec, async () => {
      const a = accounts[Math.floor(rand() * accounts.length)]!;
      await this.untilAnswered('snapshot_change', `/accounts/${a.id}`, { method: 'PATCH', body: { schedulable: rand() < 0.5 } });
      this.rec.snapshotChanges++;
    });
  }

  private async epochReader(): Promise<void> {
    while (!this.stopped) {
      await Promise.all(
        this.replicas
          .filter((r) => alive(r) && !r.stopped)
          .flatMap((r) =>
            PLATFORMS.map(async (platform) => {
              const sent = Date.now();
              try {
                const res = await this.call(r, `/scheduler/accounts?platform=${platform}`, { timeoutMs: 5000 });
                if (res.status === 200 && typeof res.json?.epoch === 'number')
                  this.rec.epochs.push({ platform, replica: r.id, sent, at: Date.now(), epoch: res.json.epoch, source: String(res.json.source) });
                else this.rec.failures.push({ at: Date.now(), what: 'snapshot_read', detail: `${r.id} ${res.status}` });
              } catch (err) {
                this.rec.failures.push({ at: Date.now(), what: 'snapshot_read', detail: `${r.id} ${(err as Error).message}` });
              }
            }),
          ),
      );
      await sleep(1000);
    }
  }

  /** Active accounts whose stored access token had expired, every 5 s (PostgreSQL restarts make a sample fail: skipped). */
  private async lapseSampler(): Promise<void> {
    while (!this.stopped) {
      try {
        const { rows } = await this.sql.query(`SELECT id FROM accounts WHERE status = 'active' AND token_expires_at < clock_timestamp() ORDER BY id LIMIT 50`);
        if (rows.length) this.rec.lapses.push({ at: Date.now(), ids: rows.map((r) => Number(r.id)) });
      } catch {
        // the direct connection is down during a PostgreSQL restart; the owner reconnects it
      }
      await sleep(5000);
    }
  }
}
