// The kernel's configuration sections and the way the whole schema is put together: each area's sections
// are in its own config.ts, and the area list composes them (app/config-schema.ts). Each default is written
// once (a section's own default is `prefault({})`: its keys' defaults). Job keys are not here (each job
// declares its own).
import { z } from 'zod';
import { closest } from './closest.js';
import { positiveDuration, duration } from './duration-schema.js';
import { PLACEHOLDER_MESSAGE, notPlaceholder, port, positiveInt, postgresUrl } from './fields.js';
import { serverUrlProblem } from './server-url.js';
import { parseRedisUrl } from './redis-url.js';

/** `database.embedded_shared_buffers_mb`'s default (store/pglite-db.ts says why it is not PostgreSQL's 128). */
export const EMBEDDED_SHARED_BUFFERS_MB = 32;

/**
 * The configuration file's schema. Every object is strict: an unknown key is an error that
 * names the key, because a typo silently ignored is a job silently misconfigured.
 * Durations become milliseconds here; job defaults live with the jobs (see resolveJob).
 */
export { duration, positiveDuration } from './duration-schema.js';
export { numeric, positiveInt } from './fields.js';

/** The keys every job has under `jobs.<name>`; a job adds its own (see modules/define-job.ts). */
export const jobBase = {
  enabled: z.boolean().optional(),
  every: positiveDuration.optional(),
  cron: z.string().min(1).optional(),
  timezone: z.string().min(1).optional(),
  timeout: positiveDuration.optional(),
  lock_ttl: positiveDuration.optional(),
  jitter: duration.optional(),
  /** Where in its period the job's slots fall (0 = on the aligned instant); default: a stable hash of the name, see scheduler.offset_max. */
  offset: duration.optional(),
  missed: z.enum(['run_late', 'skip']).optional(),
  /** Level of the "round finished" line of a round that found nothing to do (default debug: idle jobs stay quiet). */
  no_work_log: z.enum(['debug', 'info']).optional(),
};

export const jobSettingsSchema = z.object(jobBase).strict();
export type JobSettingsInput = z.infer<typeof jobSettingsSchema>;

/** The kernel's sections, in the order the composed schema (and `config check --print`) has them; the areas' follow. */
export const kernelSections = {
  instance: z
    .object({
      id: z
        .string()
        .regex(/^[A-Za-z0-9._:-]{1,64}$/, 'expected 1-64 characters of letters, digits, . _ : -')
        .optional(),
      env: z
        .string()
        .regex(/^[a-z0-9_-]{1,32}$/, 'expected 1-32 characters of a-z, 0-9, _ or -')
        .optional(),
    })
    .strict()
    .default({}),
  // Slow clients: each limit closes a connection that holds the service without finishing (docs/security.md).
  http: z
    .object({
      host: z.string().default('0.0.0.0'),
      port: port.default(8080),
      admin_token: z.string().min(16, 'expected at least 16 characters').refine(notPlaceholder, PLACEHOLDER_MESSAGE).optional(),
      headers_timeout: positiveDuration.default(10_000),
      request_timeout: positiveDuration.default(30_000),
      keep_alive_timeout: positiveDuration.default(5000),
      socket_timeout: positiveDuration.default(60_000),
      max_connections: positiveInt.default(1000),
    })
    .strict()
    .refine((h) => h.headers_timeout <= h.request_timeout, { message: 'http.headers_timeout must not be longer than http.request_timeout', path: ['headers_timeout'] })
    .prefault({}),
  database: z
    .object({
      url: postgresUrl.optional(),
      direct_url: postgresUrl.optional(),
      data_dir: z.string().min(1).default('./data'),
      pool_size: positiveInt.default(16),
      embedded_shared_buffers_mb: z.coerce.number().int().min(1).max(16_384).default(EMBEDDED_SHARED_BUFFERS_MB),
      connect_timeout: positiveDuration.default(5000),
      // `start` only: how long a PostgreSQL (or PgBouncer) not reachable yet is tried again before exit 2; 0: once (issue 53).
      startup_wait: duration.default(60_000),
      auto_migrate: z.boolean().default(true),
      // Server-side prepared statements: auto = on where the server sees the connection itself (not through PgBouncer or a proxy).
      prepared_statements: z.enum(['auto', 'on', 'off']).default('auto'),
    })
    .strict()
    .prefault({}),
  redis: z
    .object({
      url: z
        .string()
        .superRefine((url, ctx) => {
          try {
            const target = parseRedisUrl(url);
            const problem = target.kind === 'single' ? serverUrlProblem(url, 'redis') : null;
            if (problem) ctx.addIssue({ code: 'custom', message: problem });
          } catch (err) {
            ctx.addIssue({ code: 'custom', message: (err as Error).message });
          }
        })
        .optional(),
      key_prefix: z
        .string()
        .regex(/^[A-Za-z0-9._-]{1,48}$/, 'expected 1-48 characters of letters, digits, . _ -')
        .default('relay-jobs'),
      command_timeout: positiveDuration.default(1000),
      // Connecting at start (and in one-shot commands): each attempt this long, two attempts, then a one-line error.
      connect_timeout: positiveDuration.default(5000),
    })
    .strict()
    .prefault({}),
  cluster: z
    .object({
      expected_replicas: positiveInt.default(3),
      max_clock_skew: positiveDuration.default(2000),
      instance_heartbeat: positiveDuration.default(5000),
      // job_state and job_runs are not per environment: a replica refuses to join live replicas of another RELAY_JOBS_ENV unless this is true.
      allow_mixed_env: z.boolean().default(false),
      // `session`: a dedicated PostgreSQL session per replica holds a liveness lock, so a crashed holder's lease is taken over at once.
      // `lease`: no detector, a crashed holder's lease expires (use behind a transaction pooler; docs/coordination.md).
      crash_detection: z.enum(['session', 'lease']).default('session'),
    })
    .strict()
    .prefault({}),
  // Wake on change (issue 26, docs/coordination.md): writes that create work notify the loop that consumes it.
  // `enabled: false` keeps every loop on its own poll interval; `backstop` is the idle sleep while notifications arrive.
  wakeups: z
    .object({ enabled: z.boolean().default(true), backstop: positiveDuration.default(60_000) })
    .strict()
    .prefault({}),
  shutdown: z
    .object({ grace: positiveDuration.default(20_000) })
    .strict()
    .prefault({}),
  scheduler: z
    .object({ run_retention: positiveDuration.default(7 * 86_400_000), abort_grace: positiveDuration.default(5000), offset_max: duration.default(30_000) })
    .strict()
    .prefault({}),
  // format: json (one object per line, for machines) or pretty (colourised lines for a human at a terminal).
  logging: z
    .object({ level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'), format: z.enum(['json', 'pretty']).default('json') })
    .strict()
    .prefault({}),
  security: z
    .object({
      master_key: z
        .string()
        .refine(notPlaceholder, { message: PLACEHOLDER_MESSAGE, abort: true })
        .refine((k) => Buffer.from(k, 'base64').length === 32 && /^[A-Za-z0-9+/=_-]+$/.test(k), 'expected 32 random bytes in base64 (e.g. `openssl rand -base64 32`)')
        .optional(),
    })
    .strict()
    .default({}),
};

/**
 * `jobs:`, the last section: each job validates its own section (common keys + its options)
 * against its declaration; an unknown job name is reported by the job registry with the known names.
 */
const jobsSection = z.record(z.string(), z.record(z.string(), z.unknown())).default({});

/** An area's config sections: the top-level key of each, and its schema (an area's `config.ts`). */
export type ConfigSectionSchemas = Record<string, z.ZodType>;

/** The parsed form of a set of sections: what `Config` has under each of their keys. */
export type ConfigSectionsOf<T extends ConfigSectionSchemas> = { [K in keyof T]: z.output<T[K]> };

/**
 * The areas' sections as `Config` types them. Empty here (the kernel knows no area): each area's
 * config.ts adds its own sections by declaration merging, from the schema it declares,
 *   declare module '../../config/schema.js' { interface AreaConfigSections extends ConfigSectionsOf<typeof backupConfig> {} }
 * and app/config-schema.ts checks at compile time that these are exactly the area list's sections.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled by the areas' declaration merging
export interface AreaConfigSections {}

/** The configuration file as parsed: the kernel's sections, the areas', and `jobs`. */
export type ConfigFile = ConfigSectionsOf<typeof kernelSections> & AreaConfigSections & { jobs: z.output<typeof jobsSection> };

/** The whole schema: what `loadConfig` parses a configuration with (app/config-schema.ts builds the one from the area list). */
export type ConfigSchema = z.ZodType<ConfigFile, unknown>;

/**
 * The whole schema from the kernel's sections and each area's, in area-list order, then `jobs`.
 * Every object is strict, the whole included. A section name taken twice is a programming error.
 */
export function composeConfigSchema(areas: ReadonlyArray<{ name: string; sections: ConfigSectionSchemas }>): ConfigSchema {
  const shape: Record<string, z.ZodType> = { ...kernelSections };
  for (const { name, sections } of areas) {
    for (const [key, schema] of Object.entries(sections)) {
      if (key in shape || key === 'jobs') throw new Error(`config section ${key} of area ${name} is already taken (kernel or an earlier area)`);
      shape[key] = schema;
    }
  }
  return z.object({ ...shape, jobs: jobsSection }).strict() as unknown as ConfigSchema;
}

/**
 * zod issues as config problems: `key (source): message`, the key a dotted path under `prefix`.
 * `from` names where a key's value came from (file, variable); unknown keys say so plainly, with
 * the nearest known key of `schema` (the schema the issues came from) at that place, if one is close.
 */
export function formatIssues(issues: z.core.$ZodIssue[], prefix: Array<string | number> = [], from: (key: string) => string | undefined = () => undefined, schema?: z.ZodType): string[] {
  return issues.map((issue) => {
    const path = [...prefix, ...issue.path].map(String);
    const keys = issue.code === 'unrecognized_keys' ? issue.keys.map((k) => [...path, k].join('.')) : [path.join('.')];
    const key = keys.join(', ') || '(top level)';
    const source = from(keys[0]!);
    let message = issue.code === 'unrecognized_keys' ? 'unknown key' : issue.message;
    if (issue.code === 'unrecognized_keys' && schema) {
      const near = closest(issue.keys[0]!, knownKeysAt(schema, issue.path.map(String)));
      if (near) message += `; did you mean ${[...path, near].join('.')}?`;
    }
    return source ? `${key} (${source}): ${message}` : `${key}: ${message}`;
  });
}

/** The keys of the object `schema` holds at `path` (through defaults, optionals, pipes and records); none when it is not an object. */
function knownKeysAt(schema: z.ZodType, path: readonly string[]): string[] {
  const unwrap = (s: unknown): unknown => {
    for (let i = 0; i < 8 && s && !(s instanceof z.ZodObject); i++) {
      const def = (s as { def?: { innerType?: unknown; in?: unknown } }).def;
      s = def?.innerType ?? def?.in;
    }
    return s;
  };
  let s = unwrap(schema);
  for (const p of path) {
    if (s instanceof z.ZodObject) s = unwrap((s.shape as Record<string, unknown>)[p]);
    else if (s instanceof z.ZodRecord) s = unwrap(s.valueType);
    else return [];
  }
  return s instanceof z.ZodObject ? Object.keys(s.shape) : [];
}
