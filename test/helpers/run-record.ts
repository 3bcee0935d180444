import type { RunRecord } from '../../src/coordination/run-records.js';

/** A `job_runs` row for health tests: a finished-ok scheduled cluster round of job `j`, slotted and started at `at`. */
export function runRecord(at: Date, p: Partial<RunRecord> = {}): RunRecord {
  return {
    id: 1,
    job_name: 'j',
    slot: at,
    scope: 'cluster',
    trigger: 'schedule',
    instance_id: 'a',
    fencing_token: 1,
    status: 'ok',
    lock_backend: 'redis',
    started_at: at,
    deadline_at: null,
    finished_at: null,
    duration_ms: 5,
    items: 1,
    note: null,
    error: null,
    ...p,
  };
}
