/**
 * The soak's own servers and replicas, none shared with anyone: a private PostgreSQL
 * (test/helpers/private-postgres.ts), a PgBouncer in front of it that can be restarted on the same
 * port, a Redis Sentinel set (test/helpers/redis-topologies.ts), and the `relay-jobs start`
 * replicas (SIGKILL, SIGSTOP/SIGCONT, restart). `closeAll` kills every process it started, also
 * after an error.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { NODE_FLAGS, ServiceProcess, cleanEnv } from '../test/helpers/cli.js';
import { PrivatePostgres } from '../test/helpers/private-postgres.js';
import { SentinelSet } from '../test/helpers/redis-topologies.js';
import { freePort } from '../test/helpers/services.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** PgBouncer (transaction mode) in front of the private PostgreSQL; `restart` keeps its port. */
export class SoakBouncer {
  private proc: ChildProcess | null = null;
  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly pgPort: number,
  ) {}

  url(db = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${db}`;
  }

  static async start(pgPort: number): Promise<SoakBouncer> {
    const dir = mkdtempSync(join(tmpdir(), 'rj-soak-bouncer-'));
    const b = new SoakBouncer(await freePort(), dir, pgPort);
    writeFileSync(join(dir, 'userlist.txt'), `"postgres" ""\n`);
    writeFileSync(
      join(dir, 'pgbouncer.ini'),
      [
        '[databases]',
        `* = host=127.0.0.1 port=${pgPort}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${b.port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'userlist.txt')}`,
        'pool_mode = transaction',
        'max_client_conn = 2000',
        'default_pool_size = 40',
        'ignore_startup_parameters = extra_float_digits,options',
        `logfile = ${join(dir, 'pgbouncer.log')}`,
        `pidfile = ${join(dir, 'pgbouncer.pid')}`,
        '',
      ].join('\n'),
    );
    if (process.getuid?.() === 0) {
      const id = (f: string) => Number(execFileSync('id', [f, 'postgres']).toString().trim());
      chmodSync(dir, 0o700);
      for (const f of ['', 'userlist.txt', 'pgbouncer.ini']) chownSync(join(dir, f), id('-u'), id('-g'));
    }
    await b.startProcess();
    return b;
  }

  private async startProcess(): Promise<void> {
    const ini = join(this.dir, 'pgbouncer.ini');
    const [cmd, args] = process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', 'pgbouncer', ini]] : ['pgbouncer', [ini]];
    const proc = spawn(cmd as string, args as string[], { stdio: 'ignore' });
    this.proc = proc;
    for (let i = 0; ; i++) {
      const c = new pg.Client({ connectionString: this.url(), connectionTimeoutMillis: 2000 });
      try {
        await c.connect();
        await c.query('SELECT 1');
        await c.end();
        return;
      } catch (err) {
        await c.end().catch(() => undefined);
        if (i > 400 || proc.exitCode !== null) throw new Error(`soak: pgbouncer did not start on ${this.port} (PostgreSQL on ${this.pgPort}): ${(err as Error).message}`, { cause: err });
        await sleep(50);
      }
    }
  }

  /**
   * SIGKILL to PgBouncer itself (its pid file: under root it runs below `runuser`, which a SIGKILL
   * would orphan it from, leaving the old one serving), then until its port is closed.
   */
  async kill(): Promise<void> {
    const p = this.proc;
    this.proc = null;
    let pid: number | null = null;
    try {
      pid = Number(readFileSync(join(this.dir, 'pgbouncer.pid'), 'utf8').trim());
    } catch {
      // not written yet
    }
    if (pid) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (p && p.exitCode === null) p.kill('SIGKILL');
    for (let i = 0; i < 200; i++) {
      const c = new pg.Client({ connectionString: this.url(), connectionTimeoutMillis: 500 });
      const up = await c.connect().then(
        () => true,
        () => false,
      );
      await c.end().catch(() => undefined);
      if (!up) {
        // Its pid file stays behind a SIGKILL; a new PgBouncer refuses to start ("pidfile exists,
        // another instance running?") while that pid still exists, and under runuser the killed
        // process is a zombie until runuser reaps it: the soak's restart once never came back.
        rmSync(join(this.dir, 'pgbouncer.pid'), { force: true });
        return;
      }
      await sleep(50);
    }
    throw new Error(`soak: pgbouncer on ${this.port} still answers after SIGKILL`);
  }

  async restart(downMs: number): Promise<void> {
    await this.kill();
    await sleep(downMs);
    await this.startProcess();
  }

  async stop(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * A copy of the tests' CLI build (.test-dist, without its data templates) laid out as the repository
 * is (package.json, node_modules and web/ beside it), so a replica restarted late in the run starts
 * the same build even when another worker's `--if-stale` build has replaced .test-dist meanwhile.
 */
export function privateCli(): { cli: string; remove: () => void } {
  const root = mkdtempSync(join(tmpdir(), 'rj-soak-cli-'));
  const repo = fileURLToPath(new URL('..', import.meta.url));
  const dist = join(repo, '.test-dist');
  for (const entry of readdirSync(dist)) if (!/template|private-postgres/.test(entry)) cpSync(join(dist, entry), join(root, '.test-dist', entry), { recursive: true });
  copyFileSync(join(repo, 'package.json'), join(root, 'package.json'));
  symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'));
  symlinkSync(join(repo, 'web'), join(root, 'web'));
  return { cli: join(root, '.test-dist', 'cli', 'main.js'), remove: () => rmSync(root, { recursive: true, force: true }) };
}

export interface SoakReplica {
  id: string;
  cli: string;
  port: number;
  env: Record<string, string>;
  proc: ServiceProcess;
  /** Every process this replica has been (restarts included), for the end's kill. */
  history: ServiceProcess[];
  /** When each of those processes was spawned (epoch ms): the lateness table tells their start-up rounds apart. */
  spawns: number[];
  stopped: boolean;
  /** Down on purpose (a SIGKILL fault's hold, the end of the run): the supervisor leaves it. */
  held: boolean;
}

export const alive = (r: SoakReplica) => r.proc.proc.exitCode === null && r.proc.proc.signalCode === null;

const spawnReplica = (id: string, cli: string, env: Record<string, string>) =>
  new ServiceProcess(id, spawn(process.execPath, [...NODE_FLAGS, cli, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] }));

export function startReplica(id: string, cli: string, port: number, env: Record<string, string>): SoakReplica {
  const proc = spawnReplica(id, cli, env);
  return { id, cli, port, env, proc, history: [proc], spawns: [Date.now()], stopped: false, held: false };
}

export async function restartReplica(r: SoakReplica): Promise<void> {
  if (alive(r)) {
    r.proc.proc.kill('SIGKILL');
    await r.proc.exited;
  }
  r.proc = spawnReplica(r.id, r.cli, r.env);
  r.history.push(r.proc);
  r.spawns.push(Date.now());
  r.stopped = false;
}

export interface UnplannedExit {
  at: number;
  replica: string;
  code: number | null;
  tail: string;
}

/**
 * What a process manager does: a replica that exited on its own (not killed by a fault or the end
 * of the run) is started again a second later. Each such exit is recorded with its last log lines.
 */
export class Supervisor {
  readonly exits: UnplannedExit[] = [];
  private stopped = false;
  private loop: Promise<void> | null = null;
  constructor(private readonly replicas: SoakReplica[]) {}

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        for (const r of this.replicas) {
          if (alive(r) || r.held || this.stopped) continue;
          this.exits.push({ at: Date.now(), replica: r.id, code: r.proc.proc.exitCode, tail: r.proc.lines.slice(-6).join(' / ').slice(0, 800) });
          await sleep(1000);
          if (!this.stopped && !r.held) await restartReplica(r);
        }
        await sleep(500);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}

/** Resident memory of a live process in MiB, from /proc (null once it is gone). */
export function rssMiB(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const kb = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return kb ? Number(kb[1]) / 1024 : null;
  } catch {
    return null;
  }
}

export interface SoakServers {
  postgres: PrivatePostgres;
  bouncer: SoakBouncer;
  sentinel: SentinelSet;
  /** The replicas' DATABASE_URL (through PgBouncer) and DATABASE_DIRECT_URL. */
  dbUrl: string;
  directUrl: string;
}

export async function startServers(): Promise<SoakServers> {
  const [postgres, sentinel] = await Promise.all([PrivatePostgres.start(), SentinelSet.start()]);
  try {
    const bouncer = await SoakBouncer.start(postgres.port);
    return { postgres, bouncer, sentinel, dbUrl: bouncer.url(), directUrl: postgres.url };
  } catch (err) {
    await Promise.allSettled([postgres.destroy(), sentinel.stop()]);
    throw err;
  }
}

/** Every replica process SIGCONTed and SIGKILLed, then the servers removed; errors are swallowed so all of it runs. */
export async function closeAll(servers: SoakServers | null, replicas: SoakReplica[]): Promise<void> {
  for (const r of replicas)
    for (const p of r.history)
      if (p.proc.exitCode === null && p.proc.signalCode === null) {
        p.proc.kill('SIGCONT');
        p.proc.kill('SIGKILL');
      }
  await Promise.allSettled(replicas.flatMap((r) => r.history.map((p) => p.exited)));
  if (!servers) return;
  await Promise.allSettled([servers.bouncer.stop(), servers.sentinel.stop(), servers.postgres.destroy()]);
}
