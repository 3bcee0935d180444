import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api } from '../api';
import { onLive } from '../live';
import { Legend, outcomeColor } from '../status';
import { duration, fmtTime } from '../ui';

const WINDOWS = [
  ['5m', 5 * 60_000],
  ['15m', 15 * 60_000],
  ['1h', 3_600_000],
  ['6h', 6 * 3_600_000],
  ['24h', 24 * 3_600_000],
] as const;
const LABEL_W = 170;
const LANE_H = 40;
const TOP = 34;

interface Round {
  id: number;
  job_name: string;
  slot: string;
  instance_id: string;
  status: string;
  trigger: string;
  lock_backend: string | null;
  fencing_token: number | null;
  started_at: string;
  finished_at: string | null;
  duration_ms: number | null;
  note: string | null;
  error: string | null;
}

function tip(r: Round): string {
  return [
    `${r.job_name} · ${r.status}${r.trigger === 'manual' ? ' (run by hand)' : ''}`,
    `slot ${fmtTime(r.slot)}`,
    `ran on ${r.instance_id}, ${fmtTime(r.started_at)}${r.duration_ms != null ? ` for ${duration(r.duration_ms)}` : ''}`,
    `lock ${r.lock_backend ?? '—'} · fencing token ${r.fencing_token ?? '—'}`,
    r.error ?? r.note ?? '',
  ]
    .filter(Boolean)
    .join('\n');
}

/** Every round drawn where (the replica's lane) and when (its start to its end) it ran; a failover is a switch of lanes. */
export function Timeline() {
  const [win, setWin] = useState<(typeof WINDOWS)[number]>(WINDOWS[1]);
  const [job, setJob] = useState('');
  const [data, setData] = useState<any>(null);
  const [error, setError] = useState<string | null>(null);
  const [now, setNow] = useState(Date.now());
  const rounds = useRef(new Map<number, Round>());
  const [, setVersion] = useState(0);
  const box = useRef<HTMLDivElement>(null);
  const [width, setWidth] = useState(1100);

  const load = async () => {
    try {
      const d = await api(`/timeline?since=${win[0]}`);
      rounds.current = new Map(d.rounds.map((r: Round) => [r.id, r]));
      setData(d);
      setError(null);
      setVersion((v) => v + 1);
    } catch (e) {
      setError((e as Error).message);
    }
  };
  useEffect(() => {
    setData(null);
    void load();
    let refetch: ReturnType<typeof setTimeout> | undefined;
    // A pushed round is drawn at once; the lanes and missed slots are re-read a little later.
    const off = onLive((event, d) => {
      if (event === 'rounds') {
        for (const r of d.rounds as Round[]) rounds.current.set(r.id, r);
        setVersion((v) => v + 1);
      }
      if (event !== 'hello' && !refetch) refetch = setTimeout(() => ((refetch = undefined), void load()), event === 'instances' ? 200 : 5000);
    });
    const tick = setInterval(() => setNow(Date.now()), 1000);
    return () => {
      off();
      clearInterval(tick);
      if (refetch) clearTimeout(refetch);
    };
  }, [win[0]]);
  useEffect(() => {
    const f = () => box.current && setWidth(Math.max(600, box.current.clientWidth));
    f();
    addEventListener('resize', f);
    return () => removeEventListener('resize', f);
  }, [data !== null]);

  const lanes: any[] = data?.lanes ?? [];
  const shown = useMemo(() => [...rounds.current.values()].filter((r) => !job || r.job_name === job), [data, job, rounds.current.size, now]);
  if (error && !data)
    return (
      <>
        <h1>Timeline</h1>
        <p class="error" role="alert">
          Could not load: {error}
        </p>
      </>
    );
  const t1 = now;
  const t0 = t1 - win[1];
  const plotW = width - LABEL_W - 10;
  const x = (t: number) => LABEL_W + Math.max(0, Math.min(plotW, ((t - t0) / (t1 - t0)) * plotW));
  const laneOf = new Map(lanes.map((l, i) => [l.instance_id, i]));
  const height = TOP + Math.max(1, lanes.length) * LANE_H + 24;
  const ticks = Array.from({ length: 7 }, (_, i) => t0 + (i * (t1 - t0)) / 6);
  const jobs: string[] = [...new Set<string>((data?.jobs ?? []).map((j: any) => j.name))];
  const missed: any[] = (data?.missed ?? []).filter((m: any) => !job || m.job === job);
  const skips: any[] = (data?.skips ?? []).filter((s: any) => !job || s.job_name === job);
  return (
    <>
      <h1>Timeline</h1>
      <p class="muted">
        One lane per replica; each round is drawn on the replica that ran it, from its start to its end. When a replica dies its lane stops and the next slot appears on another lane: that switch is
        the failover. Hover a round for its job, slot, outcome, lock backend and fencing token.
      </p>
      <div class="filters">
        <label>
          Window{' '}
          <select value={win[0]} onChange={(e) => setWin(WINDOWS.find((w) => w[0] === (e.target as HTMLSelectElement).value)!)}>
            {WINDOWS.map((w) => (
              <option key={w[0]} value={w[0]}>
                last {w[0]}
              </option>
            ))}
          </select>
        </label>
        <label>
          Job{' '}
          <select value={job} onChange={(e) => setJob((e.target as HTMLSelectElement).value)}>
            <option value="">all jobs</option>
            {jobs.map((j) => (
              <option key={j} value={j}>
                {j}
              </option>
            ))}
          </select>
        </label>
        {data?.truncated && <span class="muted small">the newest {data.rounds.length} rounds of the window are shown</span>}
      </div>
      <Legend extra={[{ label: 'missed slot', color: '#dc2626', means: 'a slot of a cluster job that no replica ran', shape: 'tick' }]} />
      {!data ? (
        <p class="muted" role="status">
          Loading…
        </p>
      ) : (
        <div class="timeline" ref={box}>
          <svg width={width} height={height} role="img" aria-label="Rounds by replica over time">
            {ticks.map((t, i) => (
              <g key={t}>
                <line class="grid" x1={x(t)} x2={x(t)} y1={TOP - 6} y2={height - 20} />
                <text class="axis" x={x(t)} y={height - 6} text-anchor={i === ticks.length - 1 ? 'end' : 'middle'}>
                  {fmtTime(new Date(t).toISOString()).slice(11)}
                </text>
              </g>
            ))}
            <text class="lane-label" x={4} y={TOP - 14}>
              missed slots
            </text>
            {missed.map((m) => (
              <line key={`${m.job}-${m.slot}`} data-missed={m.job} x1={x(Date.parse(m.slot))} x2={x(Date.parse(m.slot))} y1={TOP - 26} y2={TOP - 10} stroke="#dc2626" stroke-width={2}>
                <title>{`${m.job}: slot ${fmtTime(m.slot)} ran nowhere`}</title>
              </line>
            ))}
            {lanes.map((l, i) => {
              const y = TOP + i * LANE_H;
              const end = l.alive ? null : Date.parse(l.stopped_at ?? l.heartbeat_at ?? '');
              const skipped = skips.filter((s) => s.instance_id === l.instance_id).reduce((n, s) => n + s.skipped, 0);
              return (
                <g key={l.instance_id} role="group" aria-label={`replica ${l.instance_id}`} data-instance={l.instance_id} data-alive={String(l.alive)}>
                  <line class="grid" x1={LABEL_W} x2={LABEL_W + plotW} y1={y + LANE_H - 4} y2={y + LANE_H - 4} />
                  <text class="lane-label" x={4} y={y + 16}>
                    {l.instance_id}
                  </text>
                  <text class="axis" x={4} y={y + 30}>
                    {l.alive ? 'alive' : l.stopped_at ? 'stopped' : 'gone (no heartbeat)'}
                    {skipped ? ` · ${skipped} skipped` : ''}
                  </text>
                  {end && end > t0 && (
                    <line x1={x(end)} x2={x(end)} y1={y + 2} y2={y + LANE_H - 6} stroke="#dc2626" stroke-dasharray="3 2">
                      <title>{`${l.instance_id}: last heartbeat ${fmtTime(l.heartbeat_at)}${l.stopped_at ? `, stopped ${fmtTime(l.stopped_at)}` : ''}`}</title>
                    </line>
                  )}
                  {shown
                    .filter((r) => r.instance_id === l.instance_id && laneOf.has(r.instance_id))
                    .map((r) => {
                      const s = Date.parse(r.started_at);
                      const e = r.finished_at ? Date.parse(r.finished_at) : now;
                      if (e < t0) return null;
                      const skip = r.status === 'skipped_not_leader';
                      return (
                        <rect
                          key={r.id}
                          class="round"
                          data-job={r.job_name}
                          data-status={r.status}
                          data-started={r.started_at}
                          data-token={r.fencing_token ?? ''}
                          x={x(s)}
                          y={y + 4}
                          width={Math.max(3, x(e) - x(s))}
                          height={LANE_H - 12}
                          rx={2}
                          fill={skip ? 'none' : outcomeColor(r.status)}
                          stroke={skip ? outcomeColor(r.status) : 'none'}
                          fill-opacity={0.85}
                        >
                          <title>{tip(r)}</title>
                        </rect>
                      );
                    })}
                </g>
              );
            })}
          </svg>
        </div>
      )}
    </>
  );
}
