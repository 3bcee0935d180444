// A real PgBouncer on a private loopback port in front of the machine's PostgreSQL (or of `target`,
// e.g. a PrivatePostgres a test stops and starts), started by the test itself (Debian's `pgbouncer`; .ci/run installs it). PgBouncer refuses to run as root, so
// under root it runs as the `postgres` user from a directory that user owns.
import { spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { PG_ADMIN_URL, freePort } from './services.js';

/** The PgBouncer the tests start: `pgbouncer` on PATH, or `PGBOUNCER_BIN` (a newer build of your own, say). */
const BIN = process.env.PGBOUNCER_BIN || 'pgbouncer';

export function hasPgbouncer(): boolean {
  try {
    execFileSync(BIN, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether this PgBouncer knows `max_prepared_statements` (1.21+; 1.18, Debian bookworm's, refuses
 * to start with the key). From 1.24 it defaults to 200: named statements are carried.
 */
function knowsPreparedStatements(): boolean {
  const m = /PgBouncer (\d+)\.(\d+)/.exec(execFileSync(BIN, ['--version']).toString());
  return !!m && (Number(m[1]) > 1 || Number(m[2]) >= 21);
}

export class PgBouncer {
  private constructor(
    readonly port: number,
    private readonly proc: ChildProcess,
    private readonly dir: string,
    private readonly target: string,
  ) {}

  /** A URL to `database` through this PgBouncer. */
  url(database: string): string {
    const u = new URL(this.target);
    u.port = String(this.port);
    u.pathname = `/${database}`;
    return u.toString();
  }

  /**
   * `target`: the server behind it (trust auth); `settings`: more `[pgbouncer]` lines (`server_login_retry`…).
   * Every version is started as one that cannot keep named statements in transaction mode (1.18's
   * behaviour; `max_prepared_statements = 0` on 1.21+), unless `settings` says otherwise: the tests'
   * expectations (refusals, `auto` finding a pooler) are the same whichever PgBouncer the machine has.
   */
  static async start(mode: 'transaction' | 'session' = 'transaction', opts: { target?: string; settings?: Record<string, string> } = {}): Promise<PgBouncer> {
    const target = opts.target ?? PG_ADMIN_URL;
    const server = new URL(target);
    const dir = mkdtempSync(join(tmpdir(), 'rj-pgbouncer-'));
    const port = await freePort();
    const user = decodeURIComponent(server.username || 'postgres');
    writeFileSync(join(dir, 'userlist.txt'), `"${user}" ""\n`);
    writeFileSync(
      join(dir, 'pgbouncer.ini'),
      [
        '[databases]',
        `* = host=${server.hostname} port=${server.port || 5432}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'userlist.txt')}`,
        `pool_mode = ${mode}`,
        'max_client_conn = 1000',
        'default_pool_size = 40',
        'ignore_startup_parameters = extra_float_digits,options',
        `logfile = ${join(dir, 'pgbouncer.log')}`,
        `pidfile = ${join(dir, 'pgbouncer.pid')}`,
        ...Object.entries({ ...(knowsPreparedStatements() ? { max_prepared_statements: '0' } : {}), ...opts.settings }).map(([k, v]) => `${k} = ${v}`),
        '',
      ].join('\n'),
    );
    const asRoot = process.getuid?.() === 0;
    if (asRoot) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
      chmodSync(dir, 0o700);
      for (const f of ['', 'userlist.txt', 'pgbouncer.ini']) chownSync(join(dir, f), uid, gid);
    }
    const cmd = asRoot ? ['runuser', ['-u', 'postgres', '--', BIN, join(dir, 'pgbouncer.ini')]] : [BIN, [join(dir, 'pgbouncer.ini')]];
    const proc = spawn(cmd[0] as string, cmd[1] as string[], { stdio: 'ignore' });
    const bouncer = new PgBouncer(port, proc, dir, target);
    for (let i = 0; ; i++) {
      const c = new pg.Client({ connectionString: bouncer.url('postgres') });
      try {
        await c.connect();
        await c.query('SELECT 1');
        await c.end();
        return bouncer;
      } catch (err) {
        await c.end().catch(() => undefined);
        if (i > 200 || proc.exitCode !== null) throw new Error(`pgbouncer did not start on ${port}: ${(err as Error).message}`, { cause: err });
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode === null) {
      await new Promise<void>((resolve) => {
        this.proc.once('exit', () => resolve());
        this.proc.kill('SIGTERM');
      });
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
