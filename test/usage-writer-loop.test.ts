import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { UsageWriter } from '../src/areas/usage/usage-writer.js';
import type { UsageRow, UsageStore } from '../src/areas/usage/store/usage.js';
import type { DeadLetters } from '../src/store/dead-letters.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { settle, systemClock } from '../src/time/clock.js';
import { UsageMetrics } from '../src/areas/usage/metrics.js';
import { Deadline } from '../src/time/deadline.js';

/**
 * The usage writer's flush is a ServiceLoop (usage_writer): what the loop block promises, for
 * this loop. Events arriving during a tick join its lanes; stop(withinMs) drains what the writer
 * holds and reports what it left (spilled). A store in memory: the database paths are in usage.test.ts.
 */
let n = 0;
const row = (): UsageRow => ({ request_id: `r-${++n}` }) as unknown as UsageRow;

function memoryStore() {
  const stored: string[] = [];
  let gate: Promise<void> | null = null;
  let open: () => void = () => undefined;
  return {
    stored,
    hold: () => (gate = new Promise<void>((r) => (open = r))),
    release: () => ((gate = null), open()),
    failing: false,
    async insertNew(rows: UsageRow[]): Promise<Set<string>> {
      if (gate) await gate;
      if (this.failing) throw new Error('database refuses (test)');
      stored.push(...rows.map((r) => r.request_id));
      return new Set(rows.map((r) => r.request_id));
    },
  };
}

const noLetters = { add: async () => undefined } as unknown as DeadLetters;
const ticks = async (m: Metrics) => (await m.loopTicks.get()).values.filter((v) => v.labels.loop === 'usage_writer').reduce((a, v) => a + v.value, 0);

function writer(store: ReturnType<typeof memoryStore>, metrics = new Metrics()) {
  const dir = mkdtempSync(join(tmpdir(), 'rj-writer-loop-'));
  const w = new UsageWriter(store as unknown as UsageStore, { batchSize: 10, queueLimit: 1000, overflow: 'sync', spillDir: dir }, metrics, silentLogger(), noLetters);
  return { w, dir, metrics };
}

describe('usage writer on the loop block', () => {
  it('events arriving during a tick join its lanes: one tick writes them all, then the loop sleeps', async () => {
    const store = memoryStore();
    const { w, metrics } = writer(store);
    store.hold();
    for (let i = 0; i < 25; i++) expect(w.record(row())).toBe('enqueued');
    await settle();
    expect(store.stored).toHaveLength(0);
    store.release();
    await w.write([row(), row()]);
    await settle();
    expect(store.stored).toHaveLength(27);
    expect(w.waiting).toBe(0);
    expect(await ticks(metrics)).toBe(1);
    expect(await w.stop(Deadline.within(systemClock, 1000))).toBe(0);
  });

  it('stop drains what the writer holds, reports nothing left, and writes later events inline', async () => {
    const store = memoryStore();
    const { w, dir } = writer(store);
    store.hold();
    for (let i = 0; i < 35; i++) w.record(row());
    const stopping = w.stop(Deadline.within(systemClock, 5000));
    await settle();
    store.release();
    expect(await stopping).toBe(0);
    expect(store.stored).toHaveLength(35);
    expect(readdirSync(dir)).toEqual([]);
    expect(await w.record(row())).toBe('sync_fallback');
    expect(store.stored).toHaveLength(36);
  });

  it('stop past the deadline spills what it could not write and returns how many', async () => {
    const store = memoryStore();
    store.failing = true;
    const { w, dir, metrics } = writer(store);
    const waiting = w.write([row(), row(), row()]).catch((err: Error) => err);
    expect(await w.stop(Deadline.within(systemClock, 50))).toBe(3);
    expect((await waiting) as Error).toBeInstanceOf(Error);
    expect(readdirSync(dir)).toHaveLength(1);
    expect((await metrics.group(UsageMetrics).usageSpilled.get()).values[0]!.value).toBe(3);
  });
});
