import { useState } from 'preact/hooks';
import { api } from '../api';
import { Chart } from '../chart';
import { Load, Section, Table, useLive } from '../ui';

const RANGES: Record<string, { hours: number; granularity: 'hour' | 'day' }> = {
  '24h': { hours: 24, granularity: 'hour' },
  '7d': { hours: 24 * 7, granularity: 'hour' },
  '30d': { hours: 24 * 30, granularity: 'day' },
};
const METRICS = ['requests', 'input_tokens', 'output_tokens', 'cost', 'errors', 'avg_latency_ms'] as const;

function span(range: string) {
  const r = RANGES[range]!;
  const to = new Date(Math.ceil(Date.now() / 3_600_000) * 3_600_000 + 3_600_000);
  const from = new Date(to.getTime() - r.hours * 3_600_000);
  return { from: from.toISOString(), to: to.toISOString(), granularity: r.granularity };
}

export function Usage() {
  const [range, setRange] = useState('24h');
  const [group, setGroup] = useState('none');
  const [metric, setMetric] = useState<(typeof METRICS)[number]>('requests');
  const sp = span(range);
  const s = useLive(`/dashboard/usage?${new URLSearchParams({ from: sp.from, to: sp.to, granularity: sp.granularity, group_by: group })}`, 10000);
  const tasks = useLive('/usage/recompute', 2000);
  const [msg, setMsg] = useState<string | null>(null);
  const recompute = async () => {
    try {
      const t = await api('/usage/recompute', { method: 'POST', body: { from: sp.from, to: sp.to } });
      setMsg(`recompute ${t.id} requested`);
    } catch (e) {
      setMsg((e as Error).message);
    }
    void tasks.reload();
  };
  return (
    <>
      <h1>Usage</h1>
      <div class="filters">
        <label>
          Range{' '}
          <select value={range} onChange={(e) => setRange((e.target as HTMLSelectElement).value)}>
            {Object.keys(RANGES).map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
        </label>
        <label>
          Group by{' '}
          <select value={group} onChange={(e) => setGroup((e.target as HTMLSelectElement).value)}>
            {['none', 'model', 'platform', 'account', 'user'].map((g) => (
              <option key={g}>{g}</option>
            ))}
          </select>
        </label>
        <label>
          Metric{' '}
          <select value={metric} onChange={(e) => setMetric((e.target as HTMLSelectElement).value as any)}>
            {METRICS.map((m) => (
              <option key={m}>{m}</option>
            ))}
          </select>
        </label>
        <button onClick={recompute}>Recompute this range</button>
        {msg && <span role="status">{msg}</span>}
      </div>
      <Load s={s} empty={(d: any) => !d.points.length}>
        {(d: any) => {
          // Hourly buckets are filled with zeros so a quiet hour reads as zero, not as a gap.
          const seen = [...new Set<string>(d.points.map((p: any) => p.t))];
          const hours: string[] = [];
          if (d.granularity === 'hour') for (let t = Date.parse(sp.from); t < Date.parse(sp.to); t += 3_600_000) hours.push(new Date(t).toISOString());
          const xs = [...new Set([...hours, ...seen.map((t) => new Date(t).toISOString())])].sort();
          const at = (t: string) => new Date(t).toISOString();
          const keys = [...new Set<string>(d.points.map((p: any) => p.key ?? 'all'))];
          const series = keys.map((k) => ({
            label: k,
            values: xs.map((t) => {
              const p = d.points.find((q: any) => at(q.t) === t && (q.key ?? 'all') === k);
              return p ? Number(p[metric]) : metric === 'avg_latency_ms' ? null : 0;
            }),
          }));
          return (
            <Chart xRange={[Date.parse(sp.from) / 1000, Date.parse(sp.to) / 1000]} title={`Usage: ${metric} per ${d.granularity}`} x={xs.map((t) => new Date(t).getTime() / 1000)} series={series} />
          );
        }}
      </Load>
      <Section title="Recompute tasks">
        <Load s={tasks} empty={(d: any) => !d.recomputes.length}>
          {(d: any) => (
            <Table
              label="Recompute tasks"
              rows={d.recomputes}
              rowKey={(t: any) => t.id}
              cols={[
                { h: 'Id', c: (t: any) => t.id },
                { h: 'Status', c: (t: any) => t.status },
                {
                  h: 'Progress',
                  c: (t: any) => (
                    <>
                      <progress max={t.chunks} value={t.chunks_done} /> {t.chunks_done}/{t.chunks} days
                    </>
                  ),
                },
                { h: 'Range', c: (t: any) => `${t.from} → ${t.to}` },
              ]}
            />
          )}
        </Load>
      </Section>
    </>
  );
}
