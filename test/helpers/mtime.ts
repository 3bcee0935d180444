// The newest modification time under files and folders: what scripts/build.mjs compares a build
// with (the tests' own reading of that rule, for the global setup and build-script.test.ts).
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** The newest mtime (ms) under the given files and folders, recursively; 0 for none. */
export function newestMtime(paths: string[]): number {
  let max = 0;
  for (const p of paths) {
    if (!existsSync(p)) continue;
    const st = statSync(p);
    max = Math.max(max, st.isDirectory() ? newestMtime(readdirSync(p).map((n) => join(p, n))) : st.mtimeMs);
  }
  return max;
}
