// The one cluster test harness: `startCluster({ replicas, env })` gives an end-to-end test a
// database of its own (a fresh database on the machine's PostgreSQL, a private PostgreSQL server,
// or none for embedded mode), a private Redis (or none), free ports, `relay-jobs start` replicas
// with the environment every e2e file used to write out, `api`, kill/restart per replica, and
// cleanup. While a cluster is up, a failing test prints the log tail of each of its replicas.
import pg from 'pg';
import { ServiceProcess } from './cli.js';
import { PrivatePostgres } from './private-postgres.js';
import { PrivateRedis, TEST_MASTER_KEY, freePort, freshDatabase, uniqueName } from './services.js';
import { waitFor, type WaitOptions } from './wait.js';
import { PgDb } from '../../src/store/pg-db.js';
import { migrate } from '../../src/app/migrations.js';

export const CLUSTER_ADMIN_TOKEN = 'e2e-cluster-admin-token-0123456789';

/** A Redis the test can stop and start: a private node, or e.g. a whole Redis Cluster set. */
export interface StoppableRedis {
  url: string;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export interface ClusterOptions {
  /** How many replicas, or their instance ids. Ids default to `${idPrefix}${i}`. */
  replicas: number | string[];
  idPrefix?: string;
  /** Environment for every replica, over the harness's defaults (a key set to undefined is dropped). */
  env?: Record<string, string | undefined>;
  /** Environment for one replica, over `env`. */
  envFor?: (id: string, index: number) => Record<string, string | undefined>;
  /** `shared` (default): a fresh database on the machine's PostgreSQL; `private`: a PostgreSQL server of its own (it can be stopped); `none`: embedded mode. */
  database?: 'shared' | 'private' | 'none';
  /**
   * Migrated before any replica starts (default true; on the shared server a copy of the run's
   * migrated template), then `seed`ed. `false`: an empty database, the replicas migrate it.
   */
  migrate?: boolean;
  seed?: (db: PgDb) => Promise<void>;
  /** `private` (default): a redis-server of its own; `none`: no REDIS_URL; or a Redis the caller runs. */
  redis?: 'private' | 'none' | StoppableRedis;
  adminToken?: string;
  /** Wait for every replica's "relay-jobs started" line (default true). */
  waitStarted?: boolean;
  /**
   * `true`: replicas get only identity, ports, URLs and secrets (no pool size, heartbeat, Redis key
   * prefix or command timeout of the harness), for tests about the default configuration.
   */
  bareEnv?: boolean;
}

export interface ApiInit {
  method?: string;
  body?: unknown;
  headers?: Record<string, string>;
  timeoutMs?: number;
}

export class Replica {
  proc: ServiceProcess;
  constructor(
    readonly id: string,
    readonly port: number,
    readonly env: Record<string, string>,
  ) {
    this.proc = ServiceProcess.start(id, env);
  }

  get lines(): string[] {
    return this.proc.lines;
  }
  get exited(): Promise<number | null> {
    return this.proc.exited;
  }
  get alive(): boolean {
    return this.proc.proc.exitCode === null && this.proc.proc.signalCode === null && !this.proc.proc.killed;
  }
  url(path = ''): string {
    return `http://127.0.0.1:${this.port}${path}`;
  }
  waitStarted(timeoutMs?: number): Promise<string> {
    return this.proc.waitForLine(/relay-jobs started/, timeoutMs);
  }

  /**
   * Until `path` answers 2xx (a replica logging at `warn` prints no "started" line). The limit is the
   * start-up margin a loaded two-core machine needs; the wait ends as soon as it answers.
   */
  async waitHealthy(path: '/readyz' | '/healthz' = '/readyz', timeoutMs = 180_000): Promise<void> {
    await waitFor(async () => (await fetch(this.url(path), { signal: AbortSignal.timeout(10_000) })).ok, {
      what: `${this.id} on port ${this.port} to answer ${path}`,
      timeoutMs,
      intervalMs: 100,
      ignoreErrors: true,
    });
  }

  /** Sends `signal` and resolves with the exit code once the process is gone. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<number | null> {
    if (this.proc.proc.exitCode === null && this.proc.proc.signalCode === null) this.proc.proc.kill(signal);
    return this.proc.exited;
  }

  /** Starts the same replica again (same id, port and environment) after it has exited; its old lines are kept in `previousLines`. */
  async restart(waitStarted = true): Promise<void> {
    if (this.proc.proc.exitCode === null && this.proc.proc.signalCode === null) await this.kill('SIGKILL');
    this.previousLines.push(...this.proc.lines);
    this.proc = ServiceProcess.start(this.id, this.env);
    if (waitStarted) await this.waitStarted();
  }
  readonly previousLines: string[] = [];

  tail(n = 30): string {
    return `--- ${this.id} (port ${this.port}) ---\n${this.proc.lines.slice(-n).join('\n')}`;
  }
}

const live = new Set<Cluster>();
/**
 * After a failed test, what the replicas of every live cluster logged. Registered for every test
 * file by the setup file test/helpers/per-file.ts: workers run several files in one process
 * (isolate: false), so a hook registered when this module is first imported would serve only the
 * first file.
 */
export function printClusterTails(failed: boolean): void {
  if (!failed) return;
  for (const c of live) console.error(`log tails of the cluster's replicas:\n${c.replicas.map((r) => r.tail()).join('\n')}`);
}

export class Cluster {
  readonly replicas: Replica[] = [];
  private client: pg.Client | null = null;
  private readonly cleanups: Array<() => Promise<void>> = [];

  constructor(
    readonly opts: ClusterOptions,
    /** The replicas' DATABASE_URL (undefined in embedded mode). */
    readonly databaseUrl: string | undefined,
    readonly databaseName: string | undefined,
    readonly redis: StoppableRedis | null,
    readonly postgres: PrivatePostgres | null,
    /** The Redis key prefix every replica shares. */
    readonly prefix: string,
    readonly adminToken: string,
  ) {}

  /** The environment a replica gets before the test's own `env`. */
  baseEnv(id: string, port: number): Record<string, string> {
    const bare = this.opts.bareEnv === true;
    const env: Record<string, string> = {
      RELAY_JOBS_INSTANCE_ID: id,
      RELAY_JOBS_ENV: 'e2e',
      RELAY_JOBS_HTTP_PORT: String(port),
      RELAY_JOBS_ADMIN_TOKEN: this.adminToken,
      RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
    };
    if (!bare) {
      env.RELAY_JOBS__CLUSTER__INSTANCE_HEARTBEAT = '1s';
      // Four connections a replica: five files' three-replica clusters must fit in the shared
      // server's 100 connections together (at 8 the suite peaked at 95 and a restarted replica
      // was refused with "too many clients").
      env.RELAY_JOBS__DATABASE__POOL_SIZE = '4';
      env.RELAY_JOBS__JOBS__SESSION_CLEANUP__ENABLED = 'false';
      // Usage accepts a week back here, not the default 90 days: a replica's first start on a new
      // database creates a partition for every accepted day (94 tables with their indexes at the
      // default, 11 at a week), 0.4 s of the shared server's CPU and 0.1 s of the replica's (6-Dec-2026,
      // slow kind, alternated starts). A test about the window sets its own.
      env.RELAY_JOBS__USAGE__RETENTION = '7d';
    }
    if (this.databaseUrl) env.DATABASE_URL = this.databaseUrl;
    if (this.redis) {
      env.REDIS_URL = this.redis.url;
      if (!bare) {
        env.RELAY_JOBS__REDIS__KEY_PREFIX = this.prefix;
        env.RELAY_JOBS__REDIS__COMMAND_TIMEOUT = '300ms';
      }
    }
    return env;
  }

  /** Starts one more replica (not waited for unless `waitStarted`). */
  async addReplica(id: string, env: Record<string, string | undefined> = {}, waitStarted = false): Promise<Replica> {
    const port = await freePort();
    const merged: Record<string, string> = {};
    for (const [k, v] of Object.entries({ ...this.baseEnv(id, port), ...this.opts.env, ...env })) if (v !== undefined) merged[k] = v;
    const r = new Replica(id, port, merged);
    this.replicas.push(r);
    if (waitStarted) await r.waitStarted();
    return r;
  }

  replica(idOrIndex: string | number): Replica {
    const r = typeof idOrIndex === 'number' ? this.replicas[idOrIndex] : this.replicas.find((x) => x.id === idOrIndex);
    if (!r) throw new Error(`no replica ${idOrIndex} in this cluster`);
    return r;
  }

  get alive(): Replica[] {
    return this.replicas.filter((r) => r.alive);
  }

  /** A direct client on the cluster's database (opened once, closed by `stop`). */
  async sql(): Promise<pg.Client> {
    if (!this.databaseUrl) throw new Error('an embedded cluster has no database URL');
    if (!this.client) {
      this.client = new pg.Client({ connectionString: this.databaseUrl });
      await this.client.connect();
    }
    return this.client;
  }

  /** A request to `/api/v1<path>` on a replica with the admin token; JSON body in, Response out. */
  api(replica: Replica | string | number, path: string, init: ApiInit = {}): Promise<Response> {
    const r = replica instanceof Replica ? replica : this.replica(replica);
    return fetch(r.url(`/api/v1${path}`), {
      method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
      headers: { authorization: `Bearer ${this.adminToken}`, ...(init.body === undefined ? {} : { 'content-type': 'application/json' }), ...init.headers },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: AbortSignal.timeout(init.timeoutMs ?? 120_000),
    });
  }

  waitFor<T>(condition: () => T | Promise<T>, opts: WaitOptions) {
    return waitFor(condition, opts);
  }

  /** Runs at `stop`, before the replicas are killed and the services removed (last added runs first). */
  onStop(fn: () => Promise<void>): void {
    this.cleanups.push(fn);
  }

  /** SIGKILLs what is still running, then removes Redis and the database. Safe to call twice. */
  async stop(): Promise<void> {
    live.delete(this);
    for (const fn of this.cleanups.splice(0).reverse()) await fn().catch(() => undefined);
    await Promise.all(this.replicas.map((r) => r.kill('SIGKILL')));
    await this.client?.end().catch(() => undefined);
    this.client = null;
    if (this.redis && (this.opts.redis ?? 'private') === 'private') await this.redis.stop();
    await this.dropDatabase?.();
    this.dropDatabase = undefined;
  }
  dropDatabase: (() => Promise<void>) | undefined;
}

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const dbKind = opts.database ?? 'shared';
  const redisOpt = opts.redis ?? 'private';
  // The database and Redis start side by side (a private PostgreSQL's initdb takes seconds).
  const [db, privateRedis] = await Promise.all([
    dbKind === 'shared' ? freshDatabase({ migrated: opts.migrate !== false }) : dbKind === 'private' ? PrivatePostgres.start() : null,
    redisOpt === 'private' ? PrivateRedis.start() : null,
  ]);
  let databaseUrl: string | undefined;
  let postgres: PrivatePostgres | null = null;
  let databaseName: string | undefined;
  let drop: (() => Promise<void>) | undefined;
  if (db instanceof PrivatePostgres) {
    postgres = db;
    databaseUrl = db.url;
    databaseName = 'postgres';
    drop = () => db.destroy();
  } else if (db) {
    databaseUrl = db.url;
    databaseName = db.name;
    drop = db.drop;
  }
  const redis: StoppableRedis | null = privateRedis ?? (redisOpt === 'private' || redisOpt === 'none' ? null : redisOpt);

  const cluster = new Cluster(opts, databaseUrl, databaseName, redis, postgres, uniqueName('rjc'), opts.adminToken ?? CLUSTER_ADMIN_TOKEN);
  cluster.dropDatabase = drop;
  live.add(cluster);
  try {
    if (databaseUrl && opts.migrate !== false) {
      const db = await PgDb.connect({ url: databaseUrl, poolSize: 2, connectTimeoutMs: 5000 });
      try {
        await migrate(db);
        await opts.seed?.(db);
      } finally {
        await db.close();
      }
    }
    const ids = typeof opts.replicas === 'number' ? Array.from({ length: opts.replicas }, (_, i) => `${opts.idPrefix ?? 'r'}${i}`) : opts.replicas;
    for (const [i, id] of ids.entries()) await cluster.addReplica(id, opts.envFor?.(id, i) ?? {});
    if (opts.waitStarted !== false) await Promise.all(cluster.replicas.map((r) => r.waitStarted()));
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}
