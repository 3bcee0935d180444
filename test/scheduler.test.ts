import { describe, expect, it } from 'vitest';
import { Scheduler } from '../src/scheduler/scheduler.js';
import type { RoundRunner } from '../src/scheduler/round-runner.js';
import type { JobDefinition } from '../src/scheduler/job.js';
import { ManualClock, systemClock } from '../src/time/clock.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { Deadline } from '../src/time/deadline.js';

const job = (over: Partial<JobDefinition['settings']> = {}): JobDefinition => ({
  name: 'j',
  description: 'j',
  scope: 'cluster',
  settings: { enabled: true, schedule: { kind: 'every', everyMs: 1000 }, timeoutMs: 500, lockTtlMs: 1000, jitterMs: 0, ...over },
  run: async () => ({ items: 0 }),
});

function harness(j: JobDefinition, opts: { lastSlot?: number | null; offset?: number; random?: () => number; roundMs?: number } = {}) {
  const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 0, 300));
  const calls: Array<{ slot: number; at: number }> = [];
  const fakeRunner = {
    run: async (_job: JobDefinition, slot: Date) => {
      calls.push({ slot: slot.getTime(), at: clock.now() + (opts.offset ?? 0) });
      if (opts.roundMs) await new Promise<void>((r) => clock.setTimeout(r, opts.roundMs!));
      return { ran: false, slot, backend: null, reason: 'test' } as const;
    },
  } as unknown as RoundRunner;
  const s = new Scheduler({
    jobs: [j],
    runner: fakeRunner,
    clock,
    random: opts.random ?? (() => 0),
    log: silentLogger(),
    clockOffsetMs: () => opts.offset ?? 0,
    lastSlot: async () => (opts.lastSlot === undefined || opts.lastSlot === null ? null : new Date(opts.lastSlot)),
  });
  return { clock, calls, s, t0: Date.UTC(2026, 0, 1) };
}

describe('Scheduler loop (injected clock)', () => {
  it('runs every aligned slot once, starting with the current slot for a never-run job', async () => {
    const h = harness(job());
    h.s.start();
    await h.clock.advance(3000);
    await h.s.stop(Deadline.within(h.clock, 10));
    expect(h.calls.map((c) => c.slot - h.t0)).toEqual([0, 1000, 2000, 3000]);
  });

  it('fires inside [slot, slot + jitter) and keeps the slot identity', async () => {
    const h = harness(job({ jitterMs: 400 }), { lastSlot: Date.UTC(2026, 0, 1), random: () => 0.5 });
    h.s.start();
    await h.clock.advance(2900);
    await h.s.stop(Deadline.within(h.clock, 10));
    // The clock starts at +300ms and ends at +3200ms.
    expect(h.calls.map((c) => [c.slot - h.t0, c.at - h.t0])).toEqual([
      [1000, 1200],
      [2000, 2200],
      [3000, 3200],
    ]);
  });

  it('after a long round, runs the latest missed slot once instead of all of them', async () => {
    const h = harness(job(), { lastSlot: Date.UTC(2026, 0, 1), roundMs: 3500 });
    h.s.start();
    await h.clock.advance(4500);
    // The round of slot 4000 is still running: the stop's deadline, on the same clock, ends the wait.
    const stopping = h.s.stop(Deadline.within(h.clock, 10));
    await h.clock.advance(10);
    expect(await stopping).toEqual(['j']);
    // Slot 1000 runs from 1000 to 4500; then slot 4000 runs once, late; 2000 and 3000 are not replayed.
    expect(h.calls.map((c) => [c.slot - h.t0, c.at - h.t0])).toEqual([
      [1000, 1000],
      [4000, 4500],
    ]);
  });

  it('computes slots on the database clock, not the replica clock', async () => {
    // This replica's clock runs 400ms behind the database: it must still fire at database-time slot boundaries.
    const h = harness(job(), { lastSlot: Date.UTC(2026, 0, 1), offset: 400 });
    h.s.start();
    await h.clock.advance(1000);
    await h.s.stop(Deadline.within(h.clock, 10));
    expect(h.calls[0]).toEqual({ slot: h.t0 + 1000, at: h.t0 + 1000 });
  });

  it('does not loop disabled jobs and stops promptly', async () => {
    const h = harness(job({ enabled: false }));
    h.s.start();
    await h.clock.advance(5000);
    expect(h.calls).toEqual([]);
    expect(await h.s.stop(Deadline.within(h.clock, 10))).toEqual([]);
  });
});

describe('Scheduler with many jobs', () => {
  it('runs more than ten loops on one stop signal without a MaxListenersExceededWarning', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const clock = new ManualClock(Date.UTC(2026, 0, 1, 0, 0, 0, 300));
      const jobs = Array.from({ length: 25 }, (_, i) => ({ ...job(), name: `j${i}` }));
      const runner = { run: async (_j: JobDefinition, slot: Date) => ({ ran: false, slot, backend: null, reason: 'test' }) } as unknown as RoundRunner;
      const s = new Scheduler({ jobs, runner, clock, random: () => 0, log: silentLogger(), clockOffsetMs: () => 0, lastSlot: async () => null });
      s.start();
      await clock.advance(2500);
      expect(await s.stop(Deadline.within(clock, 10))).toEqual([]);
      // Node emits process warnings on the next tick.
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.includes('MaxListeners'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('clears its grace timer once every loop has stopped', async () => {
    const h = harness(job());
    h.s.start();
    await h.clock.advance(1000);
    const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    expect(await h.s.stop(Deadline.within(systemClock, 3_600_000))).toEqual([]);
    const after = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    expect(after).toBeLessThanOrEqual(before);
  });
});

describe('Scheduler.requestRound (work queued for a job: never left for its next slot)', () => {
  /**
   * A runner whose lock is held by "another round" until `freeAt` (clock time): a manual round
   * before it is refused, as the lock or the claim refuses one while the job runs anywhere.
   */
  function busyUntil(freeAt: number, opts: { roundMs?: number } = {}) {
    const clock = new ManualClock(Date.UTC(2026, 0, 1));
    const attempts: Array<{ at: number; ran: boolean; recordSkip: boolean | undefined }> = [];
    let onRound: (() => void) | undefined;
    const runner = {
      run: async (_j: JobDefinition, slot: Date | null, _onStart: unknown, o: { recordSkip?: boolean } = {}) => {
        const ran = clock.now() >= freeAt;
        attempts.push({ at: clock.now(), ran, recordSkip: o.recordSkip });
        if (!ran) return { ran: false, slot, backend: 'redis', reason: 'leader lock (redis) held by r2' };
        onRound?.();
        if (opts.roundMs) await new Promise<void>((r) => clock.setTimeout(r, opts.roundMs!));
        return { ran: true, runId: attempts.length, token: attempts.length, slot: new Date(clock.now()), backend: 'redis', outcome: { status: 'ok' } };
      },
    } as unknown as RoundRunner;
    // The job's own loop is never started: only requested rounds run.
    const s = new Scheduler({ jobs: [job()], runner, clock, random: () => 0, log: silentLogger(), clockOffsetMs: () => 0, lastSlot: async () => null });
    return { clock, attempts, s, setOnRound: (f: () => void) => (onRound = f) };
  }
  const settle = () => new Promise((r) => setImmediate(r));

  it('refused while a round runs: asks again with backoff until one of its own has run, then stops asking', async () => {
    const h = busyUntil(Date.UTC(2026, 0, 1) + 3000);
    h.s.requestRound('j');
    await settle();
    await h.clock.advance(20_000);
    const ran = h.attempts.filter((a) => a.ran);
    expect(ran).toHaveLength(1);
    expect(ran[0]!.at - Date.UTC(2026, 0, 1)).toBeLessThan(3000 + 5000); // within one backoff step of the lock coming free
    expect(h.attempts.at(-1)!.ran).toBe(true); // nothing after the round it asked for
    const gaps = h.attempts.slice(1).map((a, i) => a.at - h.attempts[i]!.at);
    expect(gaps[0]).toBe(250);
    for (let i = 1; i < gaps.length; i++) expect(gaps[i]).toBe(Math.min(gaps[i - 1]! * 2, 5000));
    // A refused attempt is counted, not written as a manual round's record each time.
    expect(h.attempts.every((a) => a.recordSkip === false)).toBe(true);
    expect(await h.s.stop(Deadline.within(h.clock, 10))).toEqual([]);
  });

  it('requests while one waits join it; one that arrives during its round gets one more round after it', async () => {
    const h = busyUntil(Date.UTC(2026, 0, 1) + 1000, { roundMs: 500 });
    h.s.requestRound('j');
    h.s.requestRound('j');
    await settle();
    await h.clock.advance(600);
    h.s.requestRound('j');
    let asked = false;
    h.setOnRound(() => {
      // Work queued while the requested round runs: that round may have looked for it already.
      if (!asked) h.s.requestRound('j');
      asked = true;
    });
    await h.clock.advance(10_000);
    expect(h.attempts.filter((a) => a.ran)).toHaveLength(2);
    expect(await h.s.stop(Deadline.within(h.clock, 10))).toEqual([]);
  });

  it('a waiting request ends at shutdown', async () => {
    const h = busyUntil(Number.MAX_SAFE_INTEGER);
    h.s.requestRound('j');
    await settle();
    await h.clock.advance(2000);
    const before = h.attempts.length;
    expect(await h.s.stop(Deadline.within(h.clock, 10))).toEqual([]);
    await h.clock.advance(60_000);
    expect(h.attempts.length).toBe(before);
    expect(() => h.s.requestRound('nope')).toThrow(/^unknown job "nope" \(known jobs: /);
  });
});
