import { z } from 'zod';
import { HEALTH_STATES } from '../modules/job-views.js';

/**
 * The wire shapes of the kernel's answers (jobs, rounds, replicas, the timeline), for the route
 * contracts (contract.ts) and through them the OpenAPI document. They describe the JSON as sent: a
 * `Date` is an ISO string. Parts owned by other modules whose fields grow (a replica's process
 * figures, backends and loops) are open objects with their stable fields named.
 */
const time = z.iso.datetime({ offset: true });

export const RunRecord = z
  .object({
    id: z.number().int(),
    job_name: z.string(),
    slot: time,
    scope: z.string(),
    trigger: z.string().meta({ description: '`schedule`, `manual`, ...' }),
    instance_id: z.string(),
    fencing_token: z.number().int().nullable(),
    status: z.enum(['running', 'ok', 'no_work', 'skipped_not_leader', 'failed', 'timed_out']),
    lock_backend: z.enum(['redis', 'postgres', 'memory']).nullable(),
    started_at: time,
    deadline_at: time.nullable(),
    finished_at: time.nullable(),
    duration_ms: z.number().nullable(),
    items: z.number().int().nullable(),
    note: z.string().nullable(),
    error: z.string().nullable(),
  })
  .meta({ id: 'RunRecord', description: 'One round of a job (a `job_runs` row)' });

export const PauseView = z.object({ at: time, by: z.string(), reason: z.string() }).meta({ id: 'JobPause', description: 'A standing pause: when, by whom, why' });

const health = z.enum(HEALTH_STATES);

export const JobView = z
  .object({
    name: z.string(),
    description: z.string(),
    scope: z.enum(['cluster', 'instance']),
    enabled: z.boolean(),
    disabled_reason: z.string().nullable(),
    schedule: z.object({ every: z.string().optional(), cron: z.string().optional(), timezone: z.string().optional() }),
    timeout: z.string(),
    lock_ttl: z.string(),
    jitter: z.string(),
    health,
    health_reason: z.string(),
    expected_by: time.nullable(),
    next_attempt: time.nullable(),
    last_slot: time.nullable(),
    lease_holder: z.string().nullable(),
    last_run: RunRecord.nullable(),
    last_success_at: time.nullable(),
    instances: z.array(z.object({ instance_id: z.string(), health, health_reason: z.string(), last_round: RunRecord.nullable() })).nullable(),
    worst_instance: z.string().nullable(),
    paused: PauseView.nullable(),
    config_drift: z.object({ keys: z.array(z.object({ key: z.string(), here: z.string(), cluster: z.string() })), adopted_at: time }).nullable(),
  })
  .meta({ id: 'Job', description: 'A job: its settings, cluster-wide health and last round' });

export const SkipCount = z.object({ instance_id: z.string(), skipped: z.number().int(), last_skip_at: time.nullable(), last_reason: z.string().nullable() });

export const PauseAudit = z.object({ action: z.enum(['pause', 'resume']), actor: z.string(), reason: z.string().nullable(), at: time });

const open = (description: string) => z.looseObject({}).meta({ description });

export const Instance = z
  .object({
    instance_id: z.string(),
    env: z.string(),
    mode: z.string(),
    hostname: z.string(),
    pid: z.number().int(),
    http_port: z.number().int().nullable(),
    version: z.string(),
    started_at: time,
    heartbeat_at: time,
    stopped_at: time.nullable(),
    clock_skew_ms: z.number().nullable(),
    alive: z.boolean().meta({ description: 'beating within three heartbeats and, where it published one, still holding its liveness session: a killed replica reads false at once' }),
    lease_alive: z.boolean().meta({ description: 'still holding its leases (a frozen replica is not alive but still lease-alive)' }),
    process: open('rss_bytes, heap_used_bytes, event_loop_lag_p99_ms, cpu_percent of its newest fresh beat').nullable(),
    process_at: time.nullable(),
    backends: open('the Redis and database it reported (the doctor compares them)').nullable(),
    loops: open('its loops as its newest beat reported them').nullable(),
  })
  .meta({ id: 'Instance', description: 'A replica, as its heartbeats describe it' });
