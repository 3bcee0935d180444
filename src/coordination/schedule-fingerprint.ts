import { createHash } from 'node:crypto';
import type { JobSettings } from '../config/job-settings.js';
import { formatDuration } from '../config/duration.js';

/**
 * What a replica publishes of one job's settings (issue 49): the keys that decide which slots the
 * job has and how a round of it is held: cadence or cron, time zone, offset, enabled, timeout and
 * lock TTL. Jitter and `missed` are left out on purpose: jitter delays a start within its slot (the
 * slot keeps its identity, docs/coordination.md "Slots and clocks"), and `missed` chooses which of
 * the schedule's own slots runs after a gap; neither adds a slot.
 */
export interface ScheduleSpecRecord {
  every_ms: number | null;
  cron: string | null;
  timezone: string | null;
  offset_ms: number;
  enabled: boolean;
  timeout_ms: number;
  lock_ttl_ms: number;
}

/** The config key (`jobs.<name>.<key>`) of each published field, in the order they are named. */
const KEYS: ReadonlyArray<[keyof ScheduleSpecRecord, string]> = [
  ['every_ms', 'every'],
  ['cron', 'cron'],
  ['timezone', 'timezone'],
  ['offset_ms', 'offset'],
  ['enabled', 'enabled'],
  ['timeout_ms', 'timeout'],
  ['lock_ttl_ms', 'lock_ttl'],
];

export function scheduleSpecOf(s: JobSettings): ScheduleSpecRecord {
  const sch = s.schedule;
  return {
    every_ms: sch.kind === 'every' ? sch.everyMs : null,
    cron: sch.kind === 'cron' ? sch.expr : null,
    timezone: sch.kind === 'cron' ? sch.timezone : null,
    offset_ms: sch.offsetMs ?? 0,
    enabled: s.enabled,
    timeout_ms: s.timeoutMs,
    lock_ttl_ms: s.lockTtlMs,
  };
}

/** 16 hex of the SHA-256 of the fields in a fixed order: equal specs give equal prints on every replica and version. */
export function fingerprintOf(spec: ScheduleSpecRecord): string {
  const canonical = JSON.stringify(KEYS.map(([field]) => spec[field] ?? null));
  return createHash('sha256').update(canonical).digest('hex').slice(0, 16);
}

export interface KeyDifference {
  /** The config key, e.g. `every`, `timezone`, `lock_ttl`. */
  key: string;
  here: string;
  cluster: string;
}

function show(field: keyof ScheduleSpecRecord, v: unknown): string {
  if (v === null || v === undefined) return 'unset';
  if (field.endsWith('_ms')) return formatDuration(Number(v));
  return typeof v === 'string' ? JSON.stringify(v) : String(v);
}

/** The keys in which `here` differs from the cluster's schedule, each with both values as config would write them. */
export function differingKeys(here: ScheduleSpecRecord, cluster: ScheduleSpecRecord): KeyDifference[] {
  const out: KeyDifference[] = [];
  for (const [field, key] of KEYS) {
    const a = here[field] ?? null;
    const b = cluster[field] ?? null;
    if (a !== b) out.push({ key, here: show(field, a), cluster: show(field, b) });
  }
  return out;
}

/** `every 3s here, 2s in the cluster; offset 750ms here, 500ms in the cluster` (`where` names the other side, e.g. "on r1"). */
export function describeDifferences(diffs: readonly KeyDifference[], where = 'here'): string {
  return diffs.map((d) => `${d.key} ${d.here} ${where}, ${d.cluster} in the cluster`).join('; ');
}
