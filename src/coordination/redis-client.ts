import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { UserError } from '../config/errors.js';
import { redactUrl, scrubUrlSecrets } from '../config/redact-url.js';
import { parseRedisUrl, type RedisTarget } from '../config/redis-url.js';
import { withTimeout } from '../time/clock.js';
import { timeout, type Cancel } from '../time/wall.js';

/** A connection to one node, a Sentinel-managed primary, or a Redis Cluster: the same commands. */
export type RedisClient = Redis | Cluster;

/**
 * A Redis client for coordination: commands fail fast while Redis is down (no offline queue,
 * one retry, a command timeout) so a lock attempt turns into the PostgreSQL fallback within
 * about `commandTimeoutMs` instead of hanging; the connection itself keeps retrying. Until the
 * caller calls `useCommandTimeout` (the runtime does once start-up is over), a command waits up
 * to `connectTimeoutMs`, as the connection's own probe does.
 *
 * Behind Sentinel the client follows failovers (the failover detector subscribes to
 * `+switch-master`; a `READONLY` reply from a demoted primary reconnects). Commands sent during
 * the switch fail like an outage, so rounds take the PostgreSQL fallback meanwhile. A Redis
 * Cluster client discovers the slots from the seed nodes and follows MOVED/ASK redirections.
 * Once connected, the client never stays closed until `quit()`/`disconnect()` (`keepOpen`).
 */
export async function connectRedis(url: string, commandTimeoutMs: number, connectTimeoutMs: number): Promise<RedisClient> {
  const target = parseRedisUrl(url);
  // Start-up waits up to the connect timeout for the ready check (INFO), the PING and every command
  // of the start-up steps that follow: on a loaded host their replies can take longer than a short
  // command timeout, and a replica then exited at start with "Command timed out" (after the PING in
  // CI, 6 Dec). The caller applies the command timeout once start-up is over (useCommandTimeout).
  const redis = createClient(target, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: Math.max(commandTimeoutMs, connectTimeoutMs),
    connectTimeout: connectTimeoutMs,
    retryStrategy: (times) => Math.min(100 * times, 1000),
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
  });
  // ioredis rejects connect() with "Connection is closed." and reports the real cause
  // (ECONNREFUSED, ENOTFOUND, an auth error) only as an 'error' event: keep the last one.
  let cause: Error | null = null;
  const onError = (err: Error) => (cause = err);
  redis.on('error', onError);
  // A Sentinel set or Cluster whose nodes all stay silent never settles connect(): ioredis retries
  // them forever. Start-up must end (issue 49): two attempts' worth of time, then one line.
  const deadlineMs = 2 * connectTimeoutMs;
  try {
    await withTimeout(
      redis
        .connect()
        .then(() => redis.ping())
        // Connected: an earlier 'error' event (the refused SELECT itself) is not the cause of what follows.
        .then(() => ((cause = null), checkDatabase(redis, target))),
      deadlineMs,
      `no answer within ${Math.round(deadlineMs / 100) / 10} s (redis.connect_timeout ${Math.round(connectTimeoutMs / 100) / 10} s, two attempts) from ${nodesOf(target)}`,
    );
  } catch (err) {
    redis.disconnect();
    const why = (err as Error).message.startsWith('no answer within')
      ? `${(err as Error).message}${cause ? `; last error: ${describeRedisError(cause)}` : ''}`
      : describeRedisError(cause ?? (err as Error));
    throw new UserError(`cannot connect to Redis at ${redactUrl(url)} (REDIS_URL): ${scrubUrlSecrets(why, url)}`);
  } finally {
    redis.off('error', onError);
  }
  redis.on('error', () => undefined); // reported by readiness and lock metrics, not as crashes
  keepOpen(redis, commandTimeoutMs);
  return redis;
}

/**
 * The URL's database number (`/N`) is selected by ioredis on connect; a server with fewer
 * databases refuses the SELECT ("ERR DB index is out of range") only as an 'error' event, and the
 * client stays on database 0: deployments kept apart by their number would share one without a
 * word. Selected again here, where a refusal fails the start.
 */
async function checkDatabase(redis: RedisClient, target: RedisTarget): Promise<void> {
  const db = target.kind === 'sentinel' ? target.db : target.kind === 'single' ? Number(new URL(target.url).pathname.slice(1) || 0) : 0;
  if (!db || redis instanceof Cluster) return;
  try {
    await redis.select(db);
  } catch (err) {
    throw new Error(`database ${db} (the URL's /${db}): ${(err as Error).message}; the server's \`databases\` setting bounds the number (16 by default: 0-15)`, { cause: err });
  }
}

/** The longest wait between two attempts of `keepOpen` (and of ioredis's own retry strategies here). */
const REOPEN_MAX_MS = 1000;

/**
 * Connects again whenever the client ends (status `end`) without `quit()` or `disconnect()`: the
 * retry strategies only cover a connection that closes, not an attempt that fails inside the
 * connector. Issue 53, soak finding 1 (ioredis 6.0.0): the failover detector of a lost Sentinel
 * connection stays subscribed to `+switch-master`; when the switch is announced while the client
 * is awaiting a sentinel's answer for its next attempt, the detector's `connector.disconnect()`
 * makes that attempt throw "Connection is closed." and `connect()` sets status `end`, which
 * nothing left: every command failed with "Connection is closed." until the process ended.
 * `quit()` and `disconnect()` (not the internal `disconnect(true)` of a reconnect) stop it; a
 * `quit()` unanswered within `quitWithinMs` disconnects, so a shutdown never waits on Redis.
 */
function keepOpen(redis: RedisClient, quitWithinMs: number): void {
  let closed = false;
  let attempts = 0;
  let pending: Cancel | null = null;
  const close = () => {
    closed = true;
    pending?.();
    pending = null;
  };
  const disconnect = redis.disconnect.bind(redis);
  redis.disconnect = (reconnect = false) => {
    if (!reconnect) close();
    disconnect(reconnect);
  };
  const quit = redis.quit.bind(redis) as () => Promise<'OK'>;
  (redis as { quit: () => Promise<'OK'> }).quit = () => {
    close();
    return withTimeout(quit(), quitWithinMs, `Redis did not answer QUIT within ${quitWithinMs} ms`).catch((err: Error) => {
      disconnect();
      throw err;
    });
  };
  redis.on('ready', () => (attempts = 0));
  redis.on('end', () => {
    if (closed || pending) return;
    attempts++;
    pending = timeout(
      () => {
        pending = null;
        if (!closed && redis.status === 'end') redis.connect().catch(() => undefined); // a failed attempt ends again: the next one follows
      },
      Math.min(100 * attempts, REOPEN_MAX_MS),
      { unref: true },
    );
  });
}

/**
 * From now on every command fails after `ms`: on the connection, or on each node of a Redis Cluster,
 * present and future. Until then a client of `connectRedis` waits up to the connect timeout.
 */
export function useCommandTimeout(redis: RedisClient, ms: number): void {
  if (!(redis instanceof Cluster)) {
    redis.options.commandTimeout = ms;
    return;
  }
  for (const node of redis.nodes()) node.options.commandTimeout = ms;
  redis.on('+node', (node: Redis) => (node.options.commandTimeout = ms));
}

function createClient(target: RedisTarget, base: RedisOptions): RedisClient {
  const auth = { username: target.username, password: target.password, ...(target.tls ? { tls: {} } : {}) };
  if (target.kind === 'single') return new Redis(target.url, base);
  if (target.kind === 'sentinel') {
    return new Redis({
      ...base,
      ...auth,
      sentinels: target.sentinels,
      name: target.master,
      db: target.db,
      role: 'master',
      sentinelPassword: target.sentinelPassword,
      failoverDetector: true,
      sentinelRetryStrategy: (times) => Math.min(100 * times, REOPEN_MAX_MS),
      // A sentinel that accepts the connection but never answers (a stopped process) held every
      // later attempt for good: its answer is waited for as long as a connection, then the next.
      sentinelCommandTimeout: base.connectTimeout,
    });
  }
  const { lazyConnect, enableOfflineQueue, retryStrategy: _perNode, ...nodeOptions } = base;
  return new Cluster(target.nodes, {
    lazyConnect,
    enableOfflineQueue,
    clusterRetryStrategy: (times) => Math.min(100 * times, 1000),
    slotsRefreshTimeout: base.connectTimeout,
    redisOptions: { ...nodeOptions, ...auth },
  });
}

/** One line naming the cause of a failed Redis connection, with the address where the system gave one. */
export function describeRedisError(err: Error): string {
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number; hostname?: string; errors?: Error[] };
  if (!e.message && e.errors?.length) return e.errors.map(describeRedisError).join('; ');
  const at = e.address ? ` at ${e.address}${e.port ? `:${e.port}` : ''}` : '';
  if (e.code === 'ECONNREFUSED') return `connection refused${at} (ECONNREFUSED: is redis-server running and listening there?)`;
  if (e.code === 'ENOTFOUND') return `host not found (ENOTFOUND ${e.hostname ?? ''})`.replace(' )', ')');
  if (e.code === 'ETIMEDOUT') return `no answer${at} (ETIMEDOUT: is the host reachable and the port open?)`;
  if (/NOAUTH|WRONGPASS/.test(e.message)) return `${e.message.split('\n')[0]} (check the password in REDIS_URL)`;
  return `${e.message.split('\n')[0]}${e.code ? ` (${e.code})` : ''}`;
}

/** The addresses a target is reached through, as an error names them. */
function nodesOf(target: RedisTarget): string {
  if (target.kind === 'single') return 'the node';
  const list = (target.kind === 'sentinel' ? target.sentinels : target.nodes).map((n) => `${n.host}:${n.port}`).join(', ');
  return target.kind === 'sentinel' ? `the sentinels ${list} (primary group ${target.master})` : `the cluster nodes ${list}`;
}

/**
 * A start-up step's Redis command that failed (timed out after the connect timeout, connection
 * closed, no retry left, a Redis Cluster not serving, or an error reply) as one line naming the
 * server and the key, or null for any other error.
 */
export function redisStartupFailure(err: unknown, url: string, connectTimeoutMs: number): UserError | null {
  const e = err as Error;
  const names = ['ReplyError', 'MaxRetriesPerRequestError', 'ClusterAllFailedError'];
  const messages = /^(Command timed out|Connection is closed\.|Stream isn't writeable|Cluster isn't ready|Too many Cluster redirections|Failed to refresh slots cache)/;
  if (!names.includes(e?.name) && !messages.test(e?.message ?? '')) return null;
  const bound = e.message === 'Command timed out' ? ` (no answer within redis.connect_timeout, ${Math.round(connectTimeoutMs / 100) / 10} s)` : '';
  return new UserError(`Redis at ${redactUrl(url)} (REDIS_URL) failed a start-up command: ${scrubUrlSecrets(describeRedisError(e), url)}${bound}`);
}
