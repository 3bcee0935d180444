// The embedded data directory is made folder by folder (src/store/data-dir-lock.ts): a path the
// service cannot use is one line naming the path and the reason, never a bare EEXIST/ENOENT with a
// stack (Node's recursive mkdir), and never a hang (that mkdir loops for ever under /proc).
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UserError } from '../src/config/errors.js';
import { DataDirLock } from '../src/store/data-dir-lock.js';

describe('the embedded data directory', () => {
  const root = mkdtempSync(join(tmpdir(), 'rj-datadir-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const refused = (dir: string): string => {
    try {
      DataDirLock.acquire(dir).release();
    } catch (err) {
      expect(err).toBeInstanceOf(UserError);
      return (err as Error).message;
    }
    throw new Error(`${dir} was accepted`);
  };

  it('creates the missing folders for this user only, and locks the directory', () => {
    const dir = join(root, 'a', 'b', 'data');
    const lock = DataDirLock.acquire(dir);
    try {
      for (const p of [join(root, 'a'), join(root, 'a', 'b'), dir]) expect((statSync(p).mode & 0o777).toString(8), p).toBe('700');
      expect(existsSync(join(dir, 'relay-jobs.lock'))).toBe(true);
    } finally {
      lock.release();
    }
  });

  it('a second runtime in the same process is refused (through a symlink too), and its refusal leaves the first lock alone', () => {
    const dir = join(root, 'shared');
    const first = DataDirLock.acquire(dir);
    const link = join(root, 'shared-link');
    symlinkSync(dir, link);
    const lockFile = readFileSync(join(dir, 'relay-jobs.lock'), 'utf8');
    try {
      for (const path of [dir, link])
        expect(refused(path)).toBe(
          `data directory ${path} is in use by another relay-jobs runtime in this process (pid ${process.pid}); shut that runtime down first or give this one another data directory`,
        );
      expect(readFileSync(join(dir, 'relay-jobs.lock'), 'utf8')).toBe(lockFile);
    } finally {
      first.release();
      first.release(); // twice: the second release removes nothing
    }
    expect(existsSync(join(dir, 'relay-jobs.lock'))).toBe(false);
    // Free again: this process may take it (a lock file with this pid that no runtime here holds is stale).
    writeFileSync(join(dir, 'relay-jobs.lock'), JSON.stringify({ pid: process.pid }));
    const again = DataDirLock.acquire(link);
    const other = join(root, 'other');
    const unrelated = DataDirLock.acquire(other);
    again.release();
    expect(existsSync(join(other, 'relay-jobs.lock'))).toBe(true);
    unrelated.release();
  });

  it('a file where the directory or one of its parents should be is named as such', () => {
    const file = join(root, 'a-file');
    writeFileSync(file, 'x');
    expect(refused(file)).toBe(`data directory ${file}: ${file} is a file, not a directory; set RELAY_JOBS_DATA_DIR (data_dir) to a directory`);
    expect(refused(join(file, 'sub', 'data'))).toBe(`data directory ${join(file, 'sub', 'data')}: ${file} is a file, not a directory; set RELAY_JOBS_DATA_DIR (data_dir) to a directory`);
  });

  it.runIf(existsSync('/proc/self'))('a folder that cannot be made (under /proc) is refused at once with its reason', () => {
    expect(refused('/proc/relay-jobs-nope/data')).toBe('data directory /proc/relay-jobs-nope/data: cannot create /proc/relay-jobs-nope: ENOENT (no such file or directory)');
  });
});
