/**
 * Plays the seeded fault schedule against the soak's own processes (never the machine's shared
 * servers): SIGKILL of a replica (restarted after `holdMs`), SIGSTOP/SIGCONT, the Redis primary
 * killed and restarted, a Sentinel failover, PostgreSQL stopped (`immediate`, a crash as clients
 * see it) and started, PgBouncer killed and restarted. Each fault's real start and end are kept for
 * what it cost (soak-report.ts).
 */
import { Redis } from 'ioredis';
import type { Fault } from './soak-schedule.js';
import { alive, restartReplica, type SoakReplica, type SoakServers } from './soak-services.js';

export interface FaultRecord extends Fault {
  /** Wall-clock ms when the fault began and when it was over (the process or server back). */
  startedAt: number;
  endedAt: number;
  target: string;
  error?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Until the node that is not the primary has its link to the primary up (whichever node the sentinels promoted last). */
async function replicaInSync(servers: SoakServers, primaryPort: number, timeoutMs = 60_000): Promise<void> {
  const node = [servers.sentinel.primary, servers.sentinel.replica].find((n) => n.port !== primaryPort)!;
  for (const end = Date.now() + timeoutMs; ;) {
    const c = new Redis({ port: node.port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
    c.on('error', () => undefined);
    const info = await c
      .connect()
      .then(() => c.info('replication'))
      .catch(() => '')
      .finally(() => c.disconnect());
    if (info.includes('master_link_status:up') && info.includes(`master_port:${primaryPort}`)) return;
    if (Date.now() > end) throw new Error(`the Redis replica :${node.port} did not sync with the primary :${primaryPort} within ${timeoutMs} ms`);
    await sleep(200);
  }
}

async function inject(f: Fault, servers: SoakServers, replicas: SoakReplica[]): Promise<string> {
  switch (f.kind) {
    case 'sigkill': {
      const r = replicas[f.replica!]!;
      r.held = true;
      if (alive(r)) {
        r.proc.proc.kill('SIGKILL');
        await r.proc.exited;
      }
      await sleep(f.holdMs);
      await restartReplica(r);
      r.held = false;
      return r.id;
    }
    case 'sigstop': {
      const r = replicas[f.replica!]!;
      r.stopped = true;
      r.proc.proc.kill('SIGSTOP');
      await sleep(f.holdMs);
      r.proc.proc.kill('SIGCONT');
      r.stopped = false;
      return r.id;
    }
    case 'redis_restart': {
      const port = await servers.sentinel.primaryPort();
      const node = [servers.sentinel.primary, servers.sentinel.replica].find((n) => n.port === port)!;
      await node.kill();
      await sleep(f.holdMs);
      await node.start();
      return `redis primary :${port}`;
    }
    case 'sentinel_failover': {
      const before = await servers.sentinel.primaryPort();
      // A failover needs the current replica in sync (after a Redis restart it resyncs first).
      await replicaInSync(servers, before);
      await servers.sentinel.failover();
      return `primary :${before} → :${await servers.sentinel.primaryPort()}`;
    }
    case 'postgres_restart':
      await servers.postgres.stopServer('immediate');
      await sleep(f.holdMs);
      await servers.postgres.startServer();
      return `postgres :${servers.postgres.port}`;
    case 'pgbouncer_restart':
      await servers.bouncer.restart(f.holdMs);
      return `pgbouncer :${servers.bouncer.port}`;
  }
}

export class FaultPlayer {
  readonly done: FaultRecord[] = [];
  private stopped = false;

  constructor(
    private readonly schedule: Fault[],
    private readonly servers: SoakServers,
    private readonly replicas: SoakReplica[],
    private readonly log: (line: string) => void,
  ) {}

  /** Plays every fault at its time after `t0`, one after the other (a late one starts when the previous is over). */
  async play(t0: number): Promise<void> {
    for (const f of this.schedule) {
      const wait = t0 + f.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      if (this.stopped) return;
      const startedAt = Date.now();
      this.log(`fault at +${((startedAt - t0) / 1000).toFixed(1)} s: ${f.kind}${f.replica === undefined ? '' : ` replica ${f.replica}`} (hold ${f.holdMs} ms)`);
      let target = '';
      let error: string | undefined;
      try {
        target = await inject(f, this.servers, this.replicas);
      } catch (err) {
        error = (err as Error).message;
        this.log(`  fault ${f.kind} failed: ${error}`);
      }
      this.done.push({ ...f, startedAt, endedAt: Date.now(), target, error });
    }
  }

  stop(): void {
    this.stopped = true;
  }
}
