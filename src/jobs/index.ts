import { ConfigError } from '../config/errors.js';
import type { Config } from '../config/load.js';
import type { JobDefinition } from '../scheduler/job.js';
import { sessionCleanupJob } from './admin/session-cleanup.js';
import { canaryJob } from './canary/canary.js';

const FACTORIES: Array<(config: Config) => JobDefinition> = [sessionCleanupJob, canaryJob];

/** Every job this build knows, enabled or not, in the order `relay-jobs jobs` lists them. Reports every job's config errors at once. */
export function buildJobs(config: Config): JobDefinition[] {
  const jobs: JobDefinition[] = [];
  const problems: string[] = [];
  for (const factory of FACTORIES) {
    try {
      jobs.push(factory(config));
    } catch (err) {
      if (err instanceof ConfigError) problems.push(...err.problems);
      else throw err;
    }
  }
  if (problems.length) throw new ConfigError(problems);
  return jobs;
}
