import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

const COLORS = ['#3b82f6', '#ef4444', '#10b981', '#f59e0b', '#8b5cf6', '#ec4899', '#14b8a6', '#64748b'];

/** A uPlot line chart; x is Unix seconds. `bars` draws points-only series for outcomes. */
export function Chart({
  title,
  x,
  series,
  height = 220,
  xRange,
}: {
  title: string;
  x: number[];
  series: { label: string; values: (number | null)[]; points?: boolean }[];
  height?: number;
  xRange?: [number, number];
}) {
  const el = useRef<HTMLDivElement>(null);
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
            stroke: COLORS[i % COLORS.length],
            width: 2,
            points: { show: true, size: 6 },
            ...(s.points ? { paths: () => null, points: { show: true, size: 8 } } : {}),
          })),
        ],
        scales: { x: { time: true, ...(xRange ? { range: () => xRange } : {}) } },
        axes: [{ stroke: 'currentColor' }, { stroke: 'currentColor' }],
      },
      [x, ...series.map((s) => s.values)] as uPlot.AlignedData,
      el.current,
    );
    return () => plot.destroy();
  }, [title, JSON.stringify(x), JSON.stringify(series), height, xRange?.[0], xRange?.[1]]);
  return <figure class="chart" role="img" aria-label={title} ref={el} />;
}
