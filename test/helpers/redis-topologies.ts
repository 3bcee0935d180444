// Real Redis topologies on loopback ports, started by the test itself: a Redis Cluster of three
// primaries, and a Sentinel set (one primary, one replica, three sentinels). Every server is a
// child process of the test with its own port and directory; nothing touches the machine's Redis.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { takePort, waitForRedis } from './services.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/**
 * A port whose cluster-bus twin (port + 10000) is free too, both below the kernel's ephemeral range
 * (32768 and up, see `freePort`): a port in that range can be taken as the source port of any
 * outgoing connection before the server binds it (a sentinel on 47566 once never came up).
 */
async function clusterPort(taken: Set<number>): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 20_000 + Math.floor(Math.random() * 2_768);
    if (taken.has(port) || taken.has(port + 10_000)) continue;
    if ((await portFree(port)) && (await portFree(port + 10_000))) {
      // Not a port (or bus twin) freePort already promised to a replica that has not bound it yet.
      if (!takePort(port)) continue;
      if (!takePort(port + 10_000)) continue;
      taken.add(port).add(port + 10_000);
      return port;
    }
  }
  throw new Error('no free port pair for a Redis Cluster node');
}

async function info(port: number, command: string[]): Promise<string> {
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  c.on('error', () => undefined);
  try {
    await c.connect();
    return String(await c.call(command[0]!, ...command.slice(1)));
  } finally {
    c.disconnect();
  }
}

class Server {
  proc: ChildProcess | null = null;
  constructor(
    readonly port: number,
    private readonly args: string[],
    /** `redis-server`, or Debian's `redis-sentinel` (package redis-sentinel) for a sentinel. */
    private readonly bin = 'redis-server',
  ) {}
  async start(): Promise<void> {
    const proc = spawn(this.bin, this.args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    // Its own words on why it did not come up (a port in use, a bad directive), kept to the last 2 KiB.
    let said = '';
    const keep = (d: Buffer) => (said = (said + d.toString()).slice(-2048));
    proc.stdout!.on('data', keep);
    proc.stderr!.on('data', keep);
    try {
      await waitForRedis(this.port, undefined, () => proc.exitCode !== null || proc.signalCode !== null);
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error('exited');
    } catch {
      // An exited server's last words may still be in the pipe: read it to its end first.
      if (proc.exitCode !== null || proc.signalCode !== null) await Promise.race([new Promise((r) => proc.once('close', r)), sleep(2000)]);
      throw new Error(`${this.bin} on port ${this.port} did not come up (exit ${proc.exitCode ?? proc.signalCode ?? 'none, still running'}): ${said.trim().slice(-600)}`);
    }
    // Once up it logs to stdout for as long as it runs: keep reading so a full pipe never blocks it.
    proc.stdout!.off('data', keep).resume();
    proc.stderr!.off('data', keep).resume();
  }
  async kill(): Promise<void> {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.kill('SIGKILL');
    });
  }
}

/** Three primaries, no replicas, slots spread by `redis-cli --cluster create`. */
export class RedisClusterSet {
  private constructor(
    readonly nodes: Server[],
    private readonly dir: string,
  ) {}

  get url(): string {
    return `redis+cluster://${this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  static async start(count = 3, opts: { appendonly?: boolean } = {}): Promise<RedisClusterSet> {
    const dir = mkdtempSync(join(tmpdir(), 'rj-redis-cluster-'));
    const taken = new Set<number>();
    const nodes: Server[] = [];
    for (let i = 0; i < count; i++) {
      const port = await clusterPort(taken);
      nodes.push(
        new Server(port, [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--cluster-enabled',
          'yes',
          '--cluster-config-file',
          join(dir, `nodes-${port}.conf`),
          '--cluster-node-timeout',
          '2000',
          '--dir',
          dir,
          '--dbfilename',
          `dump-${port}.rdb`,
          '--save',
          '',
          '--appendonly',
          opts.appendonly ? 'yes' : 'no',
          '--appendfilename',
          `aof-${port}.aof`,
          '--appendfsync',
          'always',
        ]),
      );
    }
    const set = new RedisClusterSet(nodes, dir);
    await Promise.all(nodes.map((n) => n.start()));
    await set.create();
    return set;
  }

  /**
   * What `redis-cli --cluster create --cluster-replicas 0` does (the same slot ranges, a distinct
   * config epoch per node, every node met), then waits until every node sees the whole cluster.
   * redis-cli waits for the join in steps of a whole second (2-5 s measured for three nodes); this
   * polls, so the set is ready as soon as Redis is (a new primary still answers `cluster_state:fail`
   * for its first 2 s: Redis's own rejoin delay).
   */
  private async create(): Promise<void> {
    const slots = 16_384;
    const per = slots / this.nodes.length;
    await Promise.all(
      this.nodes.map(async (n, i) => {
        const from = Math.round(per * i);
        const to = i === this.nodes.length - 1 ? slots - 1 : Math.round(per * (i + 1)) - 1;
        await info(n.port, ['CLUSTER', 'ADDSLOTSRANGE', String(from), String(to)]);
        await info(n.port, ['CLUSTER', 'SET-CONFIG-EPOCH', String(i + 1)]);
      }),
    );
    // Each pair meets directly: a node learns no third node from gossip first, which can take seconds.
    for (const [i, a] of this.nodes.entries()) for (const b of this.nodes.slice(i + 1)) await info(a.port, ['CLUSTER', 'MEET', '127.0.0.1', String(b.port)]);
    await this.waitHealthy();
  }

  /** Every node SIGKILLed (a whole-cluster outage); `startNodes` brings them back from their nodes.conf. */
  async stopNodes(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill()));
  }

  async startNodes(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.start()));
    await this.waitHealthy();
  }

  /** Until every node answers `cluster_state:ok`, knows every node and sees every slot served. */
  async waitHealthy(timeoutMs = 60_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    const healthy = (s: string) => s.includes('cluster_state:ok') && s.includes(`cluster_known_nodes:${this.nodes.length}\r`) && s.includes('cluster_slots_ok:16384\r');
    for (;;) {
      const states = await Promise.all(this.nodes.map((n) => info(n.port, ['CLUSTER', 'INFO']).catch(() => '')));
      if (states.every(healthy)) return;
      if (Date.now() > end) throw new Error(`Redis Cluster not healthy: ${states.map((s) => /cluster_state:\w+/.exec(s)?.[0]).join(', ')}`);
      await sleep(50);
    }
  }

  /** The node that owns a key's slot. */
  async nodeOf(key: string): Promise<Server> {
    const slot = Number(await info(this.nodes[0]!.port, ['CLUSTER', 'KEYSLOT', key]));
    const shards = JSON.parse(JSON.stringify(await this.slots())) as Array<[number, number, [string, number]]>;
    const owner = shards.find(([from, to]) => slot >= from && slot <= to)!;
    return this.nodes.find((n) => n.port === owner[2][1])!;
  }

  private async slots(): Promise<unknown> {
    const c = new Redis({ port: this.nodes[0]!.port, host: '127.0.0.1' });
    try {
      return await c.call('CLUSTER', 'SLOTS');
    } finally {
      c.disconnect();
    }
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * One primary, one replica, three sentinels watching them as `mymaster` (quorum 2). The sentinels
 * are `redis-server --sentinel`, or with `sentinelBinary: 'redis-sentinel'` Debian's packaged
 * sentinel (`apt-get install redis-sentinel`, which .ci/run installs).
 */
export class SentinelSet {
  readonly master = 'mymaster';
  private constructor(
    readonly primary: Server,
    readonly replica: Server,
    readonly sentinels: Server[],
    private readonly dir: string,
  ) {}

  get url(): string {
    return `redis+sentinel://${this.sentinels.map((s) => `127.0.0.1:${s.port}`).join(',')}/${this.master}`;
  }

  static async start(opts: { sentinelBinary?: 'redis-sentinel' } = {}): Promise<SentinelSet> {
    const dir = mkdtempSync(join(tmpdir(), 'rj-redis-sentinel-'));
    const taken = new Set<number>();
    const port = async () => clusterPort(taken);
    // No diskless-sync delay: Redis otherwise waits 5 s for more replicas before the one full sync.
    const base = (p: number) => ['--port', String(p), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', `dump-${p}.rdb`, '--repl-diskless-sync-delay', '0'];
    const pp = await port();
    const rp = await port();
    const primary = new Server(pp, base(pp));
    const replica = new Server(rp, [...base(rp), '--replicaof', '127.0.0.1', String(pp)]);
    await primary.start();
    await replica.start();
    const sentinels: Server[] = [];
    for (let i = 0; i < 3; i++) {
      const sp = await port();
      const conf = join(dir, `sentinel-${sp}.conf`);
      writeFileSync(
        conf,
        [
          `port ${sp}`,
          'bind 127.0.0.1',
          `dir ${dir}`,
          `sentinel monitor mymaster 127.0.0.1 ${pp} 2`,
          'sentinel down-after-milliseconds mymaster 1000',
          'sentinel failover-timeout mymaster 5000',
          'sentinel parallel-syncs mymaster 1',
          '',
        ].join('\n'),
      );
      sentinels.push(opts.sentinelBinary ? new Server(sp, [conf], opts.sentinelBinary) : new Server(sp, [conf, '--sentinel']));
    }
    await Promise.all(sentinels.map((s) => s.start()));
    const set = new SentinelSet(primary, replica, sentinels, dir);
    await set.waitReplicaInSync();
    return set;
  }

  /** The port the sentinels name as the current primary. */
  async primaryPort(): Promise<number> {
    const c = new Redis({ port: this.sentinels[0]!.port, host: '127.0.0.1' });
    try {
      const [, port] = (await c.call('SENTINEL', 'get-master-addr-by-name', this.master)) as [string, string];
      return Number(port);
    } finally {
      c.disconnect();
    }
  }

  /** Until the replica has synced and every sentinel knows it (a failover needs both). */
  async waitReplicaInSync(timeoutMs = 60_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const repl = await info(this.replica.port, ['INFO', 'replication']).catch(() => '');
      const known = await Promise.all(this.sentinels.map((s) => info(s.port, ['SENTINEL', 'replicas', this.master]).catch(() => '')));
      if (repl.includes('master_link_status:up') && known.every((k) => k.includes(String(this.replica.port)))) return;
      if (Date.now() > end) throw new Error('the Sentinel set did not come up (replica not in sync or not seen by every sentinel)');
      await sleep(50);
    }
  }

  /** `SENTINEL FAILOVER`, then waits until the sentinels name the old replica as primary. */
  async failover(timeoutMs = 30_000): Promise<void> {
    const before = await this.primaryPort();
    await info(this.sentinels[0]!.port, ['SENTINEL', 'FAILOVER', this.master]);
    const end = Date.now() + timeoutMs;
    while ((await this.primaryPort()) === before) {
      if (Date.now() > end) throw new Error('Sentinel failover did not complete');
      await sleep(100);
    }
  }

  async stop(): Promise<void> {
    await Promise.all([...this.sentinels, this.primary, this.replica].map((s) => s.kill()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
