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

export function hasPgbouncer(): boolean {
  try {
    execFileSync('pgbouncer', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
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

  /** `target`: the server behind it (trust auth); `settings`: more `[pgbouncer]` lines (`server_login_retry`…). */
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
        ...Object.entries(opts.settings ?? {}).map(([k, v]) => `${k} = ${v}`),
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
    const cmd = asRoot ? ['runuser', ['-u', 'postgres', '--', 'pgbouncer', join(dir, 'pgbouncer.ini')]] : ['pgbouncer', [join(dir, 'pgbouncer.ini')]];
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
