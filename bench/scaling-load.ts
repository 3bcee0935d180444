/**
 * The scaling bench's fixed, moderate workload (docs/scaling.md): the same cluster-wide rates at 1,
 * 3 and 9 replicas, every request sent round robin over the replicas' HTTP API as a gateway would.
 * Each part counts what was answered 2xx; a request that failed is counted apart (a run with
 * failures says so in its table). Token refreshes and monitor checks are counted at the fakes.
 */
import type { FakeOAuthServer } from '../test/fixtures/oauth-server.js';
import type { ChatUpstream } from '../test/fixtures/chat-upstream.js';
import { sleep } from './replicas.js';

/** The cluster-wide load, per second unless named otherwise. `BENCH_SCALING_*` overrides each. */
export interface ScalingLoad {
  /** OpenAI accounts; each token lives `refreshMarginS + refreshPeriodS`, so each refreshes about once per period. */
  accounts: number;
  refreshPeriodS: number;
  refreshMarginS: number;
  monitors: number;
  monitorIntervalS: number;
  tokenReads: number;
  snapshotReads: number;
  snapshotChanges: number;
  usageBatches: number;
  usageBatchSize: number;
  quotaRequests: number;
  quotaPerRequest: number;
}

export function loadFromEnv(env: NodeJS.ProcessEnv): ScalingLoad {
  const n = (name: string, dflt: number) => {
    const v = env[`BENCH_SCALING_${name}`];
    if (v === undefined || v === '') return dflt;
    const x = Number(v);
    if (!Number.isFinite(x) || x < 0) throw new Error(`BENCH_SCALING_${name}=${JSON.stringify(v)}: expected a number ≥ 0`);
    return x;
  };
  return {
    accounts: n('ACCOUNTS', 300),
    refreshPeriodS: n('REFRESH_PERIOD_S', 60),
    refreshMarginS: 300,
    monitors: n('MONITORS', 60),
    monitorIntervalS: n('MONITOR_INTERVAL_S', 15),
    tokenReads: n('TOKEN_READS', 20),
    snapshotReads: n('SNAPSHOT_READS', 20),
    snapshotChanges: n('SNAPSHOT_CHANGES', 1),
    usageBatches: n('USAGE_BATCHES', 5),
    usageBatchSize: n('USAGE_BATCH_SIZE', 20),
    quotaRequests: n('QUOTA_REQUESTS', 5),
    quotaPerRequest: n('QUOTA_PER_REQUEST', 4),
  };
}

/** Monotonic counters; a window's units are the difference of two readings. */
export interface Units {
  refreshes: number;
  monitorChecks: number;
  tokenReads: number;
  snapshotReads: number;
  snapshotChanges: number;
  usageBatches: number;
  usageEvents: number;
  quotaRequests: number;
  quotaIncrements: number;
  /** Outbox events applied to the Redis snapshot, all replicas (their `relay_jobs_scheduler_outbox_applied_total`). */
  outboxApplied: number;
  failures: number;
}

export const unitsDelta = (a: Units, b: Units): Units => Object.fromEntries(Object.keys(a).map((k) => [k, b[k as keyof Units] - a[k as keyof Units]])) as unknown as Units;

export type Call = (replica: number, path: string, body?: unknown, method?: string) => Promise<Record<string, unknown>>;

export class ScalingLoadGenerator {
  private readonly c = { tokenReads: 0, snapshotReads: 0, snapshotChanges: 0, usageBatches: 0, usageEvents: 0, quotaRequests: 0, quotaIncrements: 0, failures: 0 };
  readonly errors: string[] = [];
  private stopped = false;
  private rr = 0;
  private loops: Array<Promise<void>> = [];

  constructor(
    private readonly load: ScalingLoad,
    private readonly replicas: number,
    private readonly call: Call,
    private readonly accountIds: number[],
    private readonly tag: string,
  ) {}

  private next(): number {
    return this.rr++ % this.replicas;
  }

  /** `body(n)` `perSec` times a second, at most 100 in flight (a backlog waits rather than piles up). */
  private async paced(perSec: number, body: (n: number) => Promise<void>): Promise<void> {
    if (perSec <= 0) return;
    const inFlight = new Set<Promise<void>>();
    const t0 = Date.now();
    for (let n = 0; !this.stopped; n++) {
      const due = t0 + (n * 1000) / perSec;
      if (due > Date.now()) await sleep(due - Date.now());
      if (this.stopped) break;
      const p = body(n)
        .catch((err: Error) => {
          this.c.failures++;
          if (this.errors.length < 20) this.errors.push(err.message.slice(0, 300));
        })
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
      while (inFlight.size > 100) await Promise.race(inFlight);
    }
    await Promise.all(inFlight);
  }

  start(): void {
    const L = this.load;
    const ids = this.accountIds;
    this.loops = [
      this.paced(L.tokenReads, async (n) => {
        await this.call(this.next(), `/accounts/${ids[n % ids.length]}/token`, undefined, 'POST');
        this.c.tokenReads++;
      }),
      this.paced(L.snapshotReads, async () => {
        await this.call(this.next(), '/scheduler/accounts?platform=openai');
        this.c.snapshotReads++;
      }),
      this.paced(L.snapshotChanges, async (n) => {
        // Half the accounts flip in and out of the bucket; the rest keep serving.
        await this.call(this.next(), `/accounts/${ids[(n * 2) % ids.length]}`, { schedulable: Math.floor(n / ids.length) % 2 === 1 }, 'PATCH');
        this.c.snapshotChanges++;
      }),
      this.paced(L.usageBatches, async (b) => {
        const events = Array.from({ length: L.usageBatchSize }, (_, i) => ({
          request_id: `${this.tag}-${b}-${i}`,
          user_id: `u${(b * L.usageBatchSize + i) % 500}`,
          account_id: String(ids[(b + i) % ids.length]),
          platform: 'openai',
          model: 'gpt-scaling',
          input_tokens: 100 + i,
          output_tokens: 20,
          cost: '0.0012',
        }));
        await this.call(this.next(), '/usage', { events });
        this.c.usageBatches++;
        this.c.usageEvents += events.length;
      }),
      this.paced(L.quotaRequests, async (r) => {
        // 100 users: each counter is seen (and seeded from PostgreSQL) in the first seconds; the window sees steady increments.
        const increments = Array.from({ length: L.quotaPerRequest }, (_, i) => ({ user_id: `u${(r * L.quotaPerRequest + i) % 100}`, platform: 'openai', amount: 10 }));
        await this.call(this.next(), '/quota/usage', { increments });
        this.c.quotaRequests++;
        this.c.quotaIncrements += increments.length;
      }),
    ];
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.loops);
  }

  /** The counters now; `fakes` count refreshes and checks, `outboxApplied` is read from the replicas. */
  units(oauth: FakeOAuthServer, chat: ChatUpstream, outboxApplied: number): Units {
    return { ...this.c, refreshes: oauth.successes, monitorChecks: chat.total, outboxApplied };
  }
}

/** Sum of `relay_jobs_scheduler_outbox_applied_total` over the replicas' /metrics. */
export async function outboxApplied(ports: readonly number[]): Promise<number> {
  let n = 0;
  for (const p of ports) {
    const text = await fetch(`http://127.0.0.1:${p}/metrics`).then((r) => r.text());
    for (const m of text.matchAll(/^relay_jobs_scheduler_outbox_applied_total\{[^}]*\} (\d+(?:\.\d+)?)/gm)) n += Number(m[1]);
  }
  return n;
}
