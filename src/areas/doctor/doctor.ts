import type { RedisClient } from '../../coordination/redis-client.js';
import type { Config } from '../../config/load.js';
import type { Db } from '../../store/db.js';
import { DoctorFacts } from './store/doctor-facts.js';
import type { JobDefinition } from '../../scheduler/job.js';
import type { InstanceInfo } from '../../coordination/instance-registry.js';
import { readBackendIdentity } from '../../coordination/backend-identity.js';
import type { Clock } from '../../time/clock.js';
import type { DoctorCheck } from './check.js';
import { CHECKS } from './catalogue.js';
import { doctorOptions } from './options.js';
import { runDoctor, type DoctorReport } from './runner.js';

export interface DoctorDeps {
  config: Config;
  db: Db;
  redis: RedisClient | null;
  clock: Clock;
  jobs: () => readonly Pick<JobDefinition, 'name' | 'scope' | 'settings'>[];
  instances: () => Promise<InstanceInfo[]>;
  /** Whether this process is one of the replicas (false: a one-shot CLI command, not counted as one). */
  replica: () => boolean;
  breakers: () => Array<{ platform: string; ms: number; reason: string }>;
  backupDir: string | null;
}

/** Runs every check against the live deployment, as this replica sees it (CLI, API, console and the `doctor` job share it). */
export class Doctor {
  readonly facts: DoctorFacts;

  constructor(
    private readonly deps: DoctorDeps,
    private readonly checks: readonly DoctorCheck[] = CHECKS,
  ) {
    this.facts = new DoctorFacts(deps.db);
  }

  async run(): Promise<DoctorReport> {
    const { config, db, redis } = this.deps;
    const self = await readBackendIdentity(db, redis, { poolSize: config.mode === 'cluster' ? config.database.pool_size : null, keyPrefix: redis ? config.redis.key_prefix : null });
    return runDoctor(
      {
        config,
        db,
        redis,
        facts: this.facts,
        jobs: this.deps.jobs(),
        instances: await this.deps.instances(),
        replica: this.deps.replica(),
        self,
        options: doctorOptions(config),
        nowMs: this.deps.clock.now(),
        breakers: this.deps.breakers,
        backupDir: this.deps.backupDir,
      },
      this.checks,
    );
  }
}
