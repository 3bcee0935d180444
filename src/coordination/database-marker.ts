import { UserError } from '../config/errors.js';
import { readDbIdentity, type BackendIdentity } from './backend-identity.js';
import { databaseMarkerKey, type KeySpace } from './keys.js';
import type { RedisClient } from './redis-client.js';
import type { Db } from '../store/db.js';
import type { Logger } from '../telemetry/logger.js';

/**
 * The database marker (issue 49): which database a Redis key space (`<redis.key_prefix>:<env>:`)
 * belongs to. Leader locks, quota counters, the scheduler snapshot and the change stream live in
 * that key space, and slot claims, usage and the snapshot's truth in the database; a replica on
 * another database behind the same Redis, prefix and environment would share the former and not
 * the latter, unseen (one cluster's leader lock skips the other's rounds, quota counters are
 * flushed into whichever database flushes first).
 *
 * State machine, one string key:
 * - absent → the first replica to start (`claim`, `SET NX`) writes its database's identity;
 * - present, same database → nothing to do; present, another database → `start` is refused
 *   naming both, and the doctor's `same_backends` fails naming both;
 * - lost (Redis restarted without persistence, FLUSHALL) → every live replica writes it again
 *   within a minute (`keep`, beside its identity read), with `SET NX`: a replica never overwrites
 *   a marker that names another database.
 * The database really moved (dump and restore into a new server: a new `system_identifier`):
 * stop every replica, `DEL` the key (named in the refusal), start them on the new database.
 *
 * Embedded mode has no Redis and so no marker. PGlite has no system identifier; neither has a
 * server whose `pg_control_system()` this role may not call: there the identity is the database
 * name alone, compared as such (`sameDatabase`).
 */
export type DatabaseIdentity = NonNullable<BackendIdentity['database']>;

export interface DatabaseMarkerValue extends DatabaseIdentity {
  /** The replica that wrote it, and when (its clock): for the operator reading the refusal. */
  set_by: string;
  set_at: string;
}

/** The same database: the same name and, where both sides could read one, the same system identifier. */
export function sameDatabase(a: DatabaseIdentity, b: DatabaseIdentity): boolean {
  if (a.name !== b.name) return false;
  return a.system_identifier === null || b.system_identifier === null || a.system_identifier === b.system_identifier;
}

export function describeDatabase(d: DatabaseIdentity): string {
  return `database ${d.name} (system ${d.system_identifier ?? 'unknown'})`;
}

function parse(raw: string | null): DatabaseMarkerValue | null {
  if (raw === null) return null;
  try {
    const v = JSON.parse(raw) as Partial<DatabaseMarkerValue>;
    if (typeof v.name !== 'string') return null;
    return { name: v.name, system_identifier: typeof v.system_identifier === 'string' ? v.system_identifier : null, set_by: String(v.set_by ?? '?'), set_at: String(v.set_at ?? '?') };
  } catch {
    return null;
  }
}

/** Reads the marker of a key space (read-only: the doctor uses it). A value that is not a marker reads as none. */
export async function readDatabaseMarker(redis: RedisClient, ks: KeySpace): Promise<DatabaseMarkerValue | null> {
  return parse(await redis.get(databaseMarkerKey(ks)));
}

/** What a mismatch says, the same words at start and in the log: both databases, the key space, and the two ways out. */
export function markerMismatch(ks: KeySpace, mine: DatabaseIdentity, marker: DatabaseMarkerValue): string {
  return (
    `this replica's ${describeDatabase(mine)} is not the database this Redis key space (${ks.prefix}:${ks.env}:) belongs to: ${describeDatabase(marker)}, ` +
    `marked by replica ${marker.set_by} at ${marker.set_at}; two databases behind one Redis, key prefix and environment share leader locks, quota counters and the scheduler snapshot`
  );
}

export function markerFix(ks: KeySpace): string {
  return (
    `point DATABASE_URL at that database, or give this cluster its own REDIS_URL, redis.key_prefix or RELAY_JOBS_ENV; ` +
    `if the database really moved for good, stop every replica and delete the marker (redis-cli DEL '${databaseMarkerKey(ks)}')`
  );
}

export class DatabaseMarker {
  /** The marker value last logged as naming another database, so the minute's check logs a change once. */
  private reported: string | null = null;

  constructor(
    private readonly redis: RedisClient,
    readonly ks: KeySpace,
    private readonly instanceId: string,
    private readonly now: () => number,
  ) {}

  get key(): string {
    return databaseMarkerKey(this.ks);
  }

  private value(db: DatabaseIdentity): string {
    return JSON.stringify({ name: db.name, system_identifier: db.system_identifier, set_by: this.instanceId, set_at: new Date(this.now()).toISOString() });
  }

  /**
   * At start: writes the marker if there is none (`SET NX`: of two replicas starting at once on
   * different databases, one wins and the other reads the winner's), then refuses a marker that
   * names another database.
   */
  async claim(db: DatabaseIdentity): Promise<{ created: boolean; marker: DatabaseMarkerValue }> {
    const created = (await this.redis.set(this.key, this.value(db), 'NX')) === 'OK';
    const marker = await readDatabaseMarker(this.redis, this.ks);
    if (!marker) throw new UserError(`the database marker ${this.key} in Redis holds something else than a marker: delete it (redis-cli DEL '${this.key}') and start again`);
    if (!sameDatabase(db, marker)) throw new UserError(`${markerMismatch(this.ks, db, marker)}. Refusing to start: ${markerFix(this.ks)}`);
    return { created, marker };
  }

  /**
   * While running (once a minute, beside the identity read): writes a lost marker again, and
   * returns the marker when it names another database (a replica of another database started
   * while the marker was missing), once per distinct marker so the caller logs it once.
   */
  async keep(db: DatabaseIdentity): Promise<DatabaseMarkerValue | null> {
    await this.redis.set(this.key, this.value(db), 'NX');
    const marker = await readDatabaseMarker(this.redis, this.ks);
    if (!marker || sameDatabase(db, marker)) {
      this.reported = null;
      return null;
    }
    const seen = `${marker.name}/${marker.system_identifier}`;
    if (this.reported === seen) return null;
    this.reported = seen;
    return marker;
  }
}

/** Start of a replica (not of a one-shot command, which writes no marker): sets or checks the marker; throws the refusal. */
export async function claimDatabaseMarker(marker: DatabaseMarker, db: Db, log: Logger): Promise<void> {
  const mine = await readDbIdentity(db);
  if (!mine) return;
  const { created } = await marker.claim(mine);
  if (created) log.info({ marker: marker.key, database: mine.name, system_identifier: mine.system_identifier }, `database marker set: this Redis key space now belongs to ${describeDatabase(mine)}`);
}

/** The heartbeat's identity read, with the marker kept beside it; a marker naming another database is logged (once per change), never thrown. */
export async function keepDatabaseMarker(identity: BackendIdentity, marker: DatabaseMarker | null, log: Logger): Promise<BackendIdentity> {
  const mine = identity.database;
  if (!marker || !mine) return identity;
  const ks = marker.ks;
  const other = await marker.keep(mine).catch(() => null); // Redis down: the readiness and lock metrics say so
  if (other) log.error({ marker: marker.key, database: mine.name, marked_database: other.name, marked_by: other.set_by }, `${markerMismatch(ks, mine, other)}: ${markerFix(ks)}`);
  return identity;
}
