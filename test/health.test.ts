import { describe, expect, it } from 'vitest';
import { judgeHealth } from '../src/scheduler/health.js';
import type { JobSettings } from '../src/config/job-settings.js';
import type { JobSnapshot, RunRecord } from '../src/coordination/run-records.js';

const T = (iso: string) => new Date(iso);
const minutely: JobSettings = { enabled: true, schedule: { kind: 'every', everyMs: 60_000 }, timeoutMs: 10_000, lockTtlMs: 15_000, jitterMs: 0 };
const daily: JobSettings = { enabled: true, schedule: { kind: 'cron', expr: '0 2 * * *', timezone: 'UTC' }, timeoutMs: 1_800_000, lockTtlMs: 2_000_000, jitterMs: 0 };

function run(p: Partial<RunRecord>): RunRecord {
  return {
    id: 1,
    job_name: 'j',
    slot: T('2026-01-01T00:00:00Z'),
    scope: 'cluster',
    trigger: 'schedule',
    instance_id: 'a',
    fencing_token: 1,
    status: 'ok',
    lock_backend: 'redis',
    started_at: T('2026-01-01T00:00:00Z'),
    deadline_at: null,
    finished_at: null,
    duration_ms: 5,
    items: 1,
    note: null,
    error: null,
    ...p,
  };
}
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
