// A private PostgreSQL server (initdb + pg_ctl) on its own loopback port and data directory, so a
// test can stop and start PostgreSQL without touching the machine's shared server. Under root it
// runs as the `postgres` user (PostgreSQL refuses root).
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './services.js';

function binDir(): string | null {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'initdb')));
  return versions.length ? join(root, versions.sort((a, b) => Number(b) - Number(a))[0]!, 'bin') : null;
}

export function hasPostgresServer(): boolean {
  return binDir() !== null;
}

export class PrivatePostgres {
  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly bin: string,
  ) {}

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  private run(cmd: string, args: string[]): void {
    const asRoot = process.getuid?.() === 0;
    const file = join(this.bin, cmd);
    if (asRoot) execFileSync('runuser', ['-u', 'postgres', '--', file, ...args], { stdio: 'pipe', cwd: '/' });
    else execFileSync(file, args, { stdio: 'pipe' });
  }

  static async start(): Promise<PrivatePostgres> {
    const bin = binDir();
    if (!bin) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
    const dir = mkdtempSync(join(tmpdir(), 'rj-pg-'));
    if (process.getuid?.() === 0) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
      chownSync(dir, uid, gid);
    }
    const pg = new PrivatePostgres(await freePort(), dir, bin);
    pg.run('initdb', ['-D', join(dir, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']);
    await pg.startServer();
    return pg;
  }

  /** Starts (again) on the same port and data; waits until it accepts connections. */
  async startServer(): Promise<void> {
    const opts = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
    this.run('pg_ctl', ['-D', join(this.dir, 'data'), '-o', opts, '-l', join(this.dir, 'log'), '-w', '-t', '60', 'start']);
  }

  /** `immediate` is a crash as the clients see it (no shutdown handshake); `fast` a clean restart. */
  async stopServer(mode: 'immediate' | 'fast' = 'immediate'): Promise<void> {
    this.run('pg_ctl', ['-D', join(this.dir, 'data'), '-m', mode, '-w', '-t', '60', 'stop']);
  }

  async destroy(): Promise<void> {
    try {
      await this.stopServer('immediate');
    } catch {
      // already stopped
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
