import { chmodSync, lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The process umask `relay-jobs` runs under: what it creates (the embedded database, backups,
 * spill files, objects, the admin token) is readable by its own user only, 0700/0600.
 */
export const PRIVATE_UMASK = 0o077;

/**
 * Files created before the umask was set (an older version, a library embedding that does not set
 * it) can be 0666/0755: on start, every file and folder under the embedded data directory that
 * other users could read is tightened to 0600/0700. Returns how many paths were changed.
 * Symbolic links are left alone (their target may be anything). One pass; it never fails the
 * start: a path that vanished or cannot be changed is counted in `failed`.
 */
export function tightenDataDir(root: string): { tightened: number; failed: number } {
  let tightened = 0;
  let failed = 0;
  const visit = (path: string) => {
    let st;
    try {
      st = lstatSync(path);
    } catch {
      return;
    }
    if (st.isSymbolicLink()) return;
    const want = st.isDirectory() ? 0o700 : 0o600;
    if ((st.mode & 0o077) !== 0) {
      try {
        chmodSync(path, (st.mode & 0o700) | want);
        tightened++;
      } catch {
        failed++;
      }
    }
    if (st.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(root);
  return { tightened, failed };
}
