import type { RoundReport } from '../../src/scheduler/round-runner.js';

/** The outcome of a round that ran (undefined when it did not start). */
export function outcomeOf(r: RoundReport) {
  return r.ran ? r.outcome : undefined;
}
