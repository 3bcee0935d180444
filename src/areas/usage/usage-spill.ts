// The usage writer's spill files: what could not be written before an exit, kept on disk and written at the next start.
import { appendFileSync, mkdirSync, readdirSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { UsageRow } from './store/usage.js';
import type { DeadLetters } from '../../store/dead-letters.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import { systemClock } from '../../time/clock.js';

/** Writes `rows` to a new spill file in `dir` (the service user's only) and returns its path. */
export function writeSpill(dir: string, rows: UsageRow[]): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, `usage-${systemClock.now()}-${process.pid}.jsonl`);
  appendFileSync(file, rows.map((r) => JSON.stringify(r)).join('\n') + '\n', { mode: 0o600 });
  return file;
}

/**
 * Writes the spill files in `dir` through `insert` (which dead-letters rows the database refuses,
 * so one poison row can never stop a start), then deletes them; an unreadable line is
 * dead-lettered. Repeated request ids are skipped, so a partial earlier replay is harmless.
 * Returns the rows read.
 */
export async function replaySpills(dir: string, batchSize: number, insert: (rows: UsageRow[]) => Promise<unknown>, deadLetters: DeadLetters, metrics: Metrics, log: Logger): Promise<number> {
  let files: string[];
  try {
    files = readdirSync(dir)
      .filter((f) => /^usage-.*\.jsonl$/.test(f))
      .sort();
  } catch {
    return 0;
  }
  let total = 0;
  for (const f of files) {
    const path = join(dir, f);
    const rows: UsageRow[] = [];
    const unreadable: string[] = [];
    for (const line of readFileSync(path, 'utf8').split('\n').filter(Boolean)) {
      try {
        rows.push(JSON.parse(line) as UsageRow);
      } catch {
        unreadable.push(line);
      }
    }
    if (unreadable.length) {
      await deadLetters.add(unreadable.map((line) => ({ source: 'usage_spill', reason: `unreadable line in ${f}`, payload: line })));
      metrics.integrity.deadLetters.inc({ source: 'usage_spill' }, unreadable.length);
    }
    for (let i = 0; i < rows.length; i += batchSize) await insert(rows.slice(i, i + batchSize));
    unlinkSync(path);
    total += rows.length;
    log.info({ file: path, rows: rows.length }, 'usage spill file written and removed');
  }
  return total;
}
