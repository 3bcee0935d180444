/**
 * Issue 26's latency: how long a change takes to reach the loop that acts on it, with three
 * `relay-jobs start` replicas on a private database and a private Redis, every default job on
 * (token refresh off: no real provider), once with wake-ups on (the default) and once with
 * `wakeups.enabled: false` (the poll-only path, the baseline). Both clusters run side by side
 * so they share the machine's load at every moment; samples alternate between them. Three
 * measures, one sample at a time, each after a seeded 100-400 ms gap so samples fall at every
 * phase of the poll loops:
 *
 *   account  an admin API change on replica A (create, disable, re-enable, in turn) → the entry
 *            changed in the Redis scheduler snapshot the gateway reads through replica B: the
 *            bench subscribes to the bucket's keyspace notifications and reads the account's
 *            field on each one; the time is when that read answered (an upper bound). At the end
 *            replica B's read API must agree with what was measured.
 *   monitor  POST /monitors (replicas in turn) → its first probe arriving at a loopback upstream
 *            (the upstream's own arrival time).
 *   image    POST /image-batches (replicas in turn) → the batch's input file upload arriving at a
 *            loopback Batch API (`FakeImageProvider.onArrival`).
 *
 * Background load on both clusters: BENCH_LATENCY_MONITORS (30) monitors probing every 15 s, phases
 * spread. BENCH_LATENCY_SAMPLES (100) samples per measure. All times are on this process's clock.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Redis } from 'ioredis';
import { CLI, ServiceProcess, cleanEnv } from '../test/helpers/cli.js';
import { PrivateRedis, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { ChatUpstream } from '../test/fixtures/chat-upstream.js';
import { FakeImageProvider } from '../test/fixtures/image-provider.js';
import { replicaEnv, sleep } from './replicas.js';

const ADMIN = 'bench-admin-token-0123456789';
const SAMPLE_TIMEOUT_MS = 15_000;

export interface Percentiles {
  n: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

export interface LatencyRun {
  wakeups: boolean;
  account: Percentiles;
  monitor: Percentiles;
  image: Percentiles;
  /** The admin API call alone (request → response), part of each measure. */
  api: { account: Percentiles; monitor: Percentiles; image: Percentiles };
  /** 1-minute load average at the start and the end of the whole run. */
  load: [number, number];
  /** One `SELECT 1` from this process every 200 ms during the run: what a PostgreSQL round trip cost under this load. */
  pgRoundTrip: Percentiles;
}

/** Nearest-rank percentiles. */
export function percentiles(xs: number[]): Percentiles {
  const s = [...xs].sort((a, b) => a - b);
  const at = (p: number) => s[Math.max(0, Math.ceil(p * s.length) - 1)] ?? NaN;
  return { n: s.length, p50: at(0.5), p95: at(0.95), p99: at(0.99), max: s.at(-1) ?? NaN };
}

/** mulberry32: both runs get the same gaps. */
function gaps(seed: number): () => number {
  let t = seed;
  return () => {
    t = (t + 0x6d2b79f5) | 0;
    let x = Math.imul(t ^ (t >>> 15), t | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return 100 + (((x ^ (x >>> 14)) >>> 0) / 4294967296) * 300;
  };
}

/** Waits (1 ms in-process checks; the measured time comes from the thing observed, not this loop). */
async function until<T>(what: string, probe: () => T | undefined): Promise<T> {
  const deadline = Date.now() + SAMPLE_TIMEOUT_MS;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`latency bench: ${what} not seen within ${SAMPLE_TIMEOUT_MS} ms`);
    await sleep(1);
  }
}

/** Watches one snapshot bucket through keyspace notifications; `visible(id, want)` resolves when the account's entry is (or is not) there. */
class BucketWatch {
  private waiter: { id: number; want: boolean; resolve: (at: number) => void } | null = null;

  private constructor(
    private readonly sub: Redis,
    private readonly rd: Redis,
    private readonly key: string,
  ) {
    sub.on('message', () => this.check());
  }

  static async open(url: string, key: string): Promise<BucketWatch> {
    const rd = new Redis(url);
    const sub = new Redis(url);
    await rd.config('SET', 'notify-keyspace-events', 'Kh'); // a private redis-server: hash commands, keyspace channel
    await sub.subscribe(`__keyspace@0__:${key}`);
    return new BucketWatch(sub, rd, key);
  }

  /** true: a live entry; false: a tombstone or no field. */
  async entry(id: number): Promise<boolean> {
    const v = await this.rd.hget(this.key, `a:${id}`);
    return v !== null && !/^\d+\|$/.test(v);
  }

  private check(): void {
    const w = this.waiter;
    if (!w) return;
    void this.entry(w.id).then((live) => {
      if (live === w.want && this.waiter === w) {
        this.waiter = null;
        w.resolve(Date.now()); // when the read answered: at or after the write
      }
    });
  }

  visible(id: number, want: boolean): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`latency bench: account ${id} never became ${want ? 'visible' : 'hidden'} in the snapshot`)), SAMPLE_TIMEOUT_MS);
      this.waiter = {
        id,
        want,
        resolve: (at) => {
          clearTimeout(timer);
          resolve(at);
        },
      };
      this.check(); // the write may have landed before the waiter was set
    });
  }

  close(): void {
    this.sub.disconnect();
    this.rd.disconnect();
  }
}

type Api = (i: number, path: string, body?: unknown, headers?: Record<string, string>) => Promise<Record<string, unknown>>;

/** One three-replica cluster with its own database, Redis, loopback upstream and Batch API; the samples taken on it. */
class LatencyCluster {
  readonly accountMs: number[] = [];
  readonly monitorMs: number[] = [];
  readonly imageMs: number[] = [];
  readonly apiMs = { account: [] as number[], monitor: [] as number[], image: [] as number[] };
  private readonly live = new Map<number, boolean>();
  private accountId = 0;
  private readonly uploads: number[] = [];
  private readonly cleanups: Array<() => Promise<void> | void> = [];
  readonly procs: Array<{ svc: ServiceProcess; port: number }> = [];
  private watch!: BucketWatch;
  private up!: ChatUpstream;
  private userId = 0;
  private readonly expires = new Date(Date.now() + 30 * 86_400_000).toISOString();

  private constructor(readonly wakeups: boolean) {}

  static async start(wakeups: boolean): Promise<LatencyCluster> {
    const c = new LatencyCluster(wakeups);
    try {
      await c.boot();
    } catch (err) {
      await c.stop();
      throw err;
    }
    return c;
  }

  readonly api: Api = async (i, path, body, headers = {}) => {
    const res = await fetch(`http://127.0.0.1:${this.procs[i]!.port}/api/v1${path}`, {
      method: body === undefined ? 'GET' : 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const j = (await res.json()) as Record<string, unknown>;
    if (res.status >= 300) throw new Error(`latency bench: ${path} answered ${res.status}: ${JSON.stringify(j)}`);
    return j;
  };

  private async boot(): Promise<void> {
    const db = await freshDatabase();
    this.cleanups.push(() => db.drop());
    const redis = await PrivateRedis.start();
    this.cleanups.push(() => redis.stop());
    const up = (this.up = await ChatUpstream.start());
    this.cleanups.push(() => up.close());
    const fake = await FakeImageProvider.start();
    this.cleanups.push(() => fake.stop());
    const dir = await mkdtemp(join(tmpdir(), 'rjlat-'));
    this.cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    this.cleanups.push(() => sql.end());
    const prefix = uniqueName('rjlat');
    const side = this.wakeups ? 'on' : 'off';
    for (let i = 0; i < 3; i++) {
      const env = await replicaEnv(
        `${side}${i}`,
        { dbUrl: db.url, redisUrl: redis.url, prefix },
        {
          RELAY_JOBS_DATA_DIR: join(dir, `r${i}`),
          RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: '3',
          RELAY_JOBS__LOGGING__LEVEL: process.env.BENCH_LATENCY_LOG_LEVEL ?? 'info',
          RELAY_JOBS__WAKEUPS__ENABLED: String(this.wakeups),
          RELAY_JOBS__AUTH__REFRESH_ENABLED: 'false',
          RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: fake.url,
          RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-bench-image-key',
          RELAY_JOBS__IMAGE__PRICES__IMG_LAT: '1',
          RELAY_JOBS__IMAGE__STORAGE_DIR: join(dir, 'objects'),
        },
      );
      this.procs.push({
        svc: new ServiceProcess(`${side}${i}`, spawn(process.execPath, [CLI, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })),
        port: Number(env.RELAY_JOBS_HTTP_PORT),
      });
    }
    this.cleanups.push(async () => {
      const dump = process.env.BENCH_LATENCY_LOGS; // a directory: each replica's log lines, for tracing a slow path
      if (dump) for (const p of this.procs) await writeFile(join(dump, `${p.svc.name}.log`), p.svc.lines.join('\n'));
      for (const p of this.procs) if (p.svc.proc.exitCode === null) p.svc.proc.kill('SIGTERM');
      await Promise.all(this.procs.map((p) => p.svc.exited));
    });
    await Promise.all(this.procs.map((p) => p.svc.waitForLine(/relay-jobs started/)));
    if (this.wakeups) await Promise.all(this.procs.map((p) => p.svc.waitForLine(/wake-up listener on the liveness session/)));

    // The same background on both clusters: monitors probing every 15 s, phases spread; one paying user.
    up.setDefault({ mode: 'ok', latencyMs: [5, 50] });
    for (let m = 0; m < Number(process.env.BENCH_LATENCY_MONITORS ?? 30); m++) {
      up.addApiKey(`bg-${m}`);
      await this.api(m % 3, '/monitors', { name: `bg${m}`, base_url: up.url, model: 'gpt-bg', api_key: `bg-${m}`, interval: '15s', jitter: '15s', timeout: '5s' });
    }
    const { rows } = await sql.query(`INSERT INTO billing_users (email, balance) VALUES ('latency@bench', 1000000000) RETURNING id`);
    this.userId = Number(rows[0].id);
    fake.onArrival = (method, path, at) => {
      if (method === 'POST' && path.endsWith('/files')) this.uploads.push(at);
    };
    // The consumer writes only into open buckets: replica B's first read builds this one.
    const seed = Number((await this.api(0, '/accounts', this.account('seed'))).id);
    this.live.set(seed, true);
    const deadline = Date.now() + 60_000;
    while (!(await this.read().then((a) => a.source === 'snapshot' && a.accounts.some((x) => x.id === seed)))) {
      if (Date.now() > deadline) throw new Error('latency bench: the openai bucket never served from the snapshot');
      await sleep(100);
    }
    const watch = (this.watch = await BucketWatch.open(redis.url, `${prefix}:bench:{sched}:bucket:openai:`));
    this.cleanups.push(() => watch.close());
  }

  private account(name: string) {
    return { platform: 'openai', name, credentials: { access_token: `${name}-token`, expires_at: this.expires } };
  }

  private async read() {
    return (await this.api(1, '/scheduler/accounts?platform=openai')) as { source: string; accounts: Array<{ id: number }> };
  }

  /** Sample i: create, disable, re-enable in turn, on replica A (0); seen in the bucket replica B (1) serves. */
  async accountSample(i: number): Promise<void> {
    const step = i % 3;
    const t0 = Date.now();
    let seen: Promise<number>;
    if (step === 0) {
      this.accountId = Number((await this.api(0, '/accounts', this.account(`lat${i}`))).id);
      seen = this.watch.visible(this.accountId, true);
    } else {
      seen = this.watch.visible(this.accountId, step === 2);
      await this.api(0, `/accounts/${this.accountId}/${step === 1 ? 'disable' : 'enable'}`, {});
    }
    this.apiMs.account.push(Date.now() - t0);
    this.accountMs.push((await seen) - t0);
    this.live.set(this.accountId, step !== 1);
  }

  /** Replica B's read API agrees with what was measured (not timed). */
  async checkAccounts(): Promise<void> {
    const answer = await this.read();
    const served = new Set(answer.accounts.map((a) => a.id));
    const wrong = [...this.live].filter(([a, on]) => served.has(a) !== on);
    if (answer.source !== 'snapshot' || wrong.length) throw new Error(`latency bench: replica B answered ${answer.source} and disagrees on accounts ${wrong.map(([a]) => a).join(', ')}`);
  }

  async monitorSample(i: number): Promise<void> {
    const key = `lat-m${i}`;
    this.up.addApiKey(key);
    const t0 = Date.now();
    await this.api(i % 3, '/monitors', { name: key, base_url: this.up.url, model: 'gpt-lat', api_key: key, interval: '1h', timeout: '5s' });
    this.apiMs.monitor.push(Date.now() - t0);
    const hit = await until(`monitor ${key}'s first probe`, () => this.up.hits.get(key)?.[0]);
    this.monitorMs.push(hit.start - t0);
  }

  async imageSample(i: number): Promise<void> {
    const before = this.uploads.length;
    const t0 = Date.now();
    await this.api(i % 3, '/image-batches', { user_id: this.userId, model: 'img_lat', prompts: [`a lighthouse ${i}`], n: 1 }, { 'idempotency-key': `lat-${i}` });
    this.apiMs.image.push(Date.now() - t0);
    const at = await until(`image batch ${i}'s upload`, () => (this.uploads.length > before ? this.uploads[before] : undefined));
    this.imageMs.push(at - t0);
  }

  async stop(): Promise<void> {
    for (const fn of this.cleanups.splice(0).reverse()) await Promise.resolve(fn()).catch(() => undefined);
  }
}

/**
 * Both clusters run side by side, so they share the machine's load at every moment; samples
 * alternate between them (which goes first alternates too), each after a seeded 100-400 ms gap.
 */
export async function runLatency(samples = Number(process.env.BENCH_LATENCY_SAMPLES ?? 100)): Promise<LatencyRun[]> {
  const load0 = loadavg()[0]!;
  const clusters: LatencyCluster[] = [];
  const db = await freshDatabase(); // only for the round-trip sampler
  const sql = new pg.Client({ connectionString: db.url });
  await sql.connect();
  const rtt: number[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const t = performance.now();
      await sql.query('SELECT 1');
      rtt.push(performance.now() - t);
      await sleep(200);
    }
  })();
  try {
    clusters.push(await LatencyCluster.start(true), await LatencyCluster.start(false));
    const next = gaps(26);
    const each = async (sample: (c: LatencyCluster, i: number) => Promise<void>) => {
      for (let i = 0; i < samples; i++) {
        for (const c of i % 2 ? [...clusters].reverse() : clusters) {
          await sleep(next());
          await sample(c, i);
        }
      }
    };
    await each((c, i) => c.accountSample(i));
    for (const c of clusters) await c.checkAccounts();
    await each((c, i) => c.monitorSample(i));
    await each((c, i) => c.imageSample(i));
    sampling = false;
    await sampler;
    const load: [number, number] = [load0, loadavg()[0]!];
    return clusters.map((c) => ({
      wakeups: c.wakeups,
      pgRoundTrip: percentiles(rtt),
      account: percentiles(c.accountMs),
      monitor: percentiles(c.monitorMs),
      image: percentiles(c.imageMs),
      api: { account: percentiles(c.apiMs.account), monitor: percentiles(c.apiMs.monitor), image: percentiles(c.apiMs.image) },
      load,
    }));
  } finally {
    sampling = false;
    await sampler.catch(() => undefined);
    for (const c of clusters) await c.stop();
    await sql.end();
    await db.drop();
  }
}

export function latencyTable(runs: LatencyRun[]): string {
  const on = runs.find((r) => r.wakeups);
  const off = runs.find((r) => !r.wakeups);
  const f = (n: number) => n.toFixed(0);
  const lines = ['| change → effect | wake-ups | samples | p50 ms | p95 ms | p99 ms | max ms | target p99 | of which the API call, p50 / p99 ms |', '|---|---|---|---|---|---|---|---|---|'];
  const measures = [
    ['account', 'account change on A → Redis snapshot (read via B)', '< 50 ms'],
    ['monitor', 'monitor created → first probe started', '< 100 ms'],
    ['image', 'image batch submitted → upload started', '< 100 ms'],
  ] as const;
  for (const [k, label, target] of measures)
    for (const r of runs) {
      const p = r[k];
      lines.push(`| ${label} | ${r.wakeups ? 'on' : 'off'} | ${p.n} | ${f(p.p50)} | ${f(p.p95)} | ${f(p.p99)} | ${f(p.max)} | ${target} | ${f(r.api[k].p50)} / ${f(r.api[k].p99)} |`);
    }
  if (on && off) {
    lines.push('', '| change → effect | p50 on / off | p99 on / off |', '|---|---|---|');
    for (const [k, label] of measures) lines.push(`| ${label} | ${(on[k].p50 / off[k].p50).toFixed(3)}x | ${(on[k].p99 / off[k].p99).toFixed(3)}x |`);
  }
  const r0 = runs[0]!;
  lines.push('', `load average (1 min): ${r0.load[0].toFixed(2)} at the start, ${r0.load[1].toFixed(2)} at the end`);
  lines.push(`PostgreSQL round trip (SELECT 1 from the bench every 200 ms, both clusters running) p50 / p99: ${r0.pgRoundTrip.p50.toFixed(1)} / ${r0.pgRoundTrip.p99.toFixed(1)} ms`);
  return lines.join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(latencyTable(await runLatency()));
}
