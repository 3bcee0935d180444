// vitest global setup, active only with RELAY_TEST_CPU_DIR (the opt-in cost report of
// cpu-probe.ts): what the whole machine spent during the run, and on what besides the run. The
// suite is bound by CPU on two cores, so a run's wall time depends on what else the machine does:
// on 4-Dec-2026 the machine's own processes (a kernel memory monitor, other servers installed on
// it, the sandbox's agent) took about a quarter of the two cores during a full run while using
// almost nothing when it was idle. Two readings of /proc, at the start and at the end; a process
// that lived through both is measured exactly, one that came and went in between (every replica,
// CLI run and PostgreSQL backend) is inside the machine's total and its parent's reaped time.
// Writes machine.json beside the per-file reports; scripts/test-cost.mjs prints it.
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

interface ProcReading {
  name: string;
  /** Its own user + system ticks. */
  self: number;
  /** Ticks of the children it waited for (a PostgreSQL postmaster's exited backends). */
  reaped: number;
}

/** Ticks per second of /proc's counters (USER_HZ; 100 on Linux). */
const HZ = 100;

function readProcs(): Map<string, ProcReading> {
  const out = new Map<string, ProcReading>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      const name = (cmd || `[${stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))}]`).slice(0, 80);
      // Keyed by pid and start time: a pid reused by a new process is a different process.
      out.set(`${pid}:${f[19]}`, { name, self: Number(f[11]) + Number(f[12]), reaped: Number(f[13]) + Number(f[14]) });
    } catch {
      // The process ended while being read.
    }
  }
  return out;
}

/** Busy ticks of all CPUs together (everything but idle and iowait). */
function busyTicks(): number {
  const [, ...v] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const n = v.map(Number);
  return n[0]! + n[1]! + n[2]! + n[5]! + n[6]! + n[7]!;
}

export default function setup(): (() => void) | undefined {
  const dir = process.env.RELAY_TEST_CPU_DIR;
  if (!dir) return undefined;
  let before: Map<string, ProcReading>;
  let busy0: number;
  try {
    before = readProcs();
    busy0 = busyTicks();
  } catch {
    return undefined; // not Linux: no report
  }
  const started = Date.now();
  const self = `${process.pid}:`;
  return () => {
    const after = readProcs();
    const wallS = (Date.now() - started) / 1000;
    const lived: Array<{ name: string; cpu_s: number }> = [];
    for (const [key, b] of before) {
      const a = after.get(key);
      if (!a || key.startsWith(self)) continue;
      const cpu = (a.self + a.reaped - b.self - b.reaped) / HZ;
      if (cpu >= 0.5) lived.push({ name: a.name, cpu_s: cpu });
    }
    lived.sort((x, y) => y.cpu_s - x.cpu_s);
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, 'machine.json'),
      JSON.stringify({
        wall_s: wallS,
        cpus: readFileSync('/proc/cpuinfo', 'utf8').match(/^processor\s/gm)?.length ?? 0,
        busy_cpu_s: (busyTicks() - busy0) / HZ,
        processes_alive_throughout: lived.slice(0, 15),
      }),
    );
  };
}
