import { describe, expect, it } from 'vitest';
import { classOfRedis, classOfStatement, keyOf, needsPrimary, tallyStatements, type LogEntry } from '../bench/scaling-classify.js';
import { WOKEN_TICKS_PER_SEC, accountsAtLimit, extrapolate, fitLine, project, unitCost, type RunData, type WindowData } from '../bench/scaling-model.js';

const entry = (pid: string, sql: string, at = 0): LogEntry => ({ at, pid, sql });

function win(secs: number, pg: Record<string, number>, redis: Record<string, number>, units: Record<string, number> = {}): WindowData {
  return {
    secs,
    pg: Object.fromEntries(Object.entries(pg).map(([c, n]) => [c, { statements: n, transactions: n, primaryTransactions: n, kinds: [] }])),
    pgXact: 0,
    redis: Object.fromEntries(Object.entries(redis).map(([c, n]) => [c, { evalsha: n }])),
    lua: {},
    redisTotal: 0,
    units,
    backends: 0,
  };
}

describe('scaling bench attribution (bench/scaling-classify.ts)', () => {
  it('classes a statement by what it touches; the hot-path token read and the consumer read before the refresh rules', () => {
    expect(classOfStatement('SELECT id, status, token_version, token_expires_at, credentials_sealed FROM accounts WHERE id = $1')).toBe('token read (hot path)');
    expect(classOfStatement('SELECT id, platform, scheduler_routing_status(status, status_before_refresh) FROM accounts WHERE id = ANY($1)')).toBe('snapshot outbox → Redis');
    expect(classOfStatement('WITH dead AS (SELECT reason FROM dead_refresh_tokens WHERE fingerprint = $3) SELECT 1')).toBe('token refresh');
    expect(classOfStatement('WITH skips AS (\n  INSERT INTO job_skip_counts ...) UPDATE instances SET heartbeat_at = clock_timestamp()')).toBe('heartbeat, liveness, leader');
    expect(classOfStatement('INSERT INTO platform_quota_usage (user_id) VALUES ($1)')).toBe('quota flush');
    expect(classOfStatement('SELECT 42 FROM somewhere_new')).toBe('unclassified');
    expect(classOfStatement('BEGIN')).toBeNull();
    expect(needsPrimary('SELECT seq FROM change_stream_state FOR UPDATE SKIP LOCKED')).toBe(true);
    expect(needsPrimary('WITH x AS (UPDATE accounts SET a = 1 RETURNING id) SELECT * FROM x')).toBe(true);
    expect(needsPrimary('SELECT id FROM accounts WHERE id = $1')).toBe(false);
  });

  it('groups BEGIN … COMMIT of one backend into one transaction of its first classed statement, interleaved backends apart', () => {
    const t = tallyStatements([
      entry('1', 'BEGIN'),
      entry('2', 'SELECT 42 FROM somewhere_new'),
      entry('1', 'SELECT user_id FROM platform_quota_usage WHERE user_id = $1'),
      entry('1', 'INSERT INTO platform_quota_usage (user_id) VALUES ($1)'),
      entry('1', 'COMMIT'),
      entry('3', 'BEGIN'),
      entry('3', 'SELECT 42 FROM somewhere_new'),
      entry('3', 'DELETE FROM usage_daily WHERE day = $1'),
      entry('3', 'COMMIT'),
    ]);
    expect(t.get('quota flush')).toMatchObject({ statements: 4, transactions: 1, primaryTransactions: 1 });
    expect(t.get('unclassified')).toMatchObject({ statements: 1, transactions: 1, primaryTransactions: 0 });
    // An unclassed first statement does not hide the feature the transaction writes.
    expect(t.get('usage rollups, cleanup')).toMatchObject({ statements: 4, transactions: 1 });
  });

  it('classes a Redis command by its key family; a script by its first key, its inner reads of the snapshot as writes', () => {
    expect(keyOf(['evalsha', 'abc', '2', 'p:bench:quota:u1\u0000openai', 'p:bench:quota:dirty'])).toBe('p:bench:quota:u1\u0000openai');
    expect(classOfRedis(['evalsha', 'abc', '1', 'p:bench:{job:usage_cleanup}:leader'])).toBe('leader locks');
    expect(classOfRedis(['set', 'p:bench:oauth:refresh_lock:{7}', 'x'])).toBe('token refresh locks');
    expect(classOfRedis(['hmget', 'p:bench:{sched}:openai:', '_gen'])).toBe('snapshot store reads');
    expect(classOfRedis(['hmget', 'p:bench:{sched}:openai:', '_gen'], true)).toBe('snapshot store writes');
    expect(classOfRedis(['ping'])).toBe('keyless (PING, INFO, SCRIPT, CLIENT…)');
  });
});

describe('scaling model (bench/scaling-model.ts)', () => {
  it('fits a line by least squares and never extrapolates a falling cost below what was measured', () => {
    expect(
      fitLine([
        [1, 3],
        [3, 7],
        [9, 19],
      ]),
    ).toEqual({ a: 1, b: 2 });
    expect(fitLine([[4, 5]])).toEqual({ a: 5, b: 0 });
    expect(
      extrapolate(
        [
          [1, 3],
          [3, 7],
          [9, 19],
        ],
        100,
      ),
    ).toBe(201);
    expect(
      extrapolate(
        [
          [1, 4],
          [3, 3],
          [9, 2],
        ],
        100,
      ),
    ).toBe(2);
  });

  it('a unit costs (load − idle) of its classes over the units; a deployment adds N replicas of background and its load', () => {
    const run = (n: number): RunData => ({
      replicas: n,
      load: {},
      idle: win(10, { 'heartbeat, liveness, leader': 2 * n * 10 }, { 'leader locks': n * 10 }),
      loaded: win(10, { 'heartbeat, liveness, leader': 2 * n * 10, 'token refresh': 3 * 50 }, { 'leader locks': n * 10, 'token refresh locks': 4 * 50 }, { refreshes: 50 }),
      errors: [],
    });
    const runs = [run(1), run(3), run(9)];
    const refresh = { name: 'token refresh', unit: 'refresh', counter: 'refreshes', pg: ['token refresh'], redis: ['token refresh locks'], pgBatch: 1, redisBatch: 1, fanOut: false };
    expect(unitCost(runs[0]!, refresh)).toEqual({ statements: 3, transactions: 3, primaryTransactions: 3, redis: 4 });
    const perAccount = {
      refreshesPerAccountPerSec: 0.001,
      monitorChecksPerAccountPerSec: 0,
      usageEventsPerAccountPerSec: 0,
      usageBatchSize: 100,
      accountChangesPerAccountPerSec: 0,
      gatewayReplicas: 0,
    };
    const p = project(runs, { name: 'x', replicas: 30, accounts: 1000, perSec: { 'token refresh': 1 } });
    expect(p.upper.statements).toBeCloseTo(2 * 30 + 3);
    expect(p.upper.redis).toBeCloseTo(30 + 4);
    // 10,000 statements/s: 60 for the background of 30, 3 per refresh, 0.001 refreshes per account.
    const limits = { pgStatementsPerSec: 10_000, pgWriteTransactionsPerSec: 1e9, pgConnections: 100, redisOpsPerSec: 1e9 };
    expect(accountsAtLimit(runs, 30, perAccount, limits, 'upper').statements / ((10_000 - 60) / 0.003)).toBeCloseTo(1, 4);
  });

  it('a woken-on-every-replica feature pays its own work per unit, and its N losing ticks per unit only up to the tick rate', () => {
    // Per outbox event: 2 statements of the winner's work + 3 per replica of losing ticks.
    const run = (n: number): RunData => ({
      replicas: n,
      load: {},
      idle: win(10, { 'heartbeat, liveness, leader': 2 * n * 10 }, {}),
      loaded: win(10, { 'heartbeat, liveness, leader': 2 * n * 10, 'snapshot outbox → Redis': (2 + 3 * n) * 50 }, {}, { outboxApplied: 50 }),
      errors: [],
    });
    const runs = [run(1), run(3), run(9)];
    const slow = project(runs, { name: 'slow', replicas: 30, accounts: 0, perSec: { 'snapshot apply (outbox → Redis)': 10 } });
    expect(slow.upper.statements).toBeCloseTo(60 + 10 * (2 + 3 * 30));
    const fast = project(runs, { name: 'fast', replicas: 30, accounts: 0, perSec: { 'snapshot apply (outbox → Redis)': 1000 } });
    expect(fast.upper.statements).toBeCloseTo(60 + 1000 * 2 + 3 * 30 * WOKEN_TICKS_PER_SEC);
    // Batches full: the winner's work shrinks by the claim batch (200), the losing ticks do not.
    expect(fast.lower.statements).toBeCloseTo(60 + (1000 * 2) / 200 + 3 * 30 * WOKEN_TICKS_PER_SEC);
  });
});
