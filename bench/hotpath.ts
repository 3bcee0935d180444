/**
 * The gateway's hot path (issue 53, `BENCH_ONLY=hotpath npm run bench`): three `relay-jobs start`
 * replicas on a fresh database and the machine's Redis (own key prefix), every job off but the
 * scheduler snapshot's. On replica 0, with wrk (2 threads, 16 connections), each figure right after
 * a `GET /healthz` run of the same replica, its baseline:
 *   token     POST /api/v1/accounts/{id}/token for a token far from expiry (no refresh);
 *   snapshot  GET /api/v1/scheduler/accounts?platform=openai (a bucket of BENCH_HOTPATH_BUCKET accounts);
 *   usage     POST /api/v1/usage, batches of 100 new events (events/s = requests/s × 100);
 *   quota     POST /api/v1/quota/usage, one increment per request.
 * Then the staleness bound across the three replicas (hotpath-staleness.ts).
 * BENCH_HOTPATH_SECONDS (10) per wrk run, BENCH_HOTPATH_BUCKET (20), BENCH_HOTPATH_REFRESHES (200),
 * BENCH_HOTPATH_CACHES=off for the figures without the token cache and the snapshot's read cache.
 */
import { cpus, loadavg, totalmem } from 'node:os';
import pg from 'pg';
import { ServiceProcess } from '../test/helpers/cli.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from '../test/helpers/services.js';
import { FakeOAuthServer } from '../test/fixtures/oauth-server.js';
import { OTHER_JOBS, jobsOff, replicaEnv } from './replicas.js';
import { fixedRequest, quotaScript, usageBatchScript, wrk, type WrkResult } from './hotpath-wrk.js';
import { measureStaleness, type Staleness } from './hotpath-staleness.js';
import { HZ, readStat } from '../test/helpers/machine-load.js';

export const ADMIN = 'bench-admin-token-0123456789';

export interface HotpathRow {
  figure: string;
  healthz: WrkResult;
  route: WrkResult;
  /** The replica's own CPU per request (µs), from /proc: what a request costs, whatever else loads the machine. */
  healthzCpuUs: number;
  routeCpuUs: number;
  /** Events/s for the usage batch, requests/s otherwise. */
  unitsPerSec: number;
  unit: string;
}

export interface HotpathResult {
  rows: HotpathRow[];
  staleness: Staleness;
  machine: string;
}

export interface Rig {
  ports: number[];
  accountId: number;
  oauth: FakeOAuthServer;
  sql: pg.Client;
  api(replica: number, path: string, body?: unknown, method?: string): Promise<Record<string, unknown>>;
}

export async function benchHotpath(): Promise<HotpathResult> {
  const seconds = Number(process.env.BENCH_HOTPATH_SECONDS ?? 10);
  const bucket = Number(process.env.BENCH_HOTPATH_BUCKET ?? 20);
  const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, load ${loadavg()[0]!.toFixed(1)}, ${new Date().toISOString()}`;
  const cleanups: Array<() => Promise<unknown>> = [];
  try {
    const db = await freshDatabase({ migrated: true });
    cleanups.push(() => db.drop());
    const prefix = uniqueName('rjhot');
    cleanups.push(() => dropRedisPrefix(prefix));
    const oauth = await FakeOAuthServer.start({ clientId: 'bench', lifetimeSec: 86_400, rotate: true, sendExpiresIn: true });
    cleanups.push(() => oauth.close());
    const sql = new pg.Client({ connectionString: db.url });
    await sql.connect();
    cleanups.push(() => sql.end());
    const procs: ServiceProcess[] = [];
    const ports: number[] = [];
    for (let i = 0; i < 3; i++) {
      const env = await replicaEnv(
        `hot${i}`,
        { dbUrl: db.url, redisUrl: REDIS_URL, prefix },
        {
          ...jobsOff([...OTHER_JOBS.filter((j) => j !== 'scheduler_snapshot'), 'canary', 'token_refresh']),
          RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: '3',
          RELAY_JOBS__LOGGING__LEVEL: 'warn',
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: oauth.tokenUrl,
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: 'bench',
          RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '1000',
          // BENCH_HOTPATH_CACHES=off: the read paths as before issue 53 (every request asks PostgreSQL or Redis), for a before/after.
          ...(process.env.BENCH_HOTPATH_CACHES === 'off' ? { RELAY_JOBS__AUTH__TOKEN_CACHE_MAX_AGE: '0', RELAY_JOBS__SNAPSHOT__READ_MAX_AGE: '0' } : {}),
        },
      );
      ports.push(Number(env.RELAY_JOBS_HTTP_PORT));
      procs.push(ServiceProcess.start(`hot${i}`, env));
    }
    cleanups.push(async () => {
      for (const p of procs) if (p.proc.exitCode === null) p.proc.kill('SIGTERM');
      await Promise.all(procs.map((p) => p.exited));
    });
    const api = async (replica: number, path: string, body?: unknown, method = body === undefined ? 'GET' : 'POST') => {
      const res = await fetch(`http://127.0.0.1:${ports[replica]}/api/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${ADMIN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      if (!res.ok) throw new Error(`hotpath bench: ${method} ${path} on replica ${replica}: ${res.status} ${text}`);
      return JSON.parse(text) as Record<string, unknown>;
    };
    await Promise.all(ports.map((p, i) => waitReady(p).catch((err: Error) => Promise.reject(new Error(`${err.message}\n${procs[i]!.lines.slice(-15).join('\n')}`)))));

    const accountId = await createAccount(api, oauth, 'hot-token');
    for (let i = 0; i < bucket - 1; i++) await createAccount(api, oauth, `hot-bucket-${i}`);
    // The first read opens the bucket; the consumer fills it: wait until it serves from the snapshot.
    for (const deadline = Date.now() + 60_000; (await api(0, '/scheduler/accounts?platform=openai')).source !== 'snapshot';) {
      if (Date.now() > deadline) throw new Error('hotpath bench: the openai bucket never served from the snapshot');
      await new Promise((r) => setTimeout(r, 200));
    }

    const base = `http://127.0.0.1:${ports[0]}`;
    const pid = String(procs[0]!.proc.pid);
    const run = async (path: string, script: string) => {
      const c0 = readStat(pid).self;
      const r = await wrk({ url: base + path, script, seconds });
      return { ...r, cpuUs: (((readStat(pid).self - c0) / HZ) * 1e6) / Math.max(1, r.requests) };
    };
    const warm = (path: string, script: string) => wrk({ url: base + path, script, seconds: 2 });
    const figures: Array<{ figure: string; path: string; script: string; unit: string; per: number }> = [
      { figure: 'token (fresh, no refresh)', path: `/api/v1/accounts/${accountId}/token`, script: fixedRequest('POST', ADMIN), unit: 'requests/s', per: 1 },
      { figure: `snapshot read (bucket of ${bucket})`, path: '/api/v1/scheduler/accounts?platform=openai', script: fixedRequest('GET', ADMIN), unit: 'requests/s', per: 1 },
      { figure: 'usage batch of 100', path: '/api/v1/usage', script: usageBatchScript(ADMIN, 100, uniqueName('u')), unit: 'events/s', per: 100 },
      { figure: 'quota increment', path: '/api/v1/quota/usage', script: quotaScript(ADMIN), unit: 'requests/s', per: 1 },
    ];
    const healthz = fixedRequest('GET', null);
    await warm('/healthz', healthz);
    const rows: HotpathRow[] = [];
    for (const f of figures) {
      await warm(f.path, f.script);
      const h = await run('/healthz', healthz);
      const r = await run(f.path, f.script);
      if (r.errors || h.errors) throw new Error(`hotpath bench: ${f.figure}: ${r.errors} errors (healthz ${h.errors}) in ${r.requests} requests`);
      rows.push({ figure: f.figure, healthz: h, route: r, healthzCpuUs: h.cpuUs, routeCpuUs: r.cpuUs, unitsPerSec: r.requestsPerSec * f.per, unit: f.unit });
    }
    const staleness = await measureStaleness({ ports, accountId, oauth, sql, api });
    return { rows, staleness, machine };
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  }
}

async function waitReady(port: number): Promise<void> {
  for (const deadline = Date.now() + 180_000; ;) {
    const ok = await fetch(`http://127.0.0.1:${port}/readyz`)
      .then((r) => r.ok)
      .catch(() => false);
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`hotpath bench: the replica on port ${port} was not ready within 180 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function createAccount(api: Rig['api'], oauth: FakeOAuthServer, name: string): Promise<number> {
  const c = oauth.issue(name);
  const expires = new Date(Date.now() + 86_400_000).toISOString();
  const a = await api(0, '/accounts', { platform: 'openai', name, credentials: { access_token: c.access_token, refresh_token: c.refresh_token, expires_at: expires } });
  return Number(a.id);
}

const f0 = (n: number) => n.toFixed(0);
const f2 = (n: number) => n.toFixed(2);

export function hotpathTable(r: HotpathResult): string {
  const out = [
    `machine: ${r.machine}`,
    '',
    '| figure | /healthz req/s (baseline) | route | ratio (req/s) | p50 ms | p99 ms | healthz p99 ms | replica CPU µs/request (healthz) | CPU ratio (healthz / route) |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  for (const x of r.rows)
    out.push(
      `| ${x.figure} | ${f0(x.healthz.requestsPerSec)} | ${f0(x.unitsPerSec)} ${x.unit} | ${f2(x.route.requestsPerSec / x.healthz.requestsPerSec)}× | ${f2(x.route.p50Ms)} | ${f2(x.route.p99Ms)} | ${f2(x.healthz.p99Ms)} | ${f0(x.routeCpuUs)} (${f0(x.healthzCpuUs)}) | ${f2(x.healthzCpuUs / x.routeCpuUs)}× |`,
    );
  const s = r.staleness;
  out.push(
    '',
    `refresh commit → last request sent that still got the old token, ${s.refreshes} refreshes, 3 replicas polled: p50 ${f0(s.p50Ms)} ms, p99 ${f0(s.p99Ms)} ms, max ${f0(s.maxMs)} ms (${s.oldAnswersAfterCommit} old answers arrived after a commit, out of ${s.answers}; by arrival: p99 ${f0(s.arrivedP99Ms)} ms, max ${f0(s.arrivedMaxMs)} ms)`,
    `refresh → new token answered by every replica: p50 ${f0(s.newP50Ms)} ms, p99 ${f0(s.newP99Ms)} ms, max ${f0(s.newMaxMs)} ms`,
  );
  return out.join('\n');
}
