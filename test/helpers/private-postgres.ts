// A private PostgreSQL server (pg_ctl) on its own loopback port and data directory, so a test can
// stop and start PostgreSQL without touching the machine's shared server. Under root it runs as the
// `postgres` user (PostgreSQL refuses root). The data directory is a copy of one initdb per build of
// the tests' CLI (.test-dist/, wiped when src/ changes): initdb runs a dozen processes, about 1 CPU s
// on a quiet machine (more under load), where the copy takes a tenth of a second.
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from './services.js';

const execFileAsync = promisify(execFile);

/** Runs a command as the data directory's owner (`postgres` under root), without blocking the event loop. */
function runAsOwner(file: string, args: string[]): Promise<unknown> {
  if (process.getuid?.() === 0) return execFileAsync('runuser', ['-u', 'postgres', '--', file, ...args], { cwd: '/' });
  return execFileAsync(file, args);
}

let postgresIds: { uid: number; gid: number } | undefined;

/** A new temporary folder the data directory's owner may write in (the `postgres` user's ids looked up once). */
function ownedTempDir(prefix: string, parent = tmpdir()): string {
  const dir = mkdtempSync(join(parent, prefix));
  if (process.getuid?.() === 0) {
    postgresIds ??= { uid: Number(execFileSync('id', ['-u', 'postgres']).toString().trim()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString().trim()) };
    chownSync(dir, postgresIds.uid, postgresIds.gid);
  }
  return dir;
}

/**
 * The initdb'd data directory every private server copies, made on first use for this server
 * version. Files starting at once may each make one: the first rename wins, the others discard theirs.
 */
async function dataTemplate(bin: string): Promise<string> {
  const testDist = fileURLToPath(new URL('../../.test-dist', import.meta.url));
  const template = join(testDist, `private-postgres-${basename(dirname(bin))}`);
  if (existsSync(join(template, 'PG_VERSION'))) return template;
  const building = ownedTempDir('private-postgres.building-', testDist);
  try {
    await runAsOwner(join(bin, 'initdb'), ['-D', join(building, 'data'), '-A', 'trust', '-U', 'postgres', '--no-sync']);
    try {
      renameSync(join(building, 'data'), template);
    } catch (err) {
      if (!existsSync(join(template, 'PG_VERSION'))) throw err;
    }
  } finally {
    rmSync(building, { recursive: true, force: true });
  }
  return template;
}

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

  private run(cmd: string, args: string[]): Promise<unknown> {
    return runAsOwner(join(this.bin, cmd), args);
  }

  static async start(): Promise<PrivatePostgres> {
    const bin = binDir();
    if (!bin) throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
    const template = await dataTemplate(bin);
    const dir = ownedTempDir('rj-pg-');
    const pg = new PrivatePostgres(await freePort(), dir, bin);
    await runAsOwner('cp', ['-a', template, join(dir, 'data')]);
    await pg.startServer();
    return pg;
  }

  /** Starts (again) on the same port and data; waits until it accepts connections. */
  async startServer(): Promise<void> {
    const opts = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
    await this.run('pg_ctl', ['-D', join(this.dir, 'data'), '-o', opts, '-l', join(this.dir, 'log'), '-w', '-t', '60', 'start']);
  }

  /** `immediate` is a crash as the clients see it (no shutdown handshake); `fast` a clean restart. */
  async stopServer(mode: 'immediate' | 'fast' = 'immediate'): Promise<void> {
    await this.run('pg_ctl', ['-D', join(this.dir, 'data'), '-m', mode, '-w', '-t', '60', 'stop']);
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
