import { afterEach, describe, expect, it } from 'vitest';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { connectRedis, useCommandTimeout, type RedisClient } from '../src/coordination/redis-client.js';
import { UserError } from '../src/config/errors.js';
import { Redis } from 'ioredis';
import { databaseMarkerKey } from '../src/coordination/keys.js';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { captureLogs } from './helpers/log-capture.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

/**
 * A TCP proxy in front of the test Redis that holds every reply back by `delayMs` while `slow` is
 * set: a loaded host, as a replica sees it at start-up. `slowFrom`: `slow` is set by the first
 * command whose bytes match it (a Redis that stops answering in the middle of start-up).
 */
class SlowProxy {
  slow = true;
  slowFrom: RegExp | null = null;
  private readonly sockets = new Set<Socket>();
  private constructor(
    readonly server: Server,
    readonly delayMs: number,
  ) {}

  static async start(delayMs: number): Promise<SlowProxy> {
    const target = new URL(REDIS_URL);
    const server = createServer();
    const proxy = new SlowProxy(server, delayMs);
    server.on('connection', (client) => {
      const upstream = connect(Number(target.port || 6379), target.hostname);
      for (const s of [client, upstream]) {
        proxy.sockets.add(s);
        s.on('error', () => undefined);
        s.on('close', () => proxy.sockets.delete(s));
      }
      client.on('data', (chunk: Buffer) => {
        if (proxy.slowFrom?.test(chunk.toString('latin1'))) proxy.slow = true;
      });
      client.pipe(upstream);
      upstream.on('data', (chunk: Buffer) => {
        if (!proxy.slow) client.write(chunk);
        else setTimeout(() => client.writable && client.write(chunk), proxy.delayMs);
      });
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get url(): string {
    const address = this.server.address();
    return `redis://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

describe('connectRedis on a slow host', () => {
  let proxy: SlowProxy | null = null;
  let redis: RedisClient | null = null;
  afterEach(async () => {
    redis?.disconnect();
    redis = null;
    await proxy?.close();
    proxy = null;
  });

  it('start-up waits for replies up to the connect timeout; afterwards commands fail after the command timeout', async () => {
    // Every reply takes 1 s, ten times the command timeout: start-up must still connect (a replica used to exit with "Command timed out").
    proxy = await SlowProxy.start(1000);
    redis = await connectRedis(proxy.url, 100, 20_000);
    // The start-up steps that follow the connection (the database marker's SET NX, ...) wait as long.
    expect(await redis.ping()).toBe('PONG');
    // Once start-up is over, the short command timeout holds: a lock attempt turns into the PostgreSQL fallback instead of hanging.
    useCommandTimeout(redis, 100);
    await expect(redis.ping()).rejects.toThrow(/Command timed out/);
  });

  it('an unreachable Redis is still a one-line error naming REDIS_URL', async () => {
    proxy = await SlowProxy.start(0);
    const url = proxy.url;
    await proxy.close();
    proxy = null;
    await expect(connectRedis(url, 100, 2_000)).rejects.toThrow(/cannot connect to Redis at redis:\/\/127\.0\.0\.1:\d+ \(REDIS_URL\): connection refused/);
  });

  it('a database number the server does not have (/99 of 16) fails start-up, naming it; ioredis alone stayed on database 0', async () => {
    const at = (db: number) => Object.assign(new URL(REDIS_URL), { pathname: `/${db}` }).toString();
    const err = await connectRedis(at(99), 1000, 5000).then(
      (r) => (r.disconnect(), null),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UserError);
    expect((err as Error).message).toMatch(
      /^cannot connect to Redis at redis:\/\/.*\/99 \(REDIS_URL\): database 99 \(the URL's \/99\): ERR DB index is out of range; the server's `databases` setting bounds the number/,
    );
    // The last database there is selected, as the URL says.
    redis = await connectRedis(at(15), 1000, 5000);
    expect(await redis.client('INFO')).toMatch(/\bdb=15\b/);
  });

  it('sentinels and cluster nodes that never answer end start-up within two connect timeouts, naming them (issue 49)', { timeout: 60_000 }, async () => {
    // Listeners that accept and never answer (a firewall that drops, a hung host): ioredis alone retries them forever.
    const silent: Server[] = [];
    const held: Socket[] = [];
    for (let i = 0; i < 2; i++) {
      const s = createServer((c) => held.push(c));
      await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
      silent.push(s);
    }
    const ports = silent.map((s) => (s.address() as { port: number }).port);
    try {
      for (const url of [`redis+sentinel://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}/mymaster`, `redis+cluster://127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}`]) {
        // Without the deadline this await never settles, and the test's own timeout fails it.
        const err = (await connectRedis(url, 100, 500).catch((e: Error) => e)) as Error;
        expect(err.message, url).toMatch(
          /cannot connect to Redis at .* \(REDIS_URL\): no answer within 1 s \(redis\.connect_timeout 0\.5 s, two attempts\) from the (sentinels|cluster nodes) 127\.0\.0\.1:\d+, 127\.0\.0\.1:\d+/,
        );
      }
    } finally {
      for (const c of held) c.destroy();
      await Promise.all(silent.map((s) => new Promise((r) => s.close(r))));
    }
  });
});

describe('a replica starting against a slow Redis', () => {
  const logs = captureLogs('redis-startup');
  let proxy: SlowProxy | null = null;
  let db: Awaited<ReturnType<typeof freshDatabase>> | null = null;
  afterEach(async () => {
    await proxy?.close();
    proxy = null;
    await db?.drop();
    db = null;
    await dropRedisPrefix(prefix);
  });
  const prefix = uniqueName('rjslow');
  const configFor = (url: string, commandTimeout: string, connectTimeout: string) =>
    loadConfig({
      env: {
        DATABASE_URL: db!.url,
        REDIS_URL: url,
        RELAY_JOBS_INSTANCE_ID: 'slow-redis-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: 'slow-redis-admin-token-0123456789',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__REDIS__COMMAND_TIMEOUT: commandTimeout,
        RELAY_JOBS__REDIS__CONNECT_TIMEOUT: connectTimeout,
      },
    });

  it('start-up steps after the connection wait up to redis.connect_timeout; the command timeout holds once started', { timeout: 60_000 }, async () => {
    // CI, 6 Dec: a replica connected, then exited with "unexpected error: Command timed out" at its
    // next start-up step (the database marker's SET NX) on a loaded host with a 300 ms command timeout.
    db = await freshDatabase({ migrated: true });
    proxy = await SlowProxy.start(400);
    const rt = await Runtime.create(configFor(proxy.url, '100ms', '5s'), { logger: logs.logger });
    try {
      // The start-up steps' Redis commands went through the slow proxy: the database marker is set (read around the proxy).
      const direct = new Redis(REDIS_URL);
      try {
        expect(await direct.get(databaseMarkerKey({ prefix, env: 'test' }))).toContain(db!.name);
      } finally {
        direct.disconnect();
      }
      // Started: a command slower than redis.command_timeout fails, and the round takes the PostgreSQL fallback.
      await expect(rt.redis!.ping()).rejects.toThrow(/Command timed out/);
    } finally {
      await rt.shutdown();
    }
  });

  it('a Redis that stops answering in the middle of start-up is one line naming REDIS_URL and redis.connect_timeout', { timeout: 60_000 }, async () => {
    db = await freshDatabase({ migrated: true });
    proxy = await SlowProxy.start(30_000);
    proxy.slow = false;
    proxy.slowFrom = /\bNX\b/; // the database marker's SET NX, the first start-up command after the connection
    const err = (await Runtime.create(configFor(proxy.url, '100ms', '1s'), { logger: logs.logger }).catch((e: Error) => e)) as Error;
    expect(err).toBeInstanceOf(UserError); // the CLI prints it as one line and exits 2, no stack trace
    expect(err.message).toMatch(/^Redis at redis:\/\/127\.0\.0\.1:\d+ \(REDIS_URL\) failed a start-up command: Command timed out \(no answer within redis\.connect_timeout, 1 s\)$/);
  });
});
