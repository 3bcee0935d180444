import type { JobSettings } from '../config/job-settings.js';
import type { Db } from '../store/db.js';
import type { Clock } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';

/** `cluster`: once per slot in the whole cluster. `instance`: on every replica. */
export type JobScope = 'cluster' | 'instance';

export interface JobContext {
  job: string;
  slot: Date;
  trigger: 'schedule' | 'manual';
  /** Monotonic per job; writes that must never go backwards carry it (see `cursor`). */
  fencingToken: number;
  instanceId: string;
  /** Fires on timeout, on lease loss and on shutdown; `signal.reason` says which. */
  signal: AbortSignal;
  clock: Clock;
  log: Logger;
  db: Db;
  /** Fenced job state: a write is refused once a newer round of this job has been granted. */
  cursor: {
    read<T = unknown>(key: string): Promise<T | null>;
    write(key: string, value: unknown): Promise<void>;
  };
}

/** What a round did. Zero items is recorded as `no_work`. */
export interface JobResult {
  items: number;
  note?: string;
}

export interface JobDefinition {
  name: string;
  description: string;
  scope: JobScope;
  settings: JobSettings;
  run(ctx: JobContext): Promise<JobResult>;
}

/** Why a round's AbortSignal fired. */
export class RoundAborted extends Error {
  constructor(
    readonly why: 'timeout' | 'lease_lost' | 'shutdown',
    message: string,
  ) {
    super(message);
    this.name = 'RoundAborted';
  }
}
