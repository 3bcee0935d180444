import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { fmtTime } from './ui';

const COLORS = ['#3b82f6', '#ef4444', '#10b981', '#f59e0b', '#8b5cf6', '#ec4899', '#14b8a6', '#64748b'];

/** The x range shown. Never let uPlot guess one from a single point (it spans years): a short span is padded to minutes. */
function xSpan(x: number[], xRange?: [number, number]): [number, number] {
  if (xRange) return xRange;
  const lo = x.length ? Math.min(...x) : 0;
  const hi = x.length ? Math.max(...x) : 0;
  const pad = Math.max(60, (hi - lo) * 0.05);
  return [lo - pad, hi + pad];
}

/** A uPlot line chart; x is Unix seconds. `points` draws a points-only series (outcomes), in the series' own colour. */
export function Chart({
  title,
  x,
  series,
  height = 220,
  xRange,
}: {
  title: string;
  x: number[];
  series: { label: string; values: (number | null)[]; points?: boolean; color?: string }[];
  height?: number;
  xRange?: [number, number];
}) {
  const el = useRef<HTMLDivElement>(null);
  const span = xSpan(x, xRange);
  useEffect(() => {
    if (!el.current) return;
    const width = Math.max(320, el.current.clientWidth || 640);
    const plot = new uPlot(
      {
        title,
        width,
        height,
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label,
            stroke: s.color ?? COLORS[i % COLORS.length],
            width: 2,
            points: { show: true, size: 6 },
            ...(s.points ? { paths: () => null, points: { show: true, size: 8, fill: s.color ?? COLORS[i % COLORS.length] } } : {}),
          })),
        ],
        scales: { x: { time: true, range: () => span } },
        // The console's one time format on the axis too (HH:MM:SS, or the date when the span is days).
        axes: [
          { stroke: 'currentColor', values: (_u, splits) => splits.map((v) => (span[1] - span[0] > 2 * 86400 ? fmtTime(new Date(v * 1000)).slice(0, 10) : fmtTime(new Date(v * 1000)).slice(11))) },
          { stroke: 'currentColor' },
        ],
      },
      [x, ...series.map((s) => s.values)] as uPlot.AlignedData,
      el.current,
    );
    return () => plot.destroy();
  }, [title, JSON.stringify(x), JSON.stringify(series), height, span[0], span[1]]);
  return <figure class="chart" role="img" aria-label={title} data-x-range={`${span[0]} ${span[1]}`} ref={el} />;
}
