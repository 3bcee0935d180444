/**
 * Token refresh at scale.
 * 1. The refresh scheduler with 100,000 accounts: heap memory and lateness (fire time − due time)
 *    of our DueQueue (one timer, a heap) against one timer per account (codex-proxy-rs spawned a
 *    task per account and kept its handle in a map), in the same process, due times spread over
 *    the same window.
 * 2. Sustained refreshes per second through the whole guard (in-flight map, concurrency slots,
 *    rate limiter, Redis lock + PostgreSQL lease, version check, sealed credential write) against
 *    the loopback OAuth server, compared with bare refresh calls to the same server at the same
 *    concurrency.
 */
import { openaiProvider } from '../test/helpers/providers.js';
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { SecretBox } from '../src/store/secret-box.js';
import { Accounts } from '../src/areas/accounts/store/accounts.js';
import { RefreshLeases } from '../src/areas/accounts/store/refresh-lease.js';
import { OAuthClient } from '../src/areas/accounts/oauth-client.js';
import { Refresher } from '../src/areas/accounts/refresher.js';
import { DueQueue } from '../src/areas/accounts/due-queue.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { AccountMetrics } from '../src/areas/accounts/metrics.js';
import { accountsConfig } from '../src/areas/accounts/config.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { FakeOAuthServer } from '../test/fixtures/oauth-server.js';
import { HZ, readStat } from '../test/helpers/machine-load.js';
import { Deadline } from '../src/time/deadline.js';

export interface SchedulerStats {
  design: string;
  accounts: number;
  heapMiB: number;
  p50LateMs: number;
  p99LateMs: number;
  maxLateMs: number;
}

const gc = (globalThis as { gc?: () => void }).gc;
function heapUsed(): number {
  gc?.();
  gc?.();
  return process.memoryUsage().heapUsed;
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

async function measure(design: string, n: number, windowMs: number, arm: (id: number, at: number, done: (late: number) => void) => void): Promise<SchedulerStats> {
  const late: number[] = [];
  let resolve!: () => void;
  const all = new Promise<void>((r) => (resolve = r));
  const before = heapUsed();
  const start = Date.now() + 500;
  for (let i = 0; i < n; i++) {
    arm(i, start + Math.floor((i * 7919) % windowMs), (l) => {
      late.push(l);
      if (late.length === n) resolve();
    });
  }
  const heapMiB = (heapUsed() - before) / 2 ** 20;
  await all;
  late.sort((a, b) => a - b);
  return { design, accounts: n, heapMiB, p50LateMs: pct(late, 0.5), p99LateMs: pct(late, 0.99), maxLateMs: late.at(-1)! };
}

export async function benchScheduler(n = 100_000, windowMs = 20_000): Promise<SchedulerStats[]> {
  const results: SchedulerStats[] = [];
  // Baseline: one timer per account plus the id → handle map to cancel it.
  {
    const timers = new Map<number, NodeJS.Timeout>();
    results.push(
      await measure('one timer per account (codex-proxy-rs)', n, windowMs, (id, at, done) => {
        timers.set(
          id,
          setTimeout(() => {
            timers.delete(id);
            done(Date.now() - at);
          }, at - Date.now()),
        );
      }),
    );
  }
  // Ours: one DueQueue, one timer.
  {
    const callbacks = new Map<number, (late: number) => void>();
    const q = new DueQueue(systemClock, (e) => {
      const cb = callbacks.get(e.id)!;
      callbacks.delete(e.id);
      cb(Date.now() - e.at);
    });
    results.push(
      await measure('relay-jobs DueQueue', n, windowMs, (id, at, done) => {
        callbacks.set(id, done);
        q.schedule({ id, at, kind: 'refresh', version: 1 });
      }),
    );
    await q.stop(Deadline.reached(systemClock));
  }
  return results;
}

export interface LatenessStats {
  accounts: number;
  windowS: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export interface ThroughputStats {
  path: string;
  refreshes: number;
  seconds: number;
  perSecond: number;
  /** CPU per refresh (ms): this process (client, fake OAuth server and guard in one thread) and the database's backends, from /proc. */
  cpu?: { benchMs: number; postgresMs: number };
}

/** CPU of this process and of the PostgreSQL backends serving `db`'s database (same machine, /proc), in ms. */
async function cpuNow(db: PgDb): Promise<{ bench: number; postgres: number }> {
  const { rows } = await db.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE datname = current_database()`);
  let pgTicks = 0;
  for (const r of rows) {
    try {
      pgTicks += readStat(String(r.pid)).self;
    } catch {
      // a backend that just exited
    }
  }
  const u = process.cpuUsage();
  return { bench: (u.user + u.system) / 1000, postgres: (pgTicks / HZ) * 1000 };
}
const cpuPer = (a: { bench: number; postgres: number }, b: { bench: number; postgres: number }, n: number) => ({ benchMs: (b.bench - a.bench) / n, postgresMs: (b.postgres - a.postgres) / n });

export async function benchRefreshThroughput(n = 3000, concurrency = 8): Promise<{ results: ThroughputStats[]; lateness: LatenessStats }> {
  let lateness: LatenessStats | undefined;
  const oauth = await FakeOAuthServer.start({ clientId: 'bench' });
  const fresh = await freshDatabase();
  const prefix = uniqueName('rjbenchtok');
  const db = await PgDb.connect({ url: fresh.url, poolSize: concurrency + 2, connectTimeoutMs: 5000 });
  const redis = new Redis(REDIS_URL);
  const client = new OAuthClient();
  // The guard's settings at their configured defaults (written once, in the accounts area's config).
  const auth = accountsConfig.auth.parse({});
  const provider = openaiProvider({ tokenUrl: oauth.tokenUrl, clientId: 'bench', maxPerSecond: 100_000 });
  try {
    await migrate(db);
    const results: ThroughputStats[] = [];
    // Baseline: bare refresh calls (same HTTP client, same server), no store, no lock.
    {
      const tokens = Array.from({ length: n }, (_, i) => oauth.issue(`raw-${i}`).refresh_token);
      let next = 0;
      const c0 = await cpuNow(db);
      const t = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < tokens.length) {
            const r = await client.refresh(provider, tokens[next++]!, { proxyUrl: null, timeoutMs: 5000, replyTimeoutMs: auth.refresh_reply_timeout, nowMs: Date.now });
            if (r.kind !== 'ok') throw new Error(`bare refresh failed: ${JSON.stringify(r)}`);
          }
        }),
      );
      const s = (performance.now() - t) / 1000;
      results.push({ path: 'bare refresh call (baseline)', refreshes: n, seconds: s, perSecond: n / s, cpu: cpuPer(c0, await cpuNow(db), n) });
    }
    // The full guard.
    {
      const box = SecretBox.fromBase64(Buffer.alloc(32, 3).toString('base64'));
      const accounts = new Accounts(db, box);
      const ids: number[] = [];
      for (let i = 0; i < n; i++) {
        const c = oauth.issue(`acct-${i}`);
        ids.push((await accounts.create({ platform: 'openai', name: `acct-${i}`, credentials: c, tokenExpiresAt: new Date(Date.now() + 60_000) })).id);
      }
      const refresher = new Refresher({
        accounts,
        leases: new RefreshLeases(db, redis, { prefix, env: 'bench' }, 'bench', 300_000),
        oauth: client,
        providers: new Map([['openai', provider]]),
        clock: systemClock,
        log: silentLogger(),
        metrics: new Metrics().group(AccountMetrics),
        concurrency,
        requestTimeoutMs: 5000,
        replyTimeoutMs: auth.refresh_reply_timeout,
        breakerThreshold: auth.refresh_breaker_threshold,
        breakerOpenMs: auth.refresh_breaker_open,
        leaseTtlMs: 300_000,
        recoveryDelayMs: 600_000,
      });
      const c0 = await cpuNow(db);
      const t = performance.now();
      const outcomes = await Promise.all(ids.map((id) => refresher.request(id, 'schedule', 1)));
      const s = (performance.now() - t) / 1000;
      const cpu = cpuPer(c0, await cpuNow(db), n);
      const bad = outcomes.filter((o) => o.result !== 'refreshed');
      if (bad.length) throw new Error(`${bad.length} refreshes did not succeed: ${JSON.stringify(bad[0])}`);
      if (oauth.reuses) throw new Error('refresh token reused');
      results.push({ path: 'relay-jobs Refresher (lock + lease + CAS write)', refreshes: n, seconds: s, perSecond: n / s, cpu });

      // Lateness of whole refreshes: accounts due spread over a window at about half the rate
      // measured above; each sample is (refresh stored) − (due time).
      const windowMs = 10_000;
      const count = Math.min(ids.length, Math.floor((results[1]!.perSecond / 2) * (windowMs / 1000)));
      const late: number[] = [];
      let resolve!: () => void;
      const all = new Promise<void>((r) => (resolve = r));
      const q = new DueQueue(systemClock, (e) => {
        void refresher.request(e.id, 'schedule', 2).then((o) => {
          if (o.result !== 'refreshed') throw new Error(`lateness run: ${JSON.stringify(o)}`);
          late.push(Date.now() - e.at);
          if (late.length === count) resolve();
        });
      });
      const start = Date.now() + 200;
      for (let i = 0; i < count; i++) q.schedule({ id: ids[i]!, at: start + Math.floor((i * windowMs) / count), kind: 'refresh', version: 2 });
      await all;
      await q.stop(Deadline.reached(systemClock));
      late.sort((a, b) => a - b);
      lateness = { accounts: count, windowS: windowMs / 1000, p50Ms: pct(late, 0.5), p99Ms: pct(late, 0.99), maxMs: late.at(-1)! };
    }
    return { results, lateness: lateness! };
  } finally {
    await client.close();
    redis.disconnect();
    await db.close();
    await fresh.drop();
    await dropRedisPrefix(prefix);
    await oauth.close();
  }
}
