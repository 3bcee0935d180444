import { describe, expect, it } from 'vitest';
import { judgeHealth, judgeReplicas } from '../src/scheduler/health.js';
import type { JobSettings } from '../src/config/job-settings.js';
import type { JobSnapshot, RunRecord } from '../src/coordination/run-records.js';
import { runRecord } from './helpers/run-record.js';

const T = (iso: string) => new Date(iso);
const minutely: JobSettings = { enabled: true, schedule: { kind: 'every', everyMs: 60_000 }, timeoutMs: 10_000, lockTtlMs: 15_000, jitterMs: 0 };
const daily: JobSettings = { enabled: true, schedule: { kind: 'cron', expr: '0 2 * * *', timezone: 'UTC' }, timeoutMs: 1_800_000, lockTtlMs: 2_000_000, jitterMs: 0 };

const run = (p: Partial<RunRecord>): RunRecord => runRecord(T('2026-01-01T00:00:00Z'), p);
function snap(now: string, lastRun: RunRecord | null, lastSlot: Date | null = lastRun?.slot ?? null): JobSnapshot {
  return { job: 'j', createdAt: T('2025-12-01T00:00:00Z'), lastSlot, holder: null, leaseUntil: null, lastRun, lastSuccessAt: null, lastSkipAt: null, dbNow: T(now) };
}
const since = T('2025-12-01T00:00:00Z');

describe('judgeHealth', () => {
  it('judges a daily job against its own cadence, not a global five minutes', () => {
    const last = run({ slot: T('2026-01-01T02:00:00Z'), started_at: T('2026-01-01T02:00:00Z') });
    expect(judgeHealth({ settings: daily, snapshot: snap('2026-01-01T14:00:00Z', last), since, abortGraceMs: 5000 }).health).toBe('healthy');
    expect(judgeHealth({ settings: daily, snapshot: snap('2026-01-02T02:30:00Z', last), since, abortGraceMs: 5000 }).health).toBe('healthy');
    expect(judgeHealth({ settings: daily, snapshot: snap('2026-01-02T05:00:00Z', last), since, abortGraceMs: 5000 }).health).toBe('late');
  });

  it('calls a minutely job late minutes after its last round', () => {
    const last = run({ slot: T('2026-01-01T10:00:00Z'), started_at: T('2026-01-01T10:00:00Z') });
    expect(judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:01:10Z', last), since, abortGraceMs: 5000 }).health).toBe('healthy');
    expect(judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:03:00Z', last), since, abortGraceMs: 5000 }).health).toBe('late');
  });

  it('is stuck when a round runs past its timeout plus grace', () => {
    const r = run({ status: 'running', slot: T('2026-01-01T10:00:00Z'), started_at: T('2026-01-01T10:00:00Z'), deadline_at: T('2026-01-01T10:00:10Z') });
    expect(judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:00:12Z', r), since, abortGraceMs: 5000 }).health).toBe('healthy');
    const v = judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:00:16Z', r), since, abortGraceMs: 5000 });
    expect(v.health).toBe('stuck');
    expect(v.reason).toMatch(/round 1 on a/);
  });

  it('is failing after a failed or timed-out round, healthy again after a success', () => {
    const failed = run({ status: 'failed', error: 'boom', slot: T('2026-01-01T10:00:00Z'), started_at: T('2026-01-01T10:00:00Z') });
    const v = judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:00:30Z', failed), since, abortGraceMs: 5000 });
    expect(v).toMatchObject({ health: 'failing' });
    expect(v.reason).toContain('boom');
    expect(
      judgeHealth({
        settings: minutely,
        snapshot: snap('2026-01-01T10:00:30Z', run({ status: 'timed_out', slot: T('2026-01-01T10:00:00Z'), started_at: T('2026-01-01T10:00:00Z') })),
        since,
        abortGraceMs: 5000,
      }).health,
    ).toBe('failing');
    expect(
      judgeHealth({
        settings: minutely,
        snapshot: snap('2026-01-01T10:00:30Z', run({ status: 'no_work', slot: T('2026-01-01T10:00:00Z'), started_at: T('2026-01-01T10:00:00Z') })),
        since,
        abortGraceMs: 5000,
      }).health,
    ).toBe('healthy');
  });

  it('is idle before the first slot, late when nobody ever ran it, disabled when off', () => {
    const s = T('2026-01-01T10:00:00Z');
    expect(judgeHealth({ settings: daily, snapshot: snap('2026-01-01T10:05:00Z', null), since: s, abortGraceMs: 5000 }).health).toBe('idle');
    expect(judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:05:00Z', null), since: s, abortGraceMs: 5000 }).health).toBe('late');
    expect(judgeHealth({ settings: { ...minutely, enabled: false }, snapshot: undefined, since: s, abortGraceMs: 5000 }).health).toBe('disabled');
  });
});

describe('judgeReplicas: jobs that run on every replica are judged per live replica', () => {
  const started = T('2026-01-01T09:00:00Z');
  const ok = (instance: string, at: string) => run({ scope: 'instance', instance_id: instance, slot: T(at), started_at: T(at) });
  const judge = (now: string, replicas: Array<{ instanceId: string; lastRound: RunRecord | null }>, newest: RunRecord | null) =>
    judgeReplicas({ settings: minutely, snapshot: snap(now, newest, null), replicas: replicas.map((r) => ({ ...r, startedAt: started })), since, abortGraceMs: 5000 });

  it("one replica's dead loop is not hidden by another's newest round: late, naming the replica", () => {
    const fresh = ok('r1', '2026-01-01T10:05:00Z');
    const stale = ok('r2', '2026-01-01T10:00:00Z');
    // Cluster-wide, the newest round (r1's) says healthy.
    expect(judgeHealth({ settings: minutely, snapshot: snap('2026-01-01T10:05:30Z', fresh, null), since, abortGraceMs: 5000 }).health).toBe('healthy');
    const j = judge(
      '2026-01-01T10:05:30Z',
      [
        { instanceId: 'r1', lastRound: fresh },
        { instanceId: 'r2', lastRound: stale },
      ],
      fresh,
    );
    expect(j.verdict.health).toBe('late');
    expect(j.worst).toBe('r2');
    expect(j.verdict.reason).toMatch(/^replica r2: last round started 2026-01-01T10:00:00\.000Z/);
    expect(j.replicas.map((r) => [r.instanceId, r.health])).toEqual([
      ['r1', 'healthy'],
      ['r2', 'late'],
    ]);
  });

  it('a live replica with no round at all is late once a round was due since its start', () => {
    const fresh = ok('r1', '2026-01-01T09:00:30Z');
    expect(
      judge(
        '2026-01-01T09:01:00Z',
        [
          { instanceId: 'r1', lastRound: fresh },
          { instanceId: 'r2', lastRound: null },
        ],
        fresh,
      ).verdict.health,
    ).toBe('idle');
    const j = judge(
      '2026-01-01T09:03:00Z',
      [
        { instanceId: 'r1', lastRound: ok('r1', '2026-01-01T09:02:30Z') },
        { instanceId: 'r2', lastRound: null },
      ],
      fresh,
    );
    expect(j.verdict.health).toBe('late');
    expect(j.verdict.reason).toMatch(/^replica r2: no round has run/);
  });

  it('a failing replica makes the job failing, a stuck one stuck; the worst wins and the others are named', () => {
    const failed = run({ scope: 'instance', instance_id: 'r2', status: 'failed', error: 'redis down', slot: T('2026-01-01T10:05:00Z'), started_at: T('2026-01-01T10:05:00Z') });
    const j = judge(
      '2026-01-01T10:05:30Z',
      [
        { instanceId: 'r1', lastRound: ok('r1', '2026-01-01T10:05:00Z') },
        { instanceId: 'r2', lastRound: failed },
      ],
      failed,
    );
    expect([j.verdict.health, j.worst]).toEqual(['failing', 'r2']);
    expect(j.verdict.reason).toBe('replica r2: last round failed: redis down');
    const stuck = run({ scope: 'instance', instance_id: 'r3', status: 'running', slot: T('2026-01-01T10:04:00Z'), started_at: T('2026-01-01T10:04:00Z'), deadline_at: T('2026-01-01T10:04:10Z') });
    const k = judge(
      '2026-01-01T10:05:30Z',
      [
        { instanceId: 'r1', lastRound: ok('r1', '2026-01-01T10:05:00Z') },
        { instanceId: 'r2', lastRound: failed },
        { instanceId: 'r3', lastRound: stuck },
      ],
      failed,
    );
    expect([k.verdict.health, k.worst]).toEqual(['stuck', 'r3']);
    expect(k.verdict.reason).toMatch(/\(also r2 failing\)$/);
  });

  it('healthy when every live replica is; with no live replica known, the cluster-wide verdict stands', () => {
    const a = ok('r1', '2026-01-01T10:05:00Z');
    const j = judge(
      '2026-01-01T10:05:30Z',
      [
        { instanceId: 'r1', lastRound: a },
        { instanceId: 'r2', lastRound: ok('r2', '2026-01-01T10:05:01Z') },
      ],
      a,
    );
    expect([j.verdict.health, j.worst]).toEqual(['healthy', null]);
    expect(judge('2026-01-01T10:05:30Z', [], a).verdict.health).toBe('healthy');
  });
});
