import { describe, expect, it } from 'vitest';
import { pickPrunable } from '../src/areas/backup/retention.js';
import type { BackupRecord, BackupState } from '../src/areas/backup/store/backups.js';

const DAY = 86_400_000;
const NOW = Date.parse('2026-11-30T03:00:00Z');

/** Records newest first, one a day. */
function records(states: BackupState[]): BackupRecord[] {
  return states.map((state, i) => ({ id: `b${i}`, state, started_at: new Date(NOW - i * DAY).toISOString() }) as BackupRecord);
}

describe('backup retention', () => {
  it('keeps the newest keep_last and deletes the rest', () => {
    const r = records(['verified', 'verified', 'verified', 'verified', 'verified']);
    expect(pickPrunable(r, { keepLast: 3, now: NOW }).map((b) => b.id)).toEqual(['b3', 'b4']);
  });

  it('keep_days keeps younger backups beyond keep_last', () => {
    const r = records(['verified', 'verified', 'verified', 'verified', 'verified']);
    expect(pickPrunable(r, { keepLast: 1, keepDays: 3, now: NOW }).map((b) => b.id)).toEqual(['b3', 'b4']);
  });

  it('never deletes the only verified backup, however many failures came after it', () => {
    const r = records(['failed', 'verify_failed', 'failed', 'verified', 'failed', 'verified']);
    const pruned = pickPrunable(r, { keepLast: 2, keepDays: 1, now: NOW }).map((b) => b.id);
    expect(pruned).not.toContain('b3');
    expect(pruned).toEqual(['b2', 'b4', 'b5']);
  });

  it('with verification off, the newest completed backup is the one kept', () => {
    const r = records(['failed', 'failed', 'completed', 'completed']);
    expect(pickPrunable(r, { keepLast: 1, now: NOW }).map((b) => b.id)).toEqual(['b1', 'b3']);
  });

  it('never touches a running backup (and keeps the newest verified one after it)', () => {
    const r = records(['running', 'verified', 'verified']);
    expect(pickPrunable(r, { keepLast: 1, now: NOW }).map((b) => b.id)).toEqual(['b2']);
  });
});
