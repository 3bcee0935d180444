import { closeSync, mkdirSync, openSync, readFileSync, realpathSync, rmSync, statSync, writeSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { UserError } from '../config/errors.js';
import { systemClock } from '../time/clock.js';

export interface DataDirOwner {
  pid: number;
  http_port?: number;
  started_at: string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** `code: message` of a file-system error, for a message that names the path itself. */
function fsReason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e.code ? `${e.code} (${e.message.replace(/^[A-Z]+: /, '').replace(/, \w+ '.*'$/, '')})` : String(e.message ?? err);
}

/**
 * Creates the data directory and the missing folders above it (for this user only), one at a
 * time from the deepest that exists: a path through a file, a read-only or unwritable parent is a
 * UserError naming the path and the reason (Node's recursive mkdir threw a bare EEXIST or ENOENT,
 * and on procfs looped for ever).
 */
export function makeDataDir(dataDir: string): void {
  const abs = resolve(dataDir);
  const missing: string[] = [];
  for (let p = abs; ; p = dirname(p)) {
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || dirname(p) === p) throw new UserError(`data directory ${abs}: cannot read ${p}: ${fsReason(err)}`);
      missing.push(p);
      continue;
    }
    if (!isDir) throw new UserError(`data directory ${abs}: ${p} is a file, not a directory; set RELAY_JOBS_DATA_DIR (data_dir) to a directory`);
    break;
  }
  for (const p of missing.reverse()) {
    try {
      mkdirSync(p, { mode: 0o700 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST' && statSync(p).isDirectory()) continue; // made meanwhile
      throw new UserError(`data directory ${abs}: cannot create ${p}: ${fsReason(err)}`);
    }
  }
}

/**
 * One process per embedded data directory: PGlite would corrupt files shared by two.
 * The lock file holds the owner's pid; a file left by a dead process (SIGKILL) is taken over.
 */
export class DataDirLock {
  /** Lock files this process holds: a second runtime in the same process is refused as another process is. */
  private static readonly held = new Set<string>();

  private constructor(
    readonly path: string,
    private readonly key: string,
  ) {}

  static acquire(dataDir: string, info: { httpPort?: number } = {}): DataDirLock {
    makeDataDir(dataDir);
    const path = join(dataDir, 'relay-jobs.lock');
    const key = join(realpathSync(dataDir), 'relay-jobs.lock'); // one key for every path (symlinks too) to the directory
    if (DataDirLock.held.has(key)) {
      throw new UserError(
        `data directory ${resolve(dataDir)} is in use by another relay-jobs runtime in this process (pid ${process.pid}); shut that runtime down first or give this one another data directory`,
      );
    }
    const body = JSON.stringify({ pid: process.pid, http_port: info.httpPort, started_at: new Date(systemClock.now()).toISOString() } satisfies DataDirOwner);
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(path, 'wx', 0o600);
        writeSync(fd, body);
        closeSync(fd);
        DataDirLock.held.add(key);
        return new DataDirLock(path, key);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw new UserError(`data directory ${resolve(dataDir)}: cannot write its lock file ${path}: ${fsReason(err)}`);
        const owner = DataDirLock.liveOwner(dataDir);
        if (owner) {
          const port = owner.http_port ? `, http port ${owner.http_port}` : '';
          throw new UserError(`data directory ${resolve(dataDir)} is in use by another relay-jobs process (pid ${owner.pid}${port}); stop it first or set RELAY_JOBS_DATA_DIR to another directory`);
        }
        rmSync(path, { force: true }); // stale: its owner is gone
      }
    }
    throw new UserError(`could not lock data directory ${resolve(dataDir)}: another process keeps recreating ${path}`);
  }

  static owner(dataDir: string): DataDirOwner | null {
    try {
      return JSON.parse(readFileSync(join(dataDir, 'relay-jobs.lock'), 'utf8')) as DataDirOwner;
    } catch {
      return null;
    }
  }

  /** The process that owns the directory now, if it is another live one. */
  static liveOwner(dataDir: string): DataDirOwner | null {
    const owner = DataDirLock.owner(dataDir);
    return owner && owner.pid !== process.pid && alive(owner.pid) ? owner : null;
  }

  release(): void {
    if (!DataDirLock.held.delete(this.key)) return; // released already: the file may be another's now
    rmSync(this.path, { force: true });
  }
}
