// What the browser tests share: Debian's Chromium (never a browser a tool downloads), and where
// their screenshots go. A run writes them to its own temporary directory, so `npm test` leaves the
// working tree as it found it; `RELAY_TEST_SCREENSHOTS=docs npx vitest run test/console.test.ts
// test/console-timeline.e2e.test.ts` refreshes the ones the README and docs/ show.
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

let dir: string | undefined;

/** Where a screenshot named `name` goes: one folder per test process. */
export function screenshotPath(name: string): string {
  if (!dir) {
    dir = process.env.RELAY_TEST_SCREENSHOTS ? resolve(process.env.RELAY_TEST_SCREENSHOTS) : mkdtempSync(join(tmpdir(), 'rj-screens-'));
    mkdirSync(dir, { recursive: true });
  }
  return join(dir, name);
}
