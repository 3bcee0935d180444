import { closest } from '../config/closest.js';
import { ConfigError } from '../config/errors.js';
import { keySource, type Config } from '../config/load.js';
import { buildJob, parseJobSection, type AnyJobModule, type BuiltJob, type ServicesRef } from '../modules/define-job.js';
import type { AnyArea, ServicesOfAreas } from '../modules/area.js';
import { jobsFor } from '../modules/define-job.js';
import { Memberships, type MembershipSpec } from '../coordination/memberships.js';
import { accountsArea } from '../areas/accounts/area.js';
import { billingArea } from '../areas/billing/area.js';
import { usageArea } from '../areas/usage/area.js';
import { adminArea } from '../areas/admin/area.js';
import { opsArea } from '../areas/ops/area.js';
import { schedulerSnapshotArea } from '../areas/scheduler-snapshot/area.js';
import { changeStreamArea } from '../areas/change-stream/area.js';
import { imagesArea } from '../areas/images/area.js';
import { probesArea } from '../areas/probes/area.js';
import { backupArea } from '../areas/backup/area.js';
import { doctorArea } from '../areas/doctor/area.js';
import { canaryArea } from '../areas/canary/area.js';
import { notificationsArea } from '../areas/notifications/area.js';

export type { AnyJobModule } from '../modules/define-job.js';

/**
 * The one list of areas this build has, in the order `relay-jobs jobs` lists their jobs, the API
 * registers their routes, the CLI lists their commands and the runtime wires their services (an
 * area's `wire` may use what the areas before it returned; their stop rungs run in this order
 * within their phase). Adding an area is one line here (docs/architecture.md, "Adding an area").
 */
export const AREAS = [
  accountsArea,
  billingArea,
  usageArea,
  // Wired right after usage: the notifier stops after the usage flush and before the probe client (no jobs or routes).
  notificationsArea,
  adminArea,
  opsArea,
  schedulerSnapshotArea,
  changeStreamArea,
  imagesArea,
  probesArea,
  backupArea,
  doctorArea,
  canaryArea,
] as const satisfies readonly AnyArea[];

/**
 * The runtime's services: the kernel's (`metrics`) and every area's `wire` result, derived from the
 * list (`Runtime.services`, typed; a library user's `rt.services.tokens`).
 */
export type Services = ServicesOfAreas<typeof AREAS>;

/** `defineJob` for a library user's own jobs: `needs` may name any service of the runtime. */
export const defineJob = jobsFor<Services>();

/** Every built-in job: the areas' jobs, in area order. */
export const JOBS: readonly AnyJobModule[] = AREAS.flatMap((a): readonly AnyJobModule[] => a.jobs);

/** The memberships the areas declare (coordination/memberships.ts), in area order. */
export const MEMBERSHIPS: readonly MembershipSpec[] = (AREAS as readonly AnyArea[]).flatMap((a) => a.memberships ?? []);

/** This replica's memberships: every declared one, joined while the job it names is enabled here. */
export function memberships(instanceId: string, jobs: readonly BuiltJob[]): Memberships {
  const joined = MEMBERSHIPS.filter((m) => jobs.some((j) => j.name === m.job && j.settings.enabled)).map((m) => m.name);
  return new Memberships(instanceId, [...new Set(MEMBERSHIPS.map((m) => m.name))], joined);
}

const unbound: ServicesRef = () => {
  throw new Error('job services used before the runtime bound them');
};

/**
 * Every job, enabled or not: the registry's plus a library user's `extra` jobs. Reports every
 * job's config problems at once, and any `jobs.<name>` that names no job (with a suggestion).
 */
export function buildJobs(config: Config, services: ServicesRef = unbound, extra: readonly AnyJobModule[] = []): BuiltJob[] {
  const modules = [...JOBS, ...extra];
  const problems: string[] = [];
  const names = new Set<string>();
  for (const m of modules) {
    if (names.has(m.name)) problems.push(`job ${JSON.stringify(m.name)} is defined twice`);
    names.add(m.name);
  }
  const malformed = modules.map(moduleProblem);
  problems.push(...malformed.filter((p): p is string => p !== null));
  problems.push(...unknownJobs(config.jobs, [...names], (k) => keySource(config.source.keys, config.source.file, k)));
  const jobs: BuiltJob[] = [];
  for (const [i, m] of modules.entries()) {
    if (malformed[i]) continue;
    try {
      jobs.push(buildJob(m, config, services));
    } catch (err) {
      if (err instanceof ConfigError) problems.push(...err.problems);
      else throw err;
    }
  }
  for (const area of AREAS as readonly AnyArea[]) problems.push(...(area.checkConfig?.(config) ?? []));
  if (problems.length) throw new ConfigError(problems);
  return jobs;
}

/**
 * What a `defineJob` can get wrong that only shows later. The name is the `jobs.<name>` section, its
 * lock key (`:` separates a Redis key's parts), its metrics' `job` label and a URL path segment, so
 * it is 1-128 letters, digits, `_` and `-`, starting with a letter (lower-case snake_case, as the
 * built-in jobs, is the only form its `RELAY_JOBS__JOBS__<NAME>__*` variables can reach).
 */
function moduleProblem(m: AnyJobModule): string | null {
  const name = typeof m.name === 'string' ? m.name : '';
  if (!/^[A-Za-z][A-Za-z0-9_-]{0,127}$/.test(name))
    return `job ${JSON.stringify(typeof m.name === 'string' ? m.name.slice(0, 64) : typeof m.name)}: a job's name is 1-128 letters, digits, _ and -, starting with a letter (it names its jobs.<name> config section and its lock)`;
  if (m.scope !== 'cluster' && m.scope !== 'instance') return `job ${name}: scope is "cluster" (one replica runs each slot) or "instance" (every replica runs it), not ${JSON.stringify(m.scope)}`;
  if (typeof m.run !== 'function') return `job ${name}: run must be a function (the round's work)`;
  return null;
}

function unknownJobs(section: Record<string, unknown>, known: string[], from: (key: string) => string | undefined): string[] {
  return Object.keys(section)
    .filter((name) => !known.includes(name))
    .map((name) => {
      const near = closest(name, known);
      const source = from(`jobs.${name}`);
      return `jobs.${name}${source ? ` (${source})` : ''}: unknown job${near ? `; did you mean ${near}?` : ''} (known: ${known.join(', ')})`;
    });
}

/**
 * `loadConfig`'s `checkJobs`: the shape of every `jobs.<name>` section (known name, known keys,
 * valid values), so job problems are reported with every other config problem.
 */
export function checkJobSections(extra: readonly AnyJobModule[] = []): (section: Record<string, unknown>, from: (key: string) => string) => string[] {
  return (section, from) => {
    const modules = [...JOBS, ...extra];
    const problems = unknownJobs(
      section,
      modules.map((m) => m.name),
      from,
    );
    for (const m of modules) {
      const r = parseJobSection(m, section[m.name], from);
      if (!r.ok) problems.push(...r.problems);
    }
    return problems;
  };
}
