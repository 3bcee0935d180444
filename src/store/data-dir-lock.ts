import { mkdirSync, openSync, readFileSync, rmSync, writeSync, closeSync } from 'node:fs';
import { join, resolve } from 'node:path';
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

/**
 * One process per embedded data directory: PGlite would corrupt files shared by two.
 * The lock file holds the owner's pid; a file left by a dead process (SIGKILL) is taken over.
 */
export class DataDirLock {
  private constructor(readonly path: string) {}

  static acquire(dataDir: string, info: { httpPort?: number } = {}): DataDirLock {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const path = join(dataDir, 'relay-jobs.lock');
    const body = JSON.stringify({ pid: process.pid, http_port: info.httpPort, started_at: new Date(systemClock.now()).toISOString() } satisfies DataDirOwner);
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(path, 'wx', 0o600);
        writeSync(fd, body);
        closeSync(fd);
        return new DataDirLock(path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
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
    rmSync(this.path, { force: true });
  }
}
