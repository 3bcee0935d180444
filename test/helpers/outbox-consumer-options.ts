import type { ConsumerOptions } from '../../src/areas/scheduler-snapshot/outbox-consumer.js';

/**
 * An outbox consumer's options as the tests build it by hand (the service takes them from
 * `snapshot.*`): the service defaults, with no lag or backlog rule and no periodic rebuild in the
 * way unless a test sets them.
 */
export function testConsumerOptions(o: Partial<ConsumerOptions> = {}): ConsumerOptions {
  return {
    pollIntervalMs: 1000,
    batchSize: 200,
    claimTtlMs: 30_000,
    rules: { lagBoundSeconds: 3600, lagPolls: 3, backlogLimit: 1_000_000 },
    rebuildEveryMs: 86_400_000,
    rebuildBackoffBaseMs: 5000,
    rebuildBackoffMaxMs: 300_000,
    rebuildChunk: 100,
    ackTimeoutMs: 5000,
    ackAttempts: 3,
    deleteBatch: 50,
    ...o,
  };
}
