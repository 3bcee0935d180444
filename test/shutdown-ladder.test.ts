import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/time/clock.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ladderOrder, runShutdownLadder, SHUTDOWN_PHASES, type Stoppable } from '../src/app/shutdown-ladder.js';

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
