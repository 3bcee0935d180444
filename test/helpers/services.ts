import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { expect } from 'vitest';
import { Redis } from 'ioredis';
import { PgDb } from '../../src/store/pg-db.js';
import { migrate } from '../../src/app/migrations.js';

/** The machine's PostgreSQL, as an admin connection that can create and drop databases. */
export const PG_ADMIN_URL = process.env.RELAY_JOBS_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
export const REDIS_URL = process.env.RELAY_JOBS_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export function uniqueName(prefix: string): string {
  return `${prefix}_${randomBytes(5).toString('hex')}`;
}

/**
 * Names the migrated template database of this run (made by the global setup, build-cli.ts, with
 * `buildPgTemplate`) for the workers, which inherit the global setup's environment.
 */
const PG_TEMPLATE_ENV = 'RELAY_TEST_PG_TEMPLATE';

/**
 * The run's migrated template: a database on the shared server holding every migration, copied by
 * `freshDatabase({ migrated: true })`. Each migrated database otherwise cost its own 28 migrations
 * (a quarter of a second of the server's CPU each, measured). Dropped when the run ends.
 */
export async function buildPgTemplate(): Promise<() => Promise<void>> {
  let template: Awaited<ReturnType<typeof freshDatabase>>;
  try {
    template = await freshDatabase();
  } catch (err) {
    // A run of files that need no PostgreSQL still goes on; a test that asks for a migrated database says why it has none.
    process.env[`${PG_TEMPLATE_ENV}_ERROR`] = `${PG_ADMIN_URL}: ${(err as Error).message}`;
    return async () => undefined;
  }
  const db = await PgDb.connect({ url: template.url, poolSize: 1, connectTimeoutMs: 5000 });
  try {
    await migrate(db);
  } finally {
    await db.close();
  }
  process.env[PG_TEMPLATE_ENV] = template.name;
  return template.drop;
}

/**
 * The running test file's name as an identifier fragment (`refresh_takeover_e2e`), or `other`
 * outside a test file (the global setup's template, a benchmark: vitest's state is not there). A
 * database named after its file shows in `ps` beside each of its PostgreSQL backends, and one left
 * behind names the file that left it.
 */
function testFileTag(): string {
  let path = 'other';
  try {
    path = expect.getState().testPath ?? path;
  } catch {
    // not inside a vitest worker
  }
  return (path.split('/').pop() ?? path)
    .replace(/\.test\.ts$/, '')
    .replace(/[^a-z0-9]+/gi, '_')
    .toLowerCase()
    .slice(0, 30);
}

/**
 * The connections that create and drop the test databases: one small pool per process (a vitest
 * worker runs many files), not a new connection per database. A run made about 270 such
 * connections to `postgres`, each a new server process (15-20 ms of CPU on the slow machine kind).
 * `allowExitOnIdle`: an idle pool never holds a process open.
 */
let admin: pg.Pool | undefined;
function adminPool(): pg.Pool {
  if (!admin) {
    admin = new pg.Pool({ connectionString: PG_ADMIN_URL, max: 2, idleTimeoutMillis: 10_000, allowExitOnIdle: true });
    // An idle connection the server ended: the pool drops it and the next query opens another.
    admin.on('error', () => undefined);
  }
  return admin;
}

/**
 * A database of its own for one test file, dropped afterwards: empty, or with `migrated` a copy of
 * the run's migrated template (a test about migrating, or one whose service migrates as in
 * production, asks for an empty one).
 */
export async function freshDatabase(opts: { migrated?: boolean } = {}): Promise<{ url: string; name: string; drop: () => Promise<void> }> {
  const name = uniqueName(`rj_test_${testFileTag()}`);
  const template = opts.migrated ? process.env[PG_TEMPLATE_ENV] : 'template1';
  if (!template)
    throw new Error(
      `freshDatabase({ migrated: true }): no template database (the vitest global setup, test/helpers/build-cli.ts, makes it: ${process.env[`${PG_TEMPLATE_ENV}_ERROR`] ?? 'it did not run'})`,
    );
  // FILE_COPY copies the template's files (after a checkpoint) instead of writing every block of it
  // to the WAL: half the server CPU of the default WAL_LOG for a database this small.
  await adminPool().query(`CREATE DATABASE ${name} TEMPLATE ${template} STRATEGY = FILE_COPY`);
  // A throwaway database on the machine's server, which no test crashes: a commit need not wait
  // for its WAL to reach the disk (a test's run of commits otherwise waits on fsync, not on CPU).
  // Tests that crash PostgreSQL run their own server (test/helpers/private-postgres.ts, fsync off).
  await adminPool().query(`ALTER DATABASE ${name} SET synchronous_commit = off`);
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    drop: async () => void (await adminPool().query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
  };
}

/** Deletes every key under a prefix (tests use a prefix of their own). */
export async function dropRedisPrefix(prefix: string, url = REDIS_URL): Promise<void> {
  const r = new Redis(url);
  let cursor = '0';
  do {
    const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length) await r.del(...keys);
  } while (cursor !== '0');
  r.disconnect();
}

const handedOut = new Set<number>();

/**
 * The claims of every test process of this run: one file per port handed out, created exclusively.
 * The vitest workers are separate processes, each with its own `handedOut`; two of them picked the
 * same port between one's check and its replica's listen (process.test.ts: "the port is in use").
 * The global setup points TMPDIR at a directory of the run, so the claims last the run; outside it
 * (a bench, /tmp), a claim older than CLAIM_STALE_MS is taken over.
 */
const CLAIMS = join(tmpdir(), 'relay-jobs-test-ports');
const CLAIM_STALE_MS = 30 * 60_000;

function claimAcrossProcesses(port: number): boolean {
  mkdirSync(CLAIMS, { recursive: true });
  const file = join(CLAIMS, String(port));
  try {
    writeFileSync(file, String(process.pid), { flag: 'wx' });
    return true;
  } catch {
    try {
      if (Date.now() - statSync(file).mtimeMs < CLAIM_STALE_MS) return false;
      writeFileSync(file, String(process.pid));
      return true;
    } catch {
      return false;
    }
  }
}

/**
 * Takes `port` for the caller unless this process or another test process of the run already
 * handed it out (false then): helpers that pick ports of their own (Redis Cluster nodes and their
 * bus twins) share the one record with `freePort`, so a node is never given a port a replica was
 * promised before it bound it.
 */
export function takePort(port: number): boolean {
  if (handedOut.has(port) || !claimAcrossProcesses(port)) return false;
  handedOut.add(port);
  return true;
}

/**
 * A free TCP port BELOW the kernel's ephemeral range (Linux: 32768-60999), never the same one twice
 * in a process. A port from `listen(0)` lies inside that range, where any outgoing connection (a
 * pool, a fetch) may take it as its source port before the test uses it: a replica restarted on
 * its old port then found it in use (image-batches e2e, three files running at once).
 */
export async function freePort(): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (handedOut.has(port) || !(await canListen(port)) || !takePort(port)) continue;
    return port;
  }
  throw new Error('no free TCP port in 20000-31999 after 200 tries');
}

/** Whether a listener on every address (as a replica binds 0.0.0.0) can take the port now. */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, () => s.close(() => resolve(true)));
  });
}

/**
 * Until a redis-server on this loopback port answers PING (200 tries 50 ms apart: about 10 s when nothing
 * listens; each try gives up after 2 s on a listener that never answers); with `pid`, until that process is the one answering.
 */
export async function waitForRedis(port: number, pid?: number, gone: () => boolean = () => false): Promise<void> {
  for (let i = 0; i < 200 && !gone(); i++) {
    // Bounded: something on the port that accepts and never answers (not a Redis) must not hang the wait.
    const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 2000, commandTimeout: 2000 });
    c.on('error', () => undefined);
    try {
      await c.connect();
      await c.ping();
      const info = pid === undefined ? '' : await c.info('server');
      c.disconnect();
      if (pid === undefined || new RegExp(`^process_id:${pid}\\s*$`, 'm').test(info)) return;
      await new Promise((r) => setTimeout(r, 50));
    } catch {
      c.disconnect();
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`redis-server did not answer on port ${port}`);
}

/** A private redis-server on its own port, so a test can stop and restart Redis without touching anyone else's. */
export class PrivateRedis {
  private proc: ChildProcess | null = null;
  constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(): Promise<PrivateRedis> {
    // A port freePort() handed out can be taken by another test process before redis-server binds
    // it (a full run once met a replica refused on such a port): then try another port.
    for (let attempt = 1; ; attempt++) {
      const r = new PrivateRedis(await freePort());
      try {
        await r.start();
        return r;
      } catch (err) {
        await r.stop();
        if (attempt >= 5) throw err;
      }
    }
  }

  /** Resolves once this process (not whatever else holds the port) answers; rejects if it exits first. */
  async start(): Promise<void> {
    const proc = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    this.proc = proc;
    const exited = new Promise<never>((_, reject) => proc.once('exit', (code) => reject(new Error(`redis-server on port ${this.port} exited (${code}) before it answered`))));
    exited.catch(() => undefined);
    // The poll stops with the process: a server that lost its port is not waited for.
    await Promise.race([waitForRedis(this.port, proc.pid, () => proc.exitCode !== null), exited]);
  }

  async stop(): Promise<void> {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGKILL');
    });
  }
}

/** A fixed master key for cluster-mode tests (never used outside tests). */
export const TEST_MASTER_KEY = Buffer.alloc(32, 7).toString('base64');

/** One statement as the superuser on a connection of its own (roles, grants, databases: what a test's own database role may not do). */
export async function asAdmin(sql: string, dbUrl = PG_ADMIN_URL): Promise<void> {
  const c = new pg.Client({ connectionString: dbUrl });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

/**
 * A login role of its own on the shared server with `attrs` (least privilege by default: what a
 * deployment's service role may lack), and a connection as it to the database of `dbUrl`;
 * `drop()` closes the connection and drops the role.
 */
export async function roleConnection(dbUrl: string, attrs = 'NOSUPERUSER NOCREATEDB NOCREATEROLE'): Promise<{ role: string; url: string; db: PgDb; drop(): Promise<void> }> {
  const role = uniqueName('rj_role');
  await asAdmin(`CREATE ROLE ${role} LOGIN ${attrs}`);
  const url = new URL(dbUrl);
  url.username = role;
  url.password = '';
  const db = await PgDb.connect({ url: url.toString(), poolSize: 1, connectTimeoutMs: 5000 });
  return {
    role,
    url: url.toString(),
    db,
    async drop() {
      await db.close();
      await asAdmin(`DROP ROLE IF EXISTS ${role}`);
    },
  };
}
