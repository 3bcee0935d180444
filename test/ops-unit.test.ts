import { describe, expect, it } from 'vitest';
import { step, silencedBy, breaches, atLeast, type AlertState, type RuleSpec, type Silence } from '../src/areas/ops/alert-logic.js';
import { fold, percentile, bucketStart } from '../src/areas/ops/catalogue.js';
import { cronProblem, nextOccurrences, occurrencesBetween, previousOccurrence } from '../src/areas/ops/report-schedule.js';
import { chooseGranularity } from '../src/areas/ops/granularity.js';

const MIN = 60_000;
const rule: RuleSpec = { id: 7, name: 'errors-high', metric: 'error_rate', operator: '>', threshold: 0.1, sustained: 3, cooldownMs: 5 * MIN, severity: 'critical', labels: { team: 'relay' } };
const fresh: AlertState = { streak: 0, lastBucket: null, firing: false, resolvedAt: null };

/** Feeds (bucket minute, value) observations through the state machine, returning the transitions. */
function run(values: Array<[number, number | null]>, r = rule, start = fresh) {
  let s = start;
  const out: string[] = [];
  for (const [m, v] of values) {
    const x = step(r, s, { bucket: m * MIN, value: v }, m * MIN + 30_000);
    s = x.state;
    out.push(x.transition);
  }
  return { state: s, transitions: out };
}

describe('alert state machine', () => {
  it('fires after `sustained` breaches in a row, exactly once, and resolves once', () => {
    const { transitions, state } = run([
      [1, 0.5],
      [2, 0.5],
      [3, 0.5],
      [4, 0.5],
      [5, 0.01],
      [6, 0.01],
    ]);
    expect(transitions).toEqual(['none', 'none', 'fire', 'none', 'resolve', 'none']);
    expect(state.firing).toBe(false);
  });

  it('a breach-free bucket restarts the streak', () => {
    expect(
      run([
        [1, 0.5],
        [2, 0.5],
        [3, 0.05],
        [4, 0.5],
        [5, 0.5],
        [6, 0.5],
      ]).transitions,
    ).toEqual(['none', 'none', 'none', 'none', 'none', 'fire']);
  });

  it('an unknown value resets the streak and never resolves', () => {
    expect(
      run([
        [1, 0.5],
        [2, null],
        [3, 0.5],
        [4, 0.5],
        [5, 0.5],
      ]).transitions,
    ).toEqual(['none', 'none', 'none', 'none', 'fire']);
    const firing = run([
      [1, 0.5],
      [2, 0.5],
      [3, 0.5],
    ]).state;
    const after = step(rule, firing, { bucket: null, value: null }, 4 * MIN);
    expect(after.transition).toBe('none');
    expect(after.state.firing).toBe(true);
    expect(after.state.streak).toBe(0);
  });

  it('the same bucket observed twice counts once (a re-run after a crash does not double the streak)', () => {
    let s = fresh;
    for (let i = 0; i < 5; i++) s = step(rule, s, { bucket: MIN, value: 0.5 }, MIN).state;
    expect(s.streak).toBe(1);
    const older = step(rule, s, { bucket: 0, value: 0.5 }, MIN);
    expect(older.state).toBe(s);
  });

  it('cooldown after resolve holds a new firing until it has passed', () => {
    const r = { ...rule, sustained: 1 };
    // fire at 1, resolve at 2 (resolvedAt = 2.5 min), breach again at 3..8: cooldown ends at 7.5 min.
    const { transitions } = run(
      [
        [1, 0.5],
        [2, 0.0],
        [3, 0.5],
        [4, 0.5],
        [5, 0.5],
        [6, 0.5],
        [7, 0.5],
        [8, 0.5],
      ],
      r,
    );
    expect(transitions).toEqual(['fire', 'resolve', 'none', 'none', 'none', 'none', 'fire', 'none']);
  });

  it('operators', () => {
    expect([breaches(2, '>', 1), breaches(1, '>', 1), breaches(1, '>=', 1), breaches(0, '<', 1), breaches(1, '<=', 1), breaches(1, '==', 1), breaches(2, '!=', 1)]).toEqual([
      true,
      false,
      true,
      true,
      true,
      true,
      true,
    ]);
    expect(atLeast('critical', 'warning')).toBe(true);
    expect(atLeast('info', 'warning')).toBe(false);
  });
});

describe('silence matching', () => {
  const t0 = Date.parse('2026-11-30T10:00:00Z');
  const sil = (x: Partial<Silence>): Silence => ({ id: 1, rule_id: null, matchers: {}, starts_at: '2026-11-30T09:00:00Z', ends_at: '2026-11-30T11:00:00Z', ...x });
  it('by rule id, by every label matcher, only while active', () => {
    expect(silencedBy(rule, [sil({ rule_id: 7 })], t0)?.id).toBe(1);
    expect(silencedBy(rule, [sil({ rule_id: 8 })], t0)).toBeNull();
    expect(silencedBy(rule, [sil({ matchers: { team: 'relay' } })], t0)?.id).toBe(1);
    expect(silencedBy(rule, [sil({ matchers: { team: 'relay', severity: 'critical', alertname: 'errors-high' } })], t0)?.id).toBe(1);
    expect(silencedBy(rule, [sil({ matchers: { team: 'relay', severity: 'warning' } })], t0)).toBeNull();
    expect(silencedBy(rule, [sil({ rule_id: 7, matchers: { team: 'other' } })], t0)).toBeNull();
    expect(silencedBy(rule, [sil({})], t0)).toBeNull();
    expect(silencedBy(rule, [sil({ rule_id: 7 })], Date.parse('2026-11-30T11:00:00Z'))).toBeNull();
    expect(silencedBy(rule, [sil({ rule_id: 7 })], Date.parse('2026-11-30T08:59:59Z'))).toBeNull();
  });
});

describe('series folding and percentiles', () => {
  it('rates divide sums (each request weighs once), per-second over the window, last for states', () => {
    const b = [
      { metrics: { request_count: 100, error_count: 0, accounts_error: 1, p95_latency_ms: 200 } },
      { metrics: { request_count: 10, error_count: 10, accounts_error: 4, p95_latency_ms: 900 } },
    ];
    expect(fold('error_rate', b, 60)).toBeCloseTo(10 / 110);
    expect(fold('qps', b, 60)).toBeCloseTo(110 / 120);
    expect(fold('accounts_error', b, 60)).toBe(4);
    expect(fold('p95_latency_ms', b, 60)).toBe(900);
    expect(fold('error_rate', [], 60)).toBeNull();
    expect(fold('error_rate', [{ metrics: { request_count: 0, error_count: 0 } }], 60)).toBe(0);
    expect(fold('p95_latency_ms', [{ metrics: { p95_latency_ms: null } }], 60)).toBeNull();
  });

  it('percentile matches a reference (nearest-rank bracket, linear interpolation)', () => {
    const xs = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 1000).sort((a, b) => a - b);
    expect(percentile(xs, 0.5)).toBeCloseTo(499.5);
    expect(percentile(xs, 0.95)).toBeCloseTo(949.05);
    expect(percentile(xs, 0.99)).toBeCloseTo(989.01);
    expect(percentile([5], 0.99)).toBe(5);
    expect(percentile([], 0.5)).toBeNull();
  });

  it('buckets align to the grid; long ranges pick rollups', () => {
    expect(bucketStart(Date.parse('2026-11-30T10:00:59.999Z'), MIN)).toBe(Date.parse('2026-11-30T10:00:00Z'));
    expect(bucketStart(Date.parse('2026-11-30T10:00:07.5Z'), 5000)).toBe(Date.parse('2026-11-30T10:00:05Z'));
    const at = (h: number) => ({ from: new Date(0), to: new Date(h * 3_600_000) });
    expect(chooseGranularity(at(6).from, at(6).to).granularity).toBe('minute');
    expect(chooseGranularity(at(7).from, at(7).to).granularity).toBe('hour');
    expect(chooseGranularity(at(24 * 15).from, at(24 * 15).to).granularity).toBe('day');
  });
});

describe('report occurrences (croner, time zones)', () => {
  it('a daily 09:00 in Europe/Berlin moves from 08:00 to 07:00 UTC across the end of DST', () => {
    const occ = occurrencesBetween('0 9 * * *', 'Europe/Berlin', new Date('2026-10-23T00:00:00Z'), new Date('2026-10-28T00:00:00Z')).map((d) => d.toISOString());
    expect(occ).toEqual(['2026-10-23T07:00:00.000Z', '2026-10-24T07:00:00.000Z', '2026-10-25T08:00:00.000Z', '2026-10-26T08:00:00.000Z', '2026-10-27T08:00:00.000Z']);
  });

  it('a 02:30 local time that does not exist on the spring-forward day fires once that day, not twice or never after', () => {
    const occ = occurrencesBetween('30 2 * * *', 'Europe/Berlin', new Date('2026-03-27T12:00:00Z'), new Date('2026-03-31T12:00:00Z')).map((d) => d.toISOString());
    expect(new Set(occ).size).toBe(occ.length);
    expect(occ[0]).toBe('2026-03-28T01:30:00.000Z');
    expect(occ.at(-1)).toBe('2026-03-31T00:30:00.000Z');
    expect(occ.length).toBeGreaterThanOrEqual(3);
  });

  it('only the newest missed occurrence is due; the list is capped; a long downtime still finds the newest', () => {
    const occ = occurrencesBetween('* * * * *', 'UTC', new Date('2026-11-30T00:00:00Z'), new Date('2026-11-30T05:00:30Z'), 10);
    expect(occ).toHaveLength(10);
    expect(occ[0]!.toISOString()).toBe('2026-11-30T00:01:00.000Z');
    expect(occ.at(-1)!.toISOString()).toBe('2026-11-30T05:00:00.000Z');
    const secs = occurrencesBetween('* * * * * *', 'UTC', new Date('2026-11-01T00:00:00Z'), new Date('2026-11-30T05:00:00.5Z'));
    expect(secs.at(-1)!.toISOString()).toBe('2026-11-30T05:00:00.000Z');
    expect(occurrencesBetween('0 * * * *', 'UTC', new Date('2026-11-30T05:00:00Z'), new Date('2026-11-30T05:59:59Z'))).toEqual([]);
    expect(nextOccurrences('0 9 * * *', 'Asia/Shanghai', new Date('2026-11-30T00:00:00Z'), 2).map((d) => d.toISOString())).toEqual(['2026-11-30T01:00:00.000Z', '2026-12-01T01:00:00.000Z']);
    expect(previousOccurrence('0 * * * *', 'UTC', new Date('2026-11-30T05:00:00Z'))!.toISOString()).toBe('2026-11-30T04:00:00.000Z');
  });

  it('cron problems: field count, zone, never fires', () => {
    const now = new Date('2026-11-30T00:00:00Z');
    expect(cronProblem('0 9 * * *', 'Asia/Shanghai', now)).toBeNull();
    expect(cronProblem('*/5 * * * * *', 'UTC', now)).toBeNull();
    expect(cronProblem('0 9 * *', 'UTC', now)).toMatch(/5 fields/);
    expect(cronProblem('0 9 * * *', 'Mars/Olympus', now)).toMatch(/time zone/);
    expect(cronProblem('0 0 30 2 *', 'UTC', now)).toMatch(/never|Invalid|impossible|no/i);
  });
});
