import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/time/clock.js';
import type { Deadline } from '../src/time/deadline.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ladderOrder, runShutdownLadder, SHUTDOWN_PHASES, SHUTDOWN_PROGRESS_EVERY_MS, type Stoppable } from '../src/app/shutdown-ladder.js';
import { captureLogs } from './helpers/log-capture.js';

/** The ladder's order is derived in one place: by declared phase, then registration order. */
describe('shutdown ladder order', () => {
  it('runs rungs by phase, registration order within a phase, an undeclared phase as an area service', async () => {
    const ran: string[] = [];
    const rung = (name: string, phase?: Stoppable['phase']): Stoppable => ({ name, phase, stop: () => void ran.push(name) });
    // Registered out of order on purpose: the phase, not the position, puts connections last.
    const steps = [
      rung('connections', 'connections'),
      rung('usage writer'),
      rung('http', 'ingress'),
      rung('job backup', 'jobs'),
      rung('instance record', 'coordination'),
      rung('outbox'),
      rung('rounds', 'rounds'),
    ];
    expect(ladderOrder(steps).map((s) => s.name)).toEqual(['http', 'rounds', 'job backup', 'usage writer', 'outbox', 'instance record', 'connections']);
    await runShutdownLadder(steps, 0, new ManualClock(0), silentLogger());
    expect(ran).toEqual(['http', 'rounds', 'job backup', 'usage writer', 'outbox', 'instance record', 'connections']);
    expect(SHUTDOWN_PHASES[0]).toBe('ingress');
    expect(SHUTDOWN_PHASES.at(-1)).toBe('connections');
  });
});

/** A slow shutdown says what it is waiting for: the rung still running, within its limit and past it. */
describe('shutdown ladder progress', () => {
  it('names a rung still running every interval, at error once it runs past its limit, and stops naming it when it returns', async () => {
    const clock = new ManualClock(0);
    const { lines, logger } = captureLogs();
    let release!: () => void;
    const steps: Stoppable[] = [
      { name: 'http', phase: 'ingress', stop: () => undefined },
      { name: 'usage writer', stop: () => new Promise<void>((r) => (release = r)) },
    ];
    const done = runShutdownLadder(steps, 25_000, clock, logger);
    const progress = () => lines.filter((l) => typeof l.msg === 'string' && /still/.test(l.msg)).map((l) => [l.level, l.step, l.waited_ms, l.limit_ms]);
    await clock.advance(SHUTDOWN_PROGRESS_EVERY_MS - 1);
    expect(progress()).toEqual([]);
    await clock.advance(1);
    expect(progress()).toEqual([['info', 'usage writer', 10_000, 25_000]]);
    await clock.advance(2 * SHUTDOWN_PROGRESS_EVERY_MS);
    expect(progress()).toEqual([
      ['info', 'usage writer', 10_000, 25_000],
      ['info', 'usage writer', 20_000, 25_000],
      ['error', 'usage writer', 30_000, 25_000],
    ]);
    release();
    await done;
    await clock.advance(5 * SHUTDOWN_PROGRESS_EVERY_MS);
    expect(progress()).toHaveLength(3);
  });
});

/** One deadline for the whole shutdown: what a rung took is gone for the next; a floor pushes out only its own rung's. */
describe('shutdown ladder deadline', () => {
  it('hands every rung the same absolute deadline, and a rung with minMs its floor past the grace', async () => {
    const clock = new ManualClock(0);
    const seen: Record<string, { at: number; leftMs: number }> = {};
    const saw = (name: string, by: Deadline) => (seen[name] = { at: by.at, leftMs: by.leftMs() });
    const steps: Stoppable[] = [
      // Rung A takes 3 s of the 5 s grace.
      { name: 'A', phase: 'rounds', stop: (by) => (saw('A', by), new Promise<void>((r) => clock.setTimeout(r, 3000))) },
      // B's floor (1 s) is below what is left: it keeps the shared deadline.
      { name: 'B', phase: 'jobs', minMs: 1000, stop: (by) => void saw('B', by) },
      { name: 'floored', minMs: 4000, stop: (by) => void saw('floored', by) },
      { name: 'after', phase: 'connections', stop: (by) => void saw('after', by) },
    ];
    const done = runShutdownLadder(steps, 5000, clock, silentLogger());
    await clock.advance(3000);
    await done;
    expect(seen).toEqual({
      A: { at: 5000, leftMs: 5000 },
      B: { at: 5000, leftMs: 2000 }, // the same absolute point: 2 s left, not a fresh 5 s
      floored: { at: 7000, leftMs: 4000 }, // its floor, past the grace
      after: { at: 5000, leftMs: 2000 }, // the floor moved no one else's deadline
    });
  });
});
