import type { Clock } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';

/**
 * One rung of the shutdown ladder. `stop` gets the time left until the ladder's deadline (at
 * least `minMs`: a rung that must run, such as the final usage flush, gets its floor even when
 * earlier rungs used the grace up). A string it returns is a warning worth logging.
 */
export interface Stoppable {
  name: string;
  minMs?: number;
  stop(withinMs: number): Promise<string | void> | string | void;
}

/**
 * Runs the rungs in order. Each rung's failure is logged and isolated: the next rung still
 * runs, because a failed HTTP close must not keep the usage writer from draining (invariant 4).
 */
export async function runShutdownLadder(steps: readonly Stoppable[], deadlineAt: number, clock: Clock, log: Logger): Promise<void> {
  for (const step of steps) {
    const withinMs = Math.max(step.minMs ?? 0, deadlineAt - clock.now());
    try {
      const warning = await step.stop(withinMs);
      if (warning) log.warn({ step: step.name }, `shutdown: ${warning}`);
    } catch (err) {
      log.error({ step: step.name, err: (err as Error).message }, `shutdown: ${step.name} failed; continuing with the next step`);
    }
  }
}
