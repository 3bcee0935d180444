import { formatDuration } from '../../../config/duration.js';
import { Schedule } from '../../../scheduler/schedule.js';
import { isUtcZone } from '../../../time/zones.js';
import { combine, fail, ok, otherLiveReplicas, warn, type CheckOutcome, type DoctorCheck } from '../check.js';

const FIX_SKEW = 'run NTP (chronyd or systemd-timesyncd) on every host; slots use the database clock, and cluster.max_clock_skew bounds the rest';

/** Clock skew of every live replica against the database clock (from its beats), this one measured now. */
export const clockSkew: DoctorCheck = {
  name: 'clock_skew',
  group: 'clock',
  modes: ['cluster'],
  async run(ctx) {
    const { config, facts, nowMs, replica } = ctx;
    const max = config.cluster.max_clock_skew;
    // The others as their beats reported them; this process measured now: a replica as one of them, a
    // one-shot command (`relay-jobs doctor`, before `relay-jobs run`) as this host, not counted as a replica.
    const others = otherLiveReplicas(ctx);
    const checked = new Map<string, number>();
    for (const i of others) if (i.clock_skew_ms !== null) checked.set(i.instance_id, i.clock_skew_ms);
    const unreported = others.length - checked.size;
    const own = nowMs - (await facts.dbNowMs());
    checked.set(replica ? config.instance.id : `this host (${config.instance.id}, not a replica)`, own);
    const findings: CheckOutcome[] = [];
    for (const [id, s] of checked) {
      const text = `${id} ${Math.round(s)}ms`;
      if (Math.abs(s) > max) findings.push(fail(`${text} off the database clock (over cluster.max_clock_skew ${formatDuration(max)})`, FIX_SKEW));
      else if (Math.abs(s) > max / 2) findings.push(warn(`${text} off the database clock (over half of cluster.max_clock_skew ${formatDuration(max)})`, FIX_SKEW));
    }
    const worstMs = Math.max(...[...checked.values()].map(Math.abs));
    const count = others.length + (replica ? 1 : 0);
    const more = unreported ? `, ${unreported} not reported yet (each does at its next beat)` : '';
    const host = replica ? '' : `, this host ${Math.round(own)}ms (not a replica)`;
    return combine(findings, ok(`${count} live replica(s)${more}${host}, worst skew ${Math.round(worstMs)}ms (limit ${formatDuration(max)})`, FIX_SKEW));
  },
};

const HOUR = 3_600_000;

/**
 * Whether a zone observes daylight saving (its offset differs between January and July). UTC, every
 * job's default, does not: answered without loading ICU's zone data (src/time/zones.ts).
 */
function observesDst(tz: string, year: number): boolean {
  if (isUtcZone(tz)) return false;
  const offset = (month: number) =>
    new Intl.DateTimeFormat('en-US', { timeZone: tz, timeZoneName: 'longOffset' }).formatToParts(Date.UTC(year, month, 1)).find((p) => p.type === 'timeZoneName')?.value;
  return offset(0) !== offset(6);
}

function localHour(t: number, tz: string): number {
  return Number(new Intl.DateTimeFormat('en-US', { timeZone: tz, hour: 'numeric', hourCycle: 'h23' }).format(t));
}

/**
 * Time zone of cron jobs: a cron firing between 00:00 and 03:59 local time in a zone with daylight
 * saving skips or repeats a slot on the switch nights; the zones in use are listed.
 */
export const cronTimezones: DoctorCheck = {
  name: 'cron_timezones',
  group: 'clock',
  modes: ['cluster', 'embedded'],
  async run({ jobs, nowMs }) {
    const crons = jobs.filter((j) => j.settings.enabled && j.settings.schedule.kind === 'cron');
    const zones = new Map<string, string[]>();
    const findings: CheckOutcome[] = [];
    for (const j of crons) {
      const spec = j.settings.schedule as { kind: 'cron'; expr: string; timezone: string };
      const tz = spec.timezone;
      zones.set(tz, [...(zones.get(tz) ?? []), j.name]);
      if (!observesDst(tz, new Date(nowMs).getUTCFullYear())) continue;
      const s = new Schedule(j.settings.schedule);
      let t = nowMs;
      for (let n = 0; n < 200 && t < nowMs + 48 * HOUR; n++) {
        t = s.next(t);
        if (localHour(t, tz) <= 3) {
          findings.push(
            warn(
              `${j.name} runs at ${new Intl.DateTimeFormat('en-GB', { timeZone: tz, hour: '2-digit', minute: '2-digit' }).format(t)} ${tz}, a zone with daylight saving: a switch night skips or repeats that slot`,
              `set jobs.${j.name}.timezone: UTC, or move jobs.${j.name}.cron out of 00:00-03:59`,
            ),
          );
          break;
        }
      }
    }
    const list = [...zones].map(([tz, names]) => `${tz} (${names.length})`).join(', ');
    return combine(findings, ok(crons.length ? `cron jobs in ${list}` : 'no cron jobs enabled', 'set jobs.<name>.timezone where a cron job must follow local time'));
  },
};
