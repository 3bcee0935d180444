/**
 * Per-replica health on short cadences and the loops a job owns (issue 49, point 3), judged from
 * what the database holds: each replica's newest round and the loop report its newest beat carried.
 */
import { describe, expect, it } from 'vitest';
import { judgeReplicas } from '../src/scheduler/health.js';
import type { JobSettings } from '../src/config/job-settings.js';
import type { JobSnapshot, RunRecord } from '../src/coordination/run-records.js';
import type { LoopReport, LoopsReport } from '../src/workers/loop-book.js';
import { errorClass, loopBook } from '../src/workers/loop-book.js';
import { ServiceLoop } from '../src/workers/service-loop.js';
import { ManualClock, settle } from '../src/time/clock.js';
import { Deadline } from '../src/time/deadline.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { runRecord } from './helpers/run-record.js';

const NOW = Date.parse('2026-01-01T10:00:00Z');
const at = (secondsAgo: number) => new Date(NOW - secondsAgo * 1000);
/** token_refresh as an operator sets it: every 2 s, 500 ms jitter (it must be under the cadence), its default timeout (1 m). */
const everyTwo: JobSettings = { enabled: true, schedule: { kind: 'every', everyMs: 2000 }, timeoutMs: 60_000, lockTtlMs: 60_000, jitterMs: 500 };
const HEARTBEAT_MS = 10_000;

const idleRound = (instance: string, secondsAgo: number): RunRecord =>
  runRecord(at(secondsAgo), { scope: 'instance', instance_id: instance, status: 'no_work', slot: at(secondsAgo), started_at: at(secondsAgo), finished_at: at(secondsAgo - 0.01) });
const snap = (lastRun: RunRecord | null): JobSnapshot => ({
  job: 'token_refresh',
  createdAt: at(3600),
  lastSlot: null,
  holder: null,
  leaseUntil: null,
  lastRun,
  lastSuccessAt: null,
  lastSkipAt: null,
  dbNow: new Date(NOW),
});
const loops = (...l: Array<Partial<LoopReport> & { loop: string }>): LoopsReport => ({
  heartbeat_ms: HEARTBEAT_MS,
  loops: l.map((x) => ({ failed_in_row: 0, last_error: null, failing_for_ms: null, in_tick_ms: null, stall_after_ms: 60_000, ticks: 10, ...x })),
});

type Replica = Parameters<typeof judgeReplicas>[0]['replicas'][number];
const replica = (id: string, roundAgo: number | null, beatAgo: number, report: LoopsReport | null = loops()): Replica => ({
  instanceId: id,
  startedAt: at(600),
  lastRound: roundAgo === null ? null : idleRound(id, roundAgo),
  beatAt: at(beatAgo),
  loops: report,
});
const judge = (replicas: Replica[], settings = everyTwo, jobLoops: string[] = []) =>
  judgeReplicas({
    settings,
    snapshot: snap(replicas.map((r) => r.lastRound).find(Boolean) ?? null),
    replicas,
    since: at(600),
    abortGraceMs: 5000,
    now: new Date(NOW),
    heartbeatMs: HEARTBEAT_MS,
    loops: jobLoops,
  });

describe('short cadences: a job every 2 s, idle rounds recorded by a 10 s heartbeat', () => {
  it('a healthy replica whose newest rounds wait for its next beat is not late; a frozen one is, named alone, inside the liveness window', () => {
    // r0 and r1 beat 9.9 s and 1 s ago and recorded rounds up to their beats; r2 froze 22 s ago (no beat, no round since).
    const j = judge([replica('r0', 13, 9.9), replica('r1', 4, 1), replica('r2', 22, 22)]);
    expect(j.replicas.map((r) => [r.instanceId, r.health])).toEqual([
      ['r0', 'healthy'],
      ['r1', 'healthy'],
      ['r2', 'late'],
    ]);
    expect([j.verdict.health, j.worst]).toEqual(['late', 'r2']);
    expect(j.verdict.reason).toMatch(/^replica r2: last round started 2026-01-01T09:59:38\.000Z; one was due by /);
    expect(j.verdict.reason).not.toMatch(/also|r0|r1/);
  });

  it('a short timeout does not make healthy replicas late between beats (the window is the heartbeat, not the timeout)', () => {
    const j = judge([replica('r0', 14, 9.9), replica('r1', 4, 1)], { ...everyTwo, timeoutMs: 1000 });
    expect([j.verdict.health, j.worst]).toEqual(['healthy', null]);
  });

  it('the resumed replica is healthy as soon as its first round after it resumed is recorded', () => {
    const j = judge([replica('r0', 3, 2), replica('r1', 4, 1), replica('r2', 1, 0.5)]);
    expect([j.verdict.health, j.worst]).toEqual(['healthy', null]);
  });

  it("without a loop report (an older replica) the reader's own heartbeat interval sets the window", () => {
    const j = judge([replica('r0', 13, 9.9, null), replica('r1', 4, 1, null)]);
    expect(j.verdict.health).toBe('healthy');
  });
});

describe("loops a job owns: their failures and stalls are the job's health on that replica", () => {
  const err = { class: 'ReplyError WRONGTYPE', message: 'WRONGTYPE Operation against a key holding the wrong kind of value', ago_ms: 300 };

  it('a loop whose newest ticks failed reads failing, naming the replica, the loop and the last error class', () => {
    const j = judge([replica('r0', 1, 1, loops({ loop: 'change_stream' })), replica('r1', 1, 1, loops({ loop: 'change_stream', failed_in_row: 3, failing_for_ms: 4000, last_error: err }))], everyTwo, [
      'change_stream',
    ]);
    expect([j.verdict.health, j.worst]).toEqual(['failing', 'r1']);
    expect(j.verdict.reason).toBe(
      'replica r1: loop change_stream: 3 ticks failed in a row since 2026-01-01T09:59:55.000Z; last error ReplyError WRONGTYPE: WRONGTYPE Operation against a key holding the wrong kind of value',
    );
    // A loop the job does not own says nothing about it.
    expect(judge([replica('r1', 1, 1, loops({ loop: 'other', failed_in_row: 3, last_error: err }))], everyTwo, ['change_stream']).verdict.health).toBe('healthy');
  });

  it("a tick running past the loop's stall bound reads late, counting the time since the beat that reported it", () => {
    const stalled = loops({ loop: 'usage_writer', in_tick_ms: 55_000 });
    expect(judge([replica('r0', 1, 1, stalled)], everyTwo, ['usage_writer']).verdict.health).toBe('healthy');
    const j = judge([replica('r0', 1, 1), replica('r1', 1, 6, stalled)], everyTwo, ['usage_writer']);
    expect([j.verdict.health, j.worst]).toEqual(['late', 'r1']);
    expect(j.verdict.reason).toMatch(/^replica r1: loop usage_writer has not finished a tick for 61s \(one running since 2026-01-01T09:58:59\.000Z, past its 60s stall bound\)$/);
  });

  it('a stuck round outranks a failing loop', () => {
    const running = runRecord(at(120), { scope: 'instance', instance_id: 'r0', status: 'running', slot: at(120), started_at: at(120), deadline_at: at(60) });
    const j = judgeReplicas({
      settings: everyTwo,
      snapshot: snap(running),
      replicas: [{ instanceId: 'r0', startedAt: at(600), lastRound: running, beatAt: at(1), loops: loops({ loop: 'change_stream', failed_in_row: 1, last_error: err }) }],
      since: at(600),
      abortGraceMs: 5000,
      now: new Date(NOW),
      loops: ['change_stream'],
    });
    expect(j.verdict.health).toBe('stuck');
  });
});

describe('ServiceLoop tick stats (what the heartbeat publishes)', () => {
  it("names an error's class by its constructor and its code: a driver's, or a Redis reply's", () => {
    class ReplyError extends Error {}
    expect(errorClass(new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value'))).toBe('ReplyError WRONGTYPE');
    expect(errorClass(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' }))).toBe('ECONNREFUSED');
    expect(errorClass(new TypeError('x is not a function'))).toBe('TypeError');
  });

  it('counts failures in a row with the last error class, clears them on success, reports a tick in flight, and leaves the book when stopped', async () => {
    const clock = new ManualClock();
    const ticks = { inc: () => undefined };
    let mode: 'fail' | 'ok' | 'hang' = 'fail';
    let release = () => undefined as void;
    const loop = new ServiceLoop({
      name: 'probe_loop',
      clock,
      log: silentLogger(),
      backstopMs: 5000,
      errorDelayMs: 1000,
      ticks,
      tick: async () => {
        if (mode === 'fail') throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1 (postgres://relay:hunter2@db/x)'), { code: 'ECONNREFUSED' });
        if (mode === 'hang') await new Promise<void>((r) => (release = r));
        return { items: 1 };
      },
    });
    const book = loopBook(ticks);
    loop.start();
    await settle();
    await clock.advance(1000);
    const failing = book.report(clock.now());
    expect(failing).toHaveLength(1);
    expect(failing[0]).toMatchObject({ loop: 'probe_loop', failed_in_row: 2, failing_for_ms: 1000, in_tick_ms: null, stall_after_ms: 60_000 });
    expect(failing[0]!.last_error).toMatchObject({ class: 'ECONNREFUSED', ago_ms: 0 });
    expect(failing[0]!.last_error!.message).toBe('connect ECONNREFUSED 127.0.0.1:1 (postgres://***@db/x)');

    mode = 'hang';
    await clock.advance(1000);
    await clock.advance(7000);
    expect(book.report(clock.now())[0]).toMatchObject({ failed_in_row: 2, in_tick_ms: 7000 });
    release();
    await settle();
    expect(book.report(clock.now())[0]).toMatchObject({ failed_in_row: 0, last_error: null, failing_for_ms: null, in_tick_ms: null });

    await loop.stop(Deadline.within(clock, 1000));
    await loop.stopped();
    expect(book.report(clock.now())).toEqual([]);
  });
});
