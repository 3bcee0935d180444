import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { settledWithin } from '../../src/time/clock.js';

/** The CLI as built by test/helpers/build-cli.ts (vitest global setup), apart from the dist/ a running service uses. */
export const CLI = fileURLToPath(new URL('../../.test-dist/cli/main.js', import.meta.url));

/**
 * Node flags for every process a test starts that runs relay-jobs (services, CLI runs, tsx-run
 * examples and fixtures): `--liftoff-only --no-opt --max-semi-space-size=2`. A test's process lives seconds to minutes, too
 * short for V8's background optimisation to pay back: of PGlite's WebAssembly (an embedded start's
 * CPU drops by about a third) and of JavaScript (TurboFan; 6-Dec-2026, slow machine kind: a replica's
 * start 1.06 -> 1.00 CPU s, `billing.e2e` and `token-refresh.e2e` 3-8 % less CPU in the processes they
 * start, two alternated runs each, same wall time). Only the code tier differs; what the process does
 * is the same. One-shot CLI commands set the first themselves (src/cli/main.ts); `start` under runCli
 * does not.
 * `--max-semi-space-size=2` (MB): V8's young generation is two semi-spaces, each grown up to 16 MB
 * while a process loads its modules, and every page of them is faulted in once; a test's process
 * never needs them that large.
 * 6-Dec-2026, slow kind (page fault 10-11 us): a replica's start 1.12 -> 1.01 CPU s, 19.7k -> 14.8k
 * page faults, 115 -> 95 MB resident (6 alternated starts); `config check` 0.64 -> 0.59 CPU s; the
 * processes of `billing`, `image-batches` and `token-refresh.e2e` 60 / 68 -> 55 / 67 CPU s (two
 * alternated runs; `token-refresh`'s busy replicas the same), a fifth fewer page faults. The product
 * keeps V8's own sizing: a long-lived replica under load is what the larger young generation is for.
 * `RELAY_TEST_NODE_FLAGS` adds flags of your own to every such process, to see where a file's
 * replicas spend their CPU: `--cpu-prof --cpu-prof-dir=/tmp/prof` (V8's profiles; note they sample
 * wall time, so a process preempted inside a socket write shows as time in `writev`), or
 * `--perf-basic-prof --interpreted-frames-native-stack` for `perf record -a -g` (CPU time).
 */
export const NODE_FLAGS = ['--liftoff-only', '--no-opt', '--max-semi-space-size=2', ...(process.env.RELAY_TEST_NODE_FLAGS?.split(/\s+/).filter(Boolean) ?? [])];

/** Environment for a child: the parent's PATH etc., without any RELAY_JOBS_* / DATABASE_URL / REDIS_URL / OTEL_* leaking in. */
export function cleanEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env))
    if ((!k.startsWith('RELAY_JOBS') || k === 'RELAY_JOBS_CONTRACT_CHECK') && !k.startsWith('OTEL_') && k !== 'DATABASE_URL' && k !== 'REDIS_URL') env[k] = v;
  return { ...env, ...extra };
}

/** How many relay-jobs processes this worker has started: one-shot CLI runs and services (the cost report, cpu-probe.ts). */
export const started = { cliRuns: 0, services: 0 };

export function runCli(args: string[], env: Record<string, string>, timeoutMs = 180_000): Promise<{ code: number | null; stdout: string; stderr: string }> {
  started.cliRuns++;
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [...NODE_FLAGS, CLI, ...args], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    const t = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`relay-jobs ${args.join(' ')} did not exit within ${timeoutMs}ms\n${stdout}\n${stderr}`));
    }, timeoutMs);
    // 'close', not 'exit': 'exit' can come before the last of the child's output is read (a loaded
    // run once saw a failed `config check` with its error message still unread).
    p.on('close', (code) => {
      clearTimeout(t);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A `relay-jobs start` child with its log lines collected. */
export class ServiceProcess {
  readonly lines: string[] = [];
  readonly exited: Promise<number | null>;
  constructor(
    readonly name: string,
    readonly proc: ChildProcess,
  ) {
    started.services++;
    let buf = '';
    proc.stdout!.on('data', (d) => {
      buf += d;
      const parts = buf.split('\n');
      buf = parts.pop()!;
      this.lines.push(...parts);
    });
    proc.stderr!.on('data', (d) => this.lines.push(`[stderr] ${d}`));
    // After the output is read to the end (see runCli); a service's own children never hold its stdio.
    this.exited = new Promise((resolve) => proc.on('close', (code) => resolve(code)));
  }

  /** `relay-jobs start` with the tests' NODE_FLAGS. */
  static start(name: string, env: Record<string, string>): ServiceProcess {
    return new ServiceProcess(name, spawn(process.execPath, [...NODE_FLAGS, CLI, 'start'], { env: cleanEnv(env), stdio: ['ignore', 'pipe', 'pipe'] }));
  }

  /**
   * The exit code once the process has exited. Past `timeoutMs` it is SIGKILLed and this throws with
   * its last log lines: a shutdown that hangs names the rung it waits for (the ladder logs it every
   * 10 s) instead of using up the test's whole limit in silence.
   */
  async exitedWithin(timeoutMs = 120_000): Promise<number | null> {
    if (!(await settledWithin(this.exited, timeoutMs))) {
      this.proc.kill('SIGKILL');
      throw new Error(`${this.name} did not exit within ${timeoutMs} ms:\n${this.lines.slice(-40).join('\n')}`);
    }
    return this.exited;
  }

  async waitForLine(pattern: RegExp, timeoutMs = 180_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    // Each line is tested once: a chatty replica's log grows to thousands of lines.
    for (let scanned = 0; ;) {
      for (; scanned < this.lines.length; scanned++) if (pattern.test(this.lines[scanned]!)) return this.lines[scanned]!;
      if (Date.now() > deadline) throw new Error(`${this.name}: no log line matching ${pattern} within ${timeoutMs}ms:\n${this.lines.slice(-20).join('\n')}`);
      if (this.proc.exitCode !== null) throw new Error(`${this.name} exited with ${this.proc.exitCode}:\n${this.lines.slice(-20).join('\n')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
