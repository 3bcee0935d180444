import type { RedisClient } from '../coordination/redis-client.js';
import { keySource, type Config } from '../config/load.js';
import { UserError } from '../config/errors.js';
import { masterKeyProblem } from '../config/replica-requirements.js';
import type { Db } from '../store/db.js';
import { PgDb, type PgDbOptions } from '../store/pg-db.js';
import { connectWhenReady } from '../store/pg-startup.js';
import { PgliteDb } from '../store/pglite-db.js';
import { DataDirLock } from '../store/data-dir-lock.js';
import { tightenDataDir } from '../store/data-dir-perms.js';
import { migrate } from './migrations.js';
import { SecretBox } from '../store/secret-box.js';
import { checkMasterKey, connectionBudget } from '../store/server-checks.js';
import { connectRedis, redisStartupFailure, useCommandTimeout } from '../coordination/redis-client.js';
import type { Logger } from '../telemetry/logger.js';
import { redactUrl } from '../config/redact-url.js';
import { untilAborted } from './startup-abort.js';

/** The connections a runtime owns: PostgreSQL (or PGlite), Redis in cluster mode, the data-dir lock in embedded mode. */
export interface Backends {
  db: Db;
  /**
   * Where session state lives (the liveness session, the advisory-lock fallback): a small pool on
   * DATABASE_DIRECT_URL when it is set (PgBouncer in transaction mode keeps no session), else `db`.
   */
  sessionDb: Db;
  redis: RedisClient | null;
  box: SecretBox;
  dataDirLock: DataDirLock | null;
  /** Start-up is over: Redis commands fail after `redis.command_timeout` from now on (until then, `redis.connect_timeout`). */
  started(): void;
  /** A start-up failure as it is thrown: a Redis command's failure becomes one line naming REDIS_URL. */
  startupError(err: unknown): unknown;
  /** Closes whatever is open, in reverse order of opening; never throws. */
  close(log: Logger): Promise<void>;
}

/**
 * Whether a pool names its statements (`database.prepared_statements`): `auto` names them on `url`
 * when the first connection finds the server sees it directly (not PgBouncer's or a proxy's
 * connection: `PgDb` compares the session's client port), and always on `direct_url` (a session
 * of its own, which a transaction pooler cannot give).
 */
export function usePreparedStatements(config: Config, pool: 'url' | 'direct_url'): boolean | 'when-direct' {
  const setting = config.database.prepared_statements;
  if (setting !== 'auto') return setting === 'on';
  return pool === 'direct_url' || 'when-direct';
}

/**
 * Connects, migrates, and checks what needs the servers (master key, connection budget).
 * Every failure is a one-line UserError; whatever was opened is closed again before it throws.
 * `signal` (a stop signal during start-up) ends a wait for a server at once (`StartupInterrupted`).
 * `waitForDatabase` (a replica's `start`, not a one-shot command): a PostgreSQL or PgBouncer not
 * reachable yet (refused, restarting, `server_login_retry`) is tried again, a log line per attempt,
 * until `database.startup_wait` (issue 53); a wrong URL, password or database still fails at once.
 */
export async function openBackends(config: Config, log: Logger, signal?: AbortSignal, waitForDatabase = false): Promise<Backends> {
  const keyProblem = masterKeyProblem(config);
  if (keyProblem) throw new UserError(keyProblem);
  let db: Db | null = null;
  let directDb: Db | null = null;
  let redis: RedisClient | null = null;
  let dataDirLock: DataDirLock | null = null;
  let perms: { tightened: number; failed: number } | null = null;
  const close = async (l: Logger) => {
    if (redis) await redis.quit().catch(() => redis!.disconnect());
    await directDb?.close().catch((err) => l.warn({ err: (err as Error).message }, 'closing the direct database session failed'));
    await db?.close().catch((err) => l.warn({ err: (err as Error).message }, 'closing the database failed'));
    if (dataDirLock) tightenDataDir(config.database.data_dir);
    dataDirLock?.release();
  };
  try {
    if (config.mode === 'cluster') {
      log.info('connecting to PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)');
      const pgWait = (url: string, key: string) => `PostgreSQL at ${redactUrl(url)} (${urlSource(config, key)})`;
      const closeDb = (d: Db) => d.close().catch(() => undefined);
      const preparedRefused = (url: string, source: string) => (reason: string) =>
        log.warn(
          { reason, source },
          `PostgreSQL at ${redactUrl(url)} (${source}) refused a prepared statement (${reason}): a pooler in transaction mode that cannot keep them (PgBouncer before 1.21, or max_prepared_statements 0)? Statements run unprepared from now on; set database.prepared_statements: off to say so`,
        );
      const connect = (opts: PgDbOptions, key: string) => {
        if (!waitForDatabase) return PgDb.connect(opts);
        const bound = config.database.startup_wait;
        return connectWhenReady(opts, {
          waitMs: bound,
          signal,
          onRetry: ({ attempt, reason, retryInMs, elapsedMs }) =>
            log.warn(
              { attempt, url: redactUrl(opts.url), source: opts.source, reason, retry_in_ms: Math.round(retryInMs), waited_ms: Math.round(elapsedMs), startup_wait_ms: bound },
              `${pgWait(opts.url, key)} not reachable yet (attempt ${attempt}): ${reason}; trying again in ${(retryInMs / 1000).toFixed(1)} s, for up to ${bound / 1000} s in all (database.startup_wait)`,
            ),
        });
      };
      const pool = await untilAborted(
        connect(
          {
            url: config.database.url!,
            poolSize: config.database.pool_size,
            connectTimeoutMs: config.database.connect_timeout,
            onError: (err) => log.warn({ err: err.message }, 'idle PostgreSQL connection failed'),
            source: urlSource(config, 'database.url'),
            applicationName: `relay-jobs/${config.instance.id}`,
            preparedStatements: usePreparedStatements(config, 'url'),
            onPreparedRefused: preparedRefused(config.database.url!, 'DATABASE_URL'),
          },
          'database.url',
        ),
        signal,
        pgWait(config.database.url!, 'database.url'),
        closeDb,
      );
      db = pool;
      if (config.database.direct_url) {
        // The coordination session (liveness and the advisory-lock fallback share it), plus one to reopen it while the old one closes.
        directDb = await untilAborted(
          connect(
            {
              url: config.database.direct_url,
              poolSize: 2,
              connectTimeoutMs: config.database.connect_timeout,
              onError: (err) => log.warn({ err: err.message }, 'idle direct PostgreSQL session failed'),
              source: urlSource(config, 'database.direct_url'),
              applicationName: `relay-jobs/${config.instance.id}`,
              preparedStatements: usePreparedStatements(config, 'direct_url'),
              onPreparedRefused: preparedRefused(config.database.direct_url, 'DATABASE_DIRECT_URL'),
            },
            'database.direct_url',
          ),
          signal,
          pgWait(config.database.direct_url, 'database.direct_url'),
          closeDb,
        );
        log.info('session state (liveness, advisory-lock fallback) on DATABASE_DIRECT_URL; statements on DATABASE_URL');
      }
      if (pool.prepared.route === 'pooled')
        log.info(
          `DATABASE_URL reaches PostgreSQL through a pooler or proxy, or over a Unix socket (the server does not see this connection's own port): statements run unprepared (database.prepared_statements: auto; set it to on for a direct connection, or PgBouncer 1.21+ with max_prepared_statements)`,
        );
      log.info('PostgreSQL answered; connecting to Redis (REDIS_URL)');
      redis = await untilAborted(connectRedis(config.redis.url!, config.redis.command_timeout, config.redis.connect_timeout), signal, `Redis at ${redactUrl(config.redis.url!)} (REDIS_URL)`, (r) =>
        r.disconnect(),
      );
    } else {
      dataDirLock = DataDirLock.acquire(config.database.data_dir, { httpPort: config.http.port });
      // Before PGlite opens its files: data written by an older version (0666/0755) becomes private.
      const fresh = !PgliteDb.exists(config.database.data_dir);
      perms = tightenDataDir(config.database.data_dir);
      log.info(
        { data_dir: config.database.data_dir },
        fresh ? 'creating the embedded database (PGlite) in a new data directory: this takes several seconds, once' : 'opening the embedded database (PGlite)',
      );
      db = await PgliteDb.open(config.database.data_dir, { sharedBuffersMb: config.database.embedded_shared_buffers_mb });
    }
    if (perms) {
      // PGlite's WASM file system creates its files 0666 whatever the umask: tightened again once open and
      // migrated (and at close); in between, a new file is still unreachable inside the 0700 pgdata folder.
      const after = tightenDataDir(config.database.data_dir);
      log.info(
        { data_dir: config.database.data_dir, tightened: perms.tightened, created_open: after.tightened, failed: perms.failed + after.failed },
        `data directory: ${perms.tightened} paths tightened to 0600/0700`,
      );
    }
    if (config.database.auto_migrate) {
      const applied = await migrate(db, (m) => log.info({ migration: `${m.version}_${m.name}` }, 'applying migration'));
      if (applied.length) log.info({ migrations: applied.map((m) => `${m.version}_${m.name}`) }, 'migrations applied');
    }
    const box = config.security.master_key ? SecretBox.fromBase64(config.security.master_key) : SecretBox.forDataDir(config.database.data_dir);
    await checkMasterKey(db, box.fingerprint);
    if (config.mode === 'cluster') await warnConnectionBudget(db, config, log);
    const started = () => redis && useCommandTimeout(redis, config.redis.command_timeout);
    const startupError = (err: unknown) => (redis && redisStartupFailure(err, config.redis.url!, config.redis.connect_timeout)) || err;
    return { db, sessionDb: directDb ?? db, redis, box, dataDirLock, started, startupError, close };
  } catch (err) {
    redis?.disconnect();
    redis = null;
    await close(log);
    throw err;
  }
}

/** The seed's rule: pool size × replicas within the server's max_connections. */
async function warnConnectionBudget(db: Db, config: Config, log: Logger): Promise<void> {
  const budget = await connectionBudget(db);
  const { pool_size } = config.database;
  const { expected_replicas } = config.cluster;
  const need = pool_size * expected_replicas;
  if (need > budget) {
    log.warn(
      { pool_size, expected_replicas, max_connections: budget },
      `database.pool_size (${pool_size}) × cluster.expected_replicas (${expected_replicas}) = ${need} exceeds the server's ${budget} usable connections; lower the pool size or raise max_connections`,
    );
  }
}

/** Where a URL key's value came from, as a connection error names it: the variable, or the key and its file. */
export function urlSource(config: Config, key: string): string {
  const from = keySource(config.source.keys, config.source.file, key);
  return /^[A-Z][A-Z0-9_]*$/.test(from) ? from : `${key} in ${from}`;
}
