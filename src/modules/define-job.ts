import { z } from 'zod';
import { ConfigError } from '../config/errors.js';
import { parseDuration } from '../config/duration.js';
import { resolveJobSettings, type JobDefaults, type JobSettings } from '../config/job-settings.js';
import { jobBase, formatIssues } from '../config/schema.js';
import { configErrorMap } from '../config/error-map.js';
import { keySource, type Config } from '../config/load.js';
import type { JobContext, JobDefinition, JobResult, JobScope } from '../scheduler/job.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Deadline } from '../time/deadline.js';

/** A job's default schedule and limits, durations written as in the config (`30s`, `5m`). */
export interface JobDefaultsSpec {
  enabled: boolean;
  every?: string;
  cron?: string;
  timezone?: string;
  timeout: string;
  lockTtl?: string;
  jitter?: string;
  /** What a slot missed while no replica could run it becomes: see `MissedSlotPolicy`. */
  missed?: MissedSlotPolicy;
}

import type { MissedSlotPolicy } from '../config/job-settings.js';

/** What every job may use beside its area's services: `metrics` (kernel). */
export interface KernelServices {
  metrics: Metrics;
}

/**
 * One declaration per job. `needs` names the services the job uses (typed: `deps` holds those
 * and nothing else); `options` is the zod shape of the job's own keys under `jobs.<name>`, next
 * to the common ones (`enabled`, `every`, `cron`, `timezone`, `timeout`, `lock_ttl`, `jitter`).
 * A job that owns a long-lived service starts and stops it with `onStart`/`onStop`; the runtime
 * calls them once per process, in registry order (stop in reverse).
 */
export interface JobModule<S extends object = KernelServices, K extends keyof S = keyof S, O extends z.ZodRawShape = z.ZodRawShape> {
  name: string;
  description: string;
  scope: JobScope;
  defaults: JobDefaultsSpec | ((config: Config, options: z.infer<z.ZodObject<O>>) => JobDefaultsSpec);
  options?: O;
  needs: readonly K[];
  /**
   * The long-running loops (`ServiceLoop` names) this job starts in `onStart` and whose work its
   * rounds stand for: an instance-scoped job's per-replica health reads a loop whose ticks keep
   * failing as `failing`, one that has not finished a tick within its stall bound as `late`
   * (scheduler/loop-health.ts), from the loop report each replica's heartbeat publishes.
   */
  loops?: readonly string[];
  /** Why the job is off by default under this config, when that is not the user's choice (batch_image_worker: no image provider). */
  offReason?(config: Config): string | null;
  /** Cross-key config rules of this job; each problem names its key. */
  check?(config: Config): string[];
  onStart?(deps: Pick<S, K>, log: Logger): void | Promise<void>;
  /** Stops by `by` (the shutdown's one deadline, passed down unchanged); returns how many pieces of work were still running then (0 when drained). */
  onStop?(deps: Pick<S, K>, by: Deadline): Promise<number | void>;
  /**
   * A job's own health rule, judged after the cluster-wide one when that says healthy or idle
   * (e.g. backup: late when no verified backup is younger than 1.5× its cadence).
   */
  health?(deps: Pick<S, K>, h: JobHealthInput): Promise<JobHealthOverride | null>;
  run(ctx: JobContext, deps: Pick<S, K>, options: z.infer<z.ZodObject<O>>, config: Config): Promise<JobResult>;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a list of jobs with different services, needs and options
export type AnyJobModule = JobModule<any, any, any>;

/**
 * `defineJob` for jobs that use the services `S`: their area's own (its `wire` result), the faces
 * of other areas it uses (their index.ts), and `metrics`. A job depends on what it names, never on
 * every area: `const defineJob = jobsFor<UsageServices>()`.
 */
export function jobsFor<S extends object>() {
  return <K extends keyof (S & KernelServices), O extends z.ZodRawShape = Record<never, never>>(module: JobModule<S & KernelServices, K, O>): JobModule<S & KernelServices, K, O> => module;
}

/** `defineJob` over the kernel's services alone (`metrics`); src/index.ts exports one over every area's services. */
export const defineJob = jobsFor<object>();

export interface JobHealthInput {
  settings: JobSettings;
  /** When the job's state row was created: its age when it never succeeded. */
  createdAt: Date | null;
  nowMs: number;
}

export interface JobHealthOverride {
  health: 'late' | 'failing';
  reason: string;
}

/** Resolves the late-bound services of a job (jobs are built before any connection exists). */
export type ServicesRef = () => object;

/** A built job: the scheduler's definition plus its lifecycle hooks, bound to the runtime's services. */
export interface BuiltJob extends JobDefinition {
  /** Null when enabled; otherwise why it is off, in words naming the key that turns it on. */
  disabledReason?: string | null;
  /** The module's `loops`: judged in the job's per-replica health. */
  loops?: readonly string[];
  start?(log: Logger): void | Promise<void>;
  stop?(by: Deadline): Promise<number | void>;
  health?(h: JobHealthInput): Promise<JobHealthOverride | null>;
}

function ms(key: string, value: string | undefined, problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  const parsed = parseDuration(value);
  if (parsed === null) problems.push(`${key}: the job's own default ${JSON.stringify(value)} is not a duration`);
  return parsed ?? undefined;
}

/** `jobs.<name>` checked against the common keys and the job's own options; problems name `jobs.<name>.<key>`. */
export function parseJobSection(
  module: Pick<JobModule, 'name' | 'options'>,
  raw: unknown,
  from: (key: string) => string | undefined,
): { ok: true; data: Record<string, unknown> } | { ok: false; problems: string[] } {
  const schema = z.object({ ...jobBase, ...(module.options ?? {}) }).strict();
  const parsed = schema.safeParse(raw ?? {}, { error: configErrorMap });
  return parsed.success ? { ok: true, data: parsed.data as Record<string, unknown> } : { ok: false, problems: formatIssues(parsed.error.issues, ['jobs', module.name], from, schema) };
}

/**
 * Validates `jobs.<name>` against the job's schema and resolves its settings. Throws a
 * ConfigError naming every offending key (`jobs.<name>.<key>`).
 */
export function buildJob<S extends object, K extends keyof S, O extends z.ZodRawShape>(module: JobModule<S, K, O>, config: Config, services: ServicesRef): BuiltJob {
  const parsed = parseJobSection(module, config.jobs[module.name], (k) => keySource(config.source.keys, config.source.file, k));
  if (!parsed.ok) throw new ConfigError(parsed.problems);
  const { enabled, every, cron, timezone, timeout, lock_ttl, jitter, offset, missed, no_work_log, ...rest } = parsed.data;
  const options = rest as z.infer<z.ZodObject<O>>;
  const spec = typeof module.defaults === 'function' ? module.defaults(config, options) : module.defaults;
  const problems: string[] = [];
  const key = `jobs.${module.name}`;
  const defaults: JobDefaults = {
    enabled: spec.enabled,
    every: ms(key, spec.every, problems),
    cron: spec.cron,
    timezone: spec.timezone,
    timeout: ms(key, spec.timeout, problems)!,
    lockTtl: ms(key, spec.lockTtl, problems),
    jitter: ms(key, spec.jitter, problems),
    missed: spec.missed,
  };
  problems.push(...(module.check?.(config) ?? []));
  if (problems.length) throw new ConfigError(problems);
  const settings = resolveJobSettings(
    module.name,
    defaults,
    { enabled, every, cron, timezone, timeout, lock_ttl, jitter, offset, missed, no_work_log } as Parameters<typeof resolveJobSettings>[2],
    config.scheduler.offset_max,
  );
  const deps = () => services() as Pick<S, K>;
  return {
    name: module.name,
    description: module.description,
    scope: module.scope,
    settings,
    disabledReason: settings.enabled ? null : enabled === false ? `disabled in config (${key}.enabled: false)` : (module.offReason?.(config) ?? `off by default (${key}.enabled: true turns it on)`),
    loops: module.loops,
    run: (ctx) => module.run(ctx, deps(), options, config),
    start: module.onStart && ((log) => module.onStart!(deps(), log)),
    stop: module.onStop && ((by) => module.onStop!(deps(), by)),
    health: module.health && ((h) => module.health!(deps(), h)),
  };
}
