import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { UserError } from '../config/errors.js';
import type { Db } from '../store/db.js';
import { num, toDate } from '../store/db.js';
import type { Clock } from '../time/clock.js';
import type { LivenessSession } from './liveness.js';
import { instanceAliveSql } from './instance-alive.js';
import type { SkipSummary } from './skip-counter.js';
import { idleRoundRows, type IdleRound } from './idle-rounds.js';
import { BEAT, BEAT_ALIVE } from './beat-sql.js';
import type { ProcessFigures } from '../telemetry/process-sampler.js';
import type { BackendIdentity } from './backend-identity.js';
import type { LoopsReport } from '../workers/loop-book.js';

export interface InstanceInfo {
  instance_id: string;
  env: string;
  mode: string;
  hostname: string;
  pid: number;
  http_port: number | null;
  version: string;
  started_at: Date;
  heartbeat_at: Date;
  stopped_at: Date | null;
  clock_skew_ms: number | null;
  /** Beating within the liveness window (three heartbeats) and, where it published a liveness key, still holding it: a killed replica is not alive at once. */
  alive: boolean;
  /**
   * Alive as every lease judges it (`instanceAliveSql`): still holding its liveness key, or without
   * one beating within the window. A frozen replica (SIGSTOP) keeps its key, so it stays here while
   * it drops out of `alive`: it still holds its leases and its memberships, and per-replica job
   * health keeps naming it (issue 49).
   */
  lease_alive: boolean;
  /** The figures of its newest beat; null unless that beat is fresh (live replica, within the liveness window). */
  process: ProcessFigures | null;
  /** Database time of the beat that carried `process` (kept when stale, so a view can say how old). */
  process_at: Date | null;
  /** The Redis and database it reported through its newest beat (the doctor compares them); null before migration 025's first beat. */
  backends: BackendIdentity | null;
  /** Its loops as its newest beat reported them (migration 038; `workers/loop-book.ts`); null unless alive or lease_alive. */
  loops: LoopsReport | null;
}

// Alive as every lease judges it (instanceAliveSql): a published liveness key decides at once, so a
// SIGKILLed replica's id is free for its restart immediately; without one, a fresh heartbeat.
const lockRowSql = () => `SELECT boot_id, hostname, pid, heartbeat_at, stopped_at, ${instanceAliveSql('instances', '$2')} AS alive
  FROM instances WHERE instance_id = $1 FOR UPDATE`;
const UPSERT = `
INSERT INTO instances (instance_id, boot_id, env, mode, hostname, pid, http_port, version, memberships, backends, started_at, heartbeat_at, stopped_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::text[], $10::jsonb, clock_timestamp(), clock_timestamp(), NULL)
ON CONFLICT (instance_id) DO UPDATE SET boot_id = EXCLUDED.boot_id, env = EXCLUDED.env, mode = EXCLUDED.mode, hostname = EXCLUDED.hostname,
  pid = EXCLUDED.pid, http_port = EXCLUDED.http_port, version = EXCLUDED.version, memberships = EXCLUDED.memberships, started_at = EXCLUDED.started_at,
  heartbeat_at = EXCLUDED.heartbeat_at, stopped_at = NULL, process = NULL, process_at = NULL, backends = EXCLUDED.backends,
  alive_key = NULL`; // the previous life's key is held by nobody now: this process publishes its own with its first beat on its liveness session
// Rounds a previous life of this instance left `running` can never finish now.
const ABANDON_OWN = `UPDATE job_runs SET status = 'failed', finished_at = clock_timestamp(), error = 'abandoned: its instance restarted'
  WHERE instance_id = $1 AND status = 'running'`;
export { instanceAliveSql, holderDeadSql } from './instance-alive.js';

export interface BeatResult {
  /** False when another process has taken over this instance id. */
  mine: boolean;
  /** Its row was gone (pruned by `ops_cleanup` after a week of silence: a replica frozen or cut off that long): registered again by this beat. */
  registeredAgain?: boolean;
  /** This replica's clock minus the database clock, from the beat's own round trip (null when not mine). */
  skewMs: number | null;
  /** Each declared membership's live members (this one counted in where it is a member), sorted; null when not mine. */
  members: Record<string, string[]> | null;
}

/** `memberships`: those this replica's beats read (memberships.ts), every one declared; `joined`: those it is a member of. */
export type RegistryInfo = {
  instanceId: string;
  env: string;
  mode: string;
  httpPort: number | null;
  version: string;
  heartbeatMs: number;
  memberships?: readonly string[];
  joined?: readonly string[];
};

/**
 * Replicas register in `instances` and beat every `cluster.instance_heartbeat`. A live row
 * (beat within three intervals, not stopped) with another boot id means two processes share
 * one instance id: refused at start, and reported loudly if it appears later.
 */
export class InstanceRegistry {
  readonly bootId = randomUUID();
  /** What `register` records, and a beat re-sends when `setBackends` changed it (a Redis restart, a failover). */
  private backends: BackendIdentity | null = null;
  private backendsDirty = false;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly info: RegistryInfo,
  ) {}

  /** `cluster.instance_heartbeat`: how often this replica beats. */
  get heartbeatMs(): number {
    return this.info.heartbeatMs;
  }

  get livenessMs(): number {
    return this.info.heartbeatMs * 3;
  }

  setBackends(b: BackendIdentity): void {
    if (JSON.stringify(b) === JSON.stringify(this.backends)) return;
    this.backends = b;
    this.backendsDirty = true;
  }

  /** `again`: this running process's row was gone; its rounds in flight are its own, not a previous life's to abandon. */
  async register(opts: { again?: boolean } = {}): Promise<void> {
    await this.db.tx(async (q) => {
      const { rows } = await q.query<{ boot_id: string; hostname: string; pid: number; heartbeat_at: unknown; alive: boolean }>(lockRowSql(), [this.info.instanceId, this.livenessMs]);
      const cur = rows[0];
      if (cur?.alive && cur.boot_id !== this.bootId && !deadOnThisHost(cur)) {
        throw new UserError(
          `instance id "${this.info.instanceId}" is already used by a live replica (host ${cur.hostname}, pid ${cur.pid}, last heartbeat ${toDate(cur.heartbeat_at)!.toISOString()}); give every replica its own RELAY_JOBS_INSTANCE_ID`,
        );
      }
      await q.query(UPSERT, [
        this.info.instanceId,
        this.bootId,
        this.info.env,
        this.info.mode,
        hostname(),
        process.pid,
        this.info.httpPort,
        this.info.version,
        [...(this.info.joined ?? [])],
        this.backends ? JSON.stringify(this.backends) : null,
      ]);
      this.backendsDirty = false;
      if (!opts.again) await q.query(ABANDON_OWN, [this.info.instanceId]);
    });
  }

  /**
   * One statement: beats, measures the skew from its own round trip, writes the skip summary,
   * the idle instance rounds' records and the process figures. With a liveness session it is sent on that session and also
   * self-checks the lock there. (Issue 18 measured it: keep it one statement.)
   */
  async beat(
    clockSkewMs: number,
    liveness?: LivenessSession | null,
    skips: SkipSummary[] = [],
    figures: ProcessFigures | null = null,
    idle: IdleRound[] = [],
    loops: LoopsReport | null = null,
  ): Promise<BeatResult> {
    const backends = this.backendsDirty && this.backends ? JSON.stringify(this.backends) : null;
    const idleRows = JSON.stringify(idleRoundRows(idle, this.clock));
    const loopsJson = loops ? JSON.stringify(loops) : null;
    const names = [...(this.info.memberships ?? [])];
    const params = [this.info.instanceId, this.bootId, Math.round(clockSkewMs), JSON.stringify(skips), this.livenessMs, figures ? JSON.stringify(figures) : null, backends, idleRows, loopsJson, names];
    type Row = { held: boolean; db_ms: unknown; members: Record<string, string[]> | null };
    const t0 = this.clock.now();
    let rows = liveness ? await liveness.queryChecked<Row>(BEAT_ALIVE, params, 'held') : null;
    rows ??= (await this.db.query<Row>(BEAT, params)).rows;
    const t1 = this.clock.now();
    const row = rows[0];
    if (!row && !(await this.db.query(`SELECT 1 FROM instances WHERE instance_id = $1`, [this.info.instanceId])).rows.length) {
      await this.register({ again: true });
      return { mine: true, registeredAgain: true, skewMs: null, members: null };
    }
    if (row && backends) this.backendsDirty = false;
    return { mine: rows.length === 1, skewMs: row ? (t0 + t1) / 2 - num(row.db_ms) : null, members: row ? this.withSelf(row.members ?? {}) : null };
  }

  /** The beat's subquery reads the rows as they were before this very beat: this replica counts itself in where it is a member. */
  private withSelf(lists: Record<string, string[]>): Record<string, string[]> {
    const [self, joined] = [this.info.instanceId, this.info.joined ?? []];
    const counted = (name: string, m: string[]) => (joined.includes(name) && !m.includes(self) ? [...m, self].sort() : m);
    return Object.fromEntries((this.info.memberships ?? []).map((name) => [name, counted(name, lists[name] ?? [])]));
  }

  /** At the start of shutdown: this replica leaves every membership, so the others rebalance at their next beat while it drains. */
  async leaveMemberships(): Promise<void> {
    if (this.info.joined?.length) await this.db.query(`UPDATE instances SET memberships = '{}' WHERE instance_id = $1 AND boot_id = $2`, [this.info.instanceId, this.bootId]);
  }

  async markStopped(): Promise<void> {
    await this.db.query('UPDATE instances SET stopped_at = clock_timestamp() WHERE instance_id = $1 AND boot_id = $2', [this.info.instanceId, this.bootId]);
  }

  /**
   * This replica's clock minus the database clock, corrected for half the round trip.
   * The scheduler adds the negation to its own clock so every replica computes the same slots.
   */
  async measureSkew(): Promise<number> {
    const t0 = this.clock.now();
    const { rows } = await this.db.query<{ ms: unknown }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::double precision AS ms');
    const t1 = this.clock.now();
    return (t0 + t1) / 2 - num(rows[0]!.ms);
  }

  /**
   * job_state, job_runs and the slot claims are not per environment, so a replica of another
   * RELAY_JOBS_ENV sharing this database would join the cluster silently (staging running
   * production's slots). Refuses to start, naming the other environment, unless `allowed`.
   */
  /**
   * A replica joining live replicas of another environment (unless allowed), or of its own
   * environment on another Redis key prefix (`keyPrefix`, a replica's own; null for a one-shot
   * command): its quota counters, locks, snapshot and change stream would live in a key space the
   * others never read. Refused, naming both. A prefix is changed with every replica stopped (a
   * rolling change would be refused at its first new replica: the old key space is the live one).
   */
  async refuseMixedEnv(allowed: boolean, log: { warn: (o: object, msg: string) => void }, keyPrefix: string | null = null): Promise<void> {
    const live = (await this.list()).filter((i) => i.alive && i.instance_id !== this.info.instanceId);
    const otherPrefix = live.filter((i) => i.env === this.info.env && keyPrefix !== null && i.backends?.key_prefix != null && i.backends.key_prefix !== keyPrefix);
    if (otherPrefix.length) {
      const theirs = [...new Set(otherPrefix.map((i) => JSON.stringify(i.backends!.key_prefix)))].join(', ');
      throw new UserError(
        `live replicas ${otherPrefix.map((i) => i.instance_id).join(', ')} of this database and environment use redis.key_prefix ${theirs}, and this replica's is ${JSON.stringify(keyPrefix)}: quota counters, locks, the scheduler snapshot and the change stream would split between the two key spaces. Set redis.key_prefix (RELAY_JOBS__REDIS__KEY_PREFIX) as they have it; to move the cluster to another prefix, stop every replica first`,
      );
    }
    const others = live.filter((i) => i.env !== this.info.env);
    if (!others.length) return;
    const envs = [...new Set(others.map((i) => i.env))];
    const msg = `live replicas of environment ${envs.map((e) => JSON.stringify(e)).join(', ')} (${others.map((i) => i.instance_id).join(', ')}) use this database, and this replica's RELAY_JOBS_ENV is ${JSON.stringify(this.info.env)}; jobs and their slots are shared per database, not per environment`;
    if (!allowed) throw new UserError(`${msg}. Give each environment its own database, or set cluster.allow_mixed_env: true to run them as one cluster`);
    log.warn({ other_envs: envs }, `${msg} (cluster.allow_mixed_env is true)`);
  }

  async list(): Promise<InstanceInfo[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(
      // alive: beating within the window AND alive by the one test, so a SIGKILLed replica (its
      // liveness session gone with it) reads not alive at once, not three heartbeats later.
      `SELECT s.*, (s.fresh AND s.lease_alive) AS alive FROM (
         SELECT *, (stopped_at IS NULL AND heartbeat_at > clock_timestamp() - make_interval(secs => $1::double precision / 1000)) AS fresh,
                (stopped_at IS NULL AND process_at > clock_timestamp() - make_interval(secs => $1::double precision / 1000)) AS process_fresh,
                ${instanceAliveSql('instances', '$1')} AS lease_alive
           FROM instances) s ORDER BY s.instance_id`,
      [this.livenessMs],
    );
    return rows.map((r) => ({
      instance_id: String(r.instance_id),
      env: String(r.env),
      mode: String(r.mode),
      hostname: String(r.hostname),
      pid: num(r.pid),
      http_port: r.http_port === null ? null : num(r.http_port),
      version: String(r.version),
      started_at: toDate(r.started_at)!,
      heartbeat_at: toDate(r.heartbeat_at)!,
      stopped_at: toDate(r.stopped_at),
      clock_skew_ms: r.clock_skew_ms === null ? null : num(r.clock_skew_ms),
      alive: r.alive === true,
      lease_alive: r.lease_alive === true,
      process: r.process_fresh === true ? (r.process as ProcessFigures) : null,
      process_at: toDate(r.process_at),
      backends: (r.backends as BackendIdentity | null) ?? null,
      loops: r.alive === true || r.lease_alive === true ? ((r.loops as LoopsReport | null) ?? null) : null,
    }));
  }
}

/**
 * A previous holder of this instance id that ran on this very host under a pid that no longer
 * exists is dead, whatever its last beat says: its restart takes the id at once instead of after
 * the heartbeat window (a crash loop under fixed ids). Another host's process cannot be checked
 * from here, and a pid that exists may be a reused one (or this process, as pid 1 in a restarted
 * container): those wait for the liveness key or the heartbeat window, as before.
 */
function deadOnThisHost(cur: { hostname: string; pid: number }): boolean {
  if (cur.hostname !== hostname() || cur.pid === process.pid) return false;
  try {
    process.kill(cur.pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
