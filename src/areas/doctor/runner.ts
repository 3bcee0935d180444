import type { Config } from '../../config/load.js';
import { worst, type CheckResult, type CheckStatus, type DoctorCheck, type DoctorContext } from './check.js';
import { withTimeout } from '../../time/clock.js';

export interface DoctorReport {
  status: CheckStatus;
  mode: Config['mode'];
  instance_id: string;
  checked_at: string;
  checks: CheckResult[];
}

/**
 * Runs the checks that apply to the mode, one after the other (they share the pool they are
 * judging). A check that throws or overruns `jobs.doctor.check_timeout` is a `fail` naming it:
 * a doctor that cannot look is not a doctor saying all is well.
 */
export async function runDoctor(ctx: DoctorContext, checks: readonly DoctorCheck[]): Promise<DoctorReport> {
  const results: CheckResult[] = [];
  for (const c of checks) {
    if (!c.modes.includes(ctx.config.mode)) continue;
    try {
      results.push({ name: c.name, group: c.group, ...(await withTimeout(c.run(ctx), ctx.options.checkTimeoutMs, `check ${c.name} did not finish within ${ctx.options.checkTimeoutMs}ms`)) });
    } catch (err) {
      results.push({
        name: c.name,
        group: c.group,
        status: 'fail',
        measured: `the check could not run: ${(err as Error).message.split('\n')[0]}`,
        fix: `fix what the error names, then run relay-jobs doctor again (limit jobs.doctor.check_timeout)`,
      });
    }
  }
  return { status: worst(results.map((r) => r.status)), mode: ctx.config.mode, instance_id: ctx.config.instance.id, checked_at: new Date(ctx.nowMs).toISOString(), checks: results };
}

/** 0 ok, 1 warn, 2 fail: for CI and cron. */
export function exitCode(status: CheckStatus): number {
  return status === 'fail' ? 2 : status === 'warn' ? 1 : 0;
}

/** One line per check (status, name, what was measured), the fix under every check that is not ok. */
export function renderReport(r: DoctorReport): string {
  const width = Math.max(...r.checks.map((c) => c.name.length), 10);
  const lines = r.checks.flatMap((c) => [`${c.status.padEnd(4)}  ${c.name.padEnd(width)}  ${c.measured}`, ...(c.status === 'ok' ? [] : [`${' '.repeat(width + 8)}fix: ${c.fix}`])]);
  const counts = (['ok', 'warn', 'fail'] as const).map((s) => `${r.checks.filter((c) => c.status === s).length} ${s}`).join(', ');
  return `relay-jobs doctor: ${r.mode} mode, instance ${r.instance_id}, ${r.checked_at}\n${lines.join('\n')}\n${r.status.toUpperCase()}: ${counts}\n`;
}
