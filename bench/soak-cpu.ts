/**
 * CPU by component of the soak, from Linux /proc: the replicas, the private PostgreSQL (its
 * postmaster, its live backends and the backends it reaped), the Redis set (servers and sentinels),
 * PgBouncer, and this process (load generator and fakes). What saturates first on a loaded 2-core
 * machine shows as the component whose share nears a core while its work falls behind.
 */
import { readFileSync, readdirSync } from 'node:fs';

export type Component = 'replicas' | 'postgres' | 'redis' | 'pgbouncer' | 'harness';
export type Ticks = Record<Component, number>;

interface Proc {
  pid: number;
  ppid: number;
  self: number;
  reaped: number;
  cmd: string;
}

function procs(): Proc[] {
  const out: Proc[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      out.push({ pid: Number(pid), ppid: Number(f[1]), self: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]), cmd });
    } catch {
      // gone while read
    }
  }
  return out;
}

/** Cumulative CPU ticks (1/100 s) of each component now. */
export function cpuTicks(o: { replicaPids: number[]; pgPort: number; redisPorts: number[] }): Ticks {
  const all = procs();
  const t: Ticks = { replicas: 0, postgres: 0, redis: 0, pgbouncer: 0, harness: 0 };
  const replicaSet = new Set(o.replicaPids);
  const postmaster = all.find((p) => /\/postgres\s/.test(p.cmd) && p.cmd.includes(` -p ${o.pgPort} `));
  const redisRe = new RegExp(`(--port (${o.redisPorts.join('|')})\\b)|sentinel-(${o.redisPorts.join('|')})\\.conf`);
  for (const p of all) {
    if (replicaSet.has(p.pid)) t.replicas += p.self;
    else if (p.pid === process.pid) t.harness += p.self;
    else if (postmaster && p.pid === postmaster.pid) t.postgres += p.self + p.reaped;
    else if (postmaster && p.ppid === postmaster.pid) t.postgres += p.self;
    else if (/redis-(server|sentinel)/.test(p.cmd) && redisRe.test(p.cmd)) t.redis += p.self;
    else if (p.cmd.includes('pgbouncer') && p.cmd.includes('rj-soak-bouncer')) t.pgbouncer += p.self;
  }
  return t;
}

/** Mean share of one core per component between two readings (a component whose ticks fell, a restart, counts from 0). */
export function cpuShare(a: Ticks, b: Ticks, secs: number): Record<Component, number> {
  const out = {} as Record<Component, number>;
  for (const k of Object.keys(a) as Component[]) out[k] = (Math.max(0, b[k] - a[k]) / 100 / secs) * 100;
  return out;
}
