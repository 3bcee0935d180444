import { Cron } from 'croner';
import { cronZone, isKnownTimeZone } from '../time/zones.js';
import { ConfigError } from './errors.js';
import { formatDuration } from './duration.js';
import type { JobSettingsInput } from './schema.js';

/**
 * A slot whose time passed while no replica ran it (downtime, a round that overran, a lease
 * that had to expire): `run_late` runs the latest such slot once, as soon as possible (older
 * ones are never replayed); `skip` lets it go and waits for the next slot. A start within the
 * lateness tolerance (a quarter of the period, at most 5 s, plus jitter) is on time either way.
 */
export type MissedSlotPolicy = 'run_late' | 'skip';

/** `offsetMs`: how far after each aligned (or cron) instant the slot falls; absent = 0. */
export type ScheduleSpec = { kind: 'every'; everyMs: number; offsetMs?: number } | { kind: 'cron'; expr: string; timezone: string; offsetMs?: number };

/** A job's defaults, declared by the job itself. */
export interface JobDefaults {
  enabled: boolean;
  every?: number;
  cron?: string;
  timezone?: string;
  timeout: number;
  lockTtl?: number;
  jitter?: number;
  missed?: MissedSlotPolicy;
}

export interface JobSettings {
  enabled: boolean;
  schedule: ScheduleSpec;
  timeoutMs: number;
  lockTtlMs: number;
  jitterMs: number;
  /** Default `run_late`. */
  missed?: MissedSlotPolicy;
  /** Log level of a `no_work` round's "round finished" line; debug when absent. */
  noWorkLog?: 'debug' | 'info';
}

/** The default lease: longer than the timeout by a fifth of it, at least 2 s, so a round never outlives its lease. */
export function defaultLockTtl(timeoutMs: number): number {
  return timeoutMs + Math.max(2000, Math.ceil(timeoutMs / 5));
}

/** 32-bit FNV-1a: the same number for a name on every replica and every version (the offset must not move with a runtime's hash seed). */
export function stableHash(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/**
 * A job's default offset: `hash(name) mod min(offset_max, period / 4)`, so jobs of one cadence
 * do not all start at :00 (issue 24), every replica computes the same slot, and no job moves by
 * more than a quarter of its period. `offsetMaxMs` 0 puts every job on its aligned instant.
 */
export function defaultOffset(name: string, periodMs: number, offsetMaxMs: number): number {
  const span = Math.min(offsetMaxMs, Math.floor(periodMs / 4));
  return span > 0 ? stableHash(name) % span : 0;
}

/** A cron's period near a fixed reference instant (config is checked without reading the clock). */
function cronPeriod(expr: string, timezone: string): number {
  const c = new Cron(expr, { ...cronZone(timezone), paused: true });
  const a = c.nextRun(new Date(Date.UTC(2026, 0, 5)));
  const b = a && c.nextRun(a);
  return a && b ? b.getTime() - a.getTime() : 0;
}

/**
 * Merges `jobs.<name>` over the job's defaults and checks the rules that span keys.
 * Throws a ConfigError naming every offending key. `offsetMaxMs`: `scheduler.offset_max`
 * (0, the default for direct callers: slots on the aligned instant unless `jobs.<name>.offset` says otherwise).
 */
export function resolveJobSettings(name: string, defaults: JobDefaults, input: JobSettingsInput = {}, offsetMaxMs = 0): JobSettings {
  const key = (k: string) => `jobs.${name}.${k}`;
  const problems: string[] = [];
  if (input.every !== undefined && input.cron !== undefined) problems.push(`${key('every')} and ${key('cron')}: set one schedule, not both`);

  let schedule: ScheduleSpec;
  const useCron = input.cron !== undefined || (input.every === undefined && defaults.cron !== undefined);
  if (useCron) {
    const expr = input.cron ?? defaults.cron!;
    const timezone = input.timezone ?? defaults.timezone ?? 'UTC';
    if (!isKnownTimeZone(timezone)) problems.push(`${key('timezone')}: unknown time zone ${JSON.stringify(timezone)}; expected an IANA name such as UTC or Asia/Shanghai`);
    else {
      try {
        // A valid expression that names no day that exists ("0 0 30 2 *", the 30th of February) would
        // stop the scheduler at its first slot: refused here, with the key.
        if (!new Cron(expr, { ...cronZone(timezone), paused: true }).nextRun())
          problems.push(`${key('cron')}: the cron expression ${JSON.stringify(expr)} never fires (no date matches it); expected one with a next run, such as "0 2 * * *"`);
      } catch (err) {
        problems.push(`${key('cron')}: invalid cron expression ${JSON.stringify(expr)} (${(err as Error).message}); expected 5 or 6 fields such as "0 2 * * *"`);
      }
    }
    schedule = { kind: 'cron', expr, timezone };
  } else {
    if (input.timezone !== undefined) problems.push(`${key('timezone')}: only applies to a cron schedule; ${name} runs on "every"`);
    const everyMs = input.every ?? defaults.every;
    // A job defined with neither (a library's defineJob): said here, with the keys that give it one,
    // not a RangeError from the first job view or an unhandled rejection from the scheduler.
    if (everyMs === undefined) problems.push(`${key('every')}: ${name} has no schedule; set ${key('every')} (a duration such as "5m") or ${key('cron')}, in the config or the job's defaults`);
    schedule = { kind: 'every', everyMs: everyMs ?? 0 };
  }

  const timeoutMs = input.timeout ?? defaults.timeout;
  const lockTtlMs = input.lock_ttl ?? defaults.lockTtl ?? defaultLockTtl(timeoutMs);
  const jitterMs = input.jitter ?? defaults.jitter ?? 0;
  if (lockTtlMs <= timeoutMs) {
    problems.push(
      `${key('lock_ttl')} (${formatDuration(lockTtlMs)}) must be longer than ${key('timeout')} (${formatDuration(timeoutMs)}): a lock that can expire while the job runs lets a second replica start it`,
    );
  }
  if (schedule.kind === 'every' && schedule.everyMs > 0 && jitterMs >= schedule.everyMs) {
    problems.push(`${key('jitter')} (${formatDuration(jitterMs)}) must be shorter than ${key('every')} (${formatDuration(schedule.everyMs)})`);
  }
  let period = 0;
  if (schedule.kind === 'every') period = schedule.everyMs;
  else if (!problems.length) period = cronPeriod(schedule.expr, schedule.timezone);
  if (input.offset !== undefined) {
    if (period > 0 && input.offset >= period) problems.push(`${key('offset')} (${formatDuration(input.offset)}) must be shorter than the job's period (${formatDuration(period)})`);
    schedule.offsetMs = input.offset;
  } else {
    schedule.offsetMs = defaultOffset(name, period, offsetMaxMs);
  }
  if (problems.length) throw new ConfigError(problems);
  return { enabled: input.enabled ?? defaults.enabled, schedule, timeoutMs, lockTtlMs, jitterMs, missed: input.missed ?? defaults.missed ?? 'run_late', noWorkLog: input.no_work_log ?? 'debug' };
}
