// The doctor's cron_timezones check: a cron job that fires between 00:00 and 03:59 in a zone with
// daylight saving is a warning (a switch night skips or repeats that slot); the same hour in a zone
// without daylight saving, or in UTC, is not. And UTC, every job's default, is judged without
// building a single time-zone formatter (the zone data costs a process 90-160 ms of CPU to load).
import { afterEach, describe, expect, it, vi } from 'vitest';
import { cronTimezones } from '../src/areas/doctor/checks/clock.js';
import type { DoctorContext } from '../src/areas/doctor/check.js';
import { loadConfig } from '../src/app/config-schema.js';
import { buildJobs, checkJobSections } from '../src/app/registry.js';

const DAY = Date.UTC(2026, 11, 5, 12);

function check(env: Record<string, string>) {
  const config = loadConfig({ env: { RELAY_JOBS_INSTANCE_ID: 'r1', RELAY_JOBS_ENV: 'zones', ...env }, checkJobs: checkJobSections() });
  return cronTimezones.run({ jobs: buildJobs(config), config, nowMs: DAY } as unknown as DoctorContext);
}

describe('doctor: cron_timezones', () => {
  afterEach(() => vi.restoreAllMocks());

  it('UTC (the default): ok, listing the zone, and no time-zone formatter built', async () => {
    const formatter = vi.spyOn(Intl, 'DateTimeFormat');
    const r = await check({});
    expect(r.status).toBe('ok');
    expect(r.measured).toMatch(/^cron jobs in UTC \(\d+\)$/);
    const zoned = formatter.mock.calls.filter(([, opts]) => opts?.timeZone !== undefined);
    expect(zoned, 'Intl.DateTimeFormat built with a timeZone for UTC jobs').toEqual([]);
  });

  it('a job at 03:00 in a zone with daylight saving: a warning naming the job, the local time and the fix', async () => {
    const r = await check({ RELAY_JOBS__JOBS__BACKUP__TIMEZONE: 'Europe/Berlin' });
    expect(r.status).toBe('warn');
    expect(r.measured).toBe('backup runs at 03:00 Europe/Berlin, a zone with daylight saving: a switch night skips or repeats that slot');
    expect(r.fix).toBe('set jobs.backup.timezone: UTC, or move jobs.backup.cron out of 00:00-03:59');
  });

  it('the same hour in a zone without daylight saving, or moved out of the night: ok', async () => {
    const noDst = await check({ RELAY_JOBS__JOBS__BACKUP__TIMEZONE: 'Asia/Shanghai' });
    expect(noDst.status).toBe('ok');
    expect(noDst.measured).toContain('Asia/Shanghai (1)');
    const daytime = await check({ RELAY_JOBS__JOBS__BACKUP__TIMEZONE: 'Europe/Berlin', RELAY_JOBS__JOBS__BACKUP__CRON: '0 12 * * *' });
    expect(daytime.status).toBe('ok');
    expect(daytime.measured).toContain('Europe/Berlin (1)');
  });
});
