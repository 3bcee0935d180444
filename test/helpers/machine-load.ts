// vitest global setup, active only with RELAY_TEST_CPU_DIR (the opt-in cost report of
// cpu-probe.ts): what the whole machine spent during the run, and on what besides the run. The
// suite is bound by CPU on two cores, so a run's wall time depends on what else the machine does:
// on 4-Dec-2026 the machine's own processes (a kernel memory monitor, other servers installed on
// it, the sandbox's agent) took from a tenth to a quarter of the two cores during a full run
// (60-180 of 610-700 busy CPU seconds) while using about 1% of a core when it was idle. Two readings of /proc, at the start and at the end; a process
// that lived through both is measured exactly, one that came and went in between (every replica,
// CLI run and PostgreSQL backend) is inside the machine's total and its parent's reaped time.
// Writes machine.json beside the per-file reports; scripts/test-cost.mjs prints it.
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';

/** One process's CPU counters from `/proc/<pid>/stat` (Linux; throws elsewhere or once it has ended). */
export interface ProcStat {
  /** The kernel's name for it (`comm`, e.g. a kernel thread's). */
  comm: string;
  /** Its start time: with the pid, what tells a reused pid from the process before. */
  startTime: string;
  /** Its own user + system ticks. */
  self: number;
  /** Ticks of the children it waited for (a PostgreSQL postmaster's exited backends, a test worker's replicas). */
  reaped: number;
  /** Minor page faults so far (bench/startup.ts). */
  minorFaults: number;
  /** Minor page faults of the children it waited for. */
  reapedMinorFaults: number;
  /** Resident set, in pages of 4 KiB. */
  rssPages: number;
}

/** Ticks per second of /proc's counters (USER_HZ; 100 on Linux). */
export const HZ = 100;

export function readStat(pid: string): ProcStat {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The name sits in parentheses and may itself hold ") ": the fields start after the last one.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return {
    comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
    startTime: f[19]!,
    self: Number(f[11]) + Number(f[12]),
    reaped: Number(f[13]) + Number(f[14]),
    minorFaults: Number(f[7]),
    reapedMinorFaults: Number(f[8]),
    rssPages: Number(f[21]),
  };
}

function readProcs(): Map<string, ProcStat & { name: string }> {
  const out = new Map<string, ProcStat & { name: string }>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const st = readStat(pid);
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      out.set(`${pid}:${st.startTime}`, { ...st, name: (cmd || `[${st.comm}]`).slice(0, 80) });
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
  let before: ReturnType<typeof readProcs>;
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
    const lived: Array<{ name: string; cpu_s: number; minor_faults: number }> = [];
    for (const [key, b] of before) {
      const a = after.get(key);
      if (!a || key.startsWith(self)) continue;
      const cpu = (a.self + a.reaped - b.self - b.reaped) / HZ;
      const faults = a.minorFaults + a.reapedMinorFaults - b.minorFaults - b.reapedMinorFaults;
      if (cpu >= 0.5) lived.push({ name: a.name, cpu_s: cpu, minor_faults: faults });
    }
    lived.sort((x, y) => y.cpu_s - x.cpu_s);
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, 'machine.json'),
      JSON.stringify({
        wall_s: wallS,
        cpus: cpus().length,
        busy_cpu_s: (busyTicks() - busy0) / HZ,
        processes_alive_throughout: lived.slice(0, 15),
      }),
    );
  };
}
