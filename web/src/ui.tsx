import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import { api } from './api';
import { isLive, onLive, onLiveState } from './live';

/**
 * An API path's data, kept current by the server's push stream: loaded once, reloaded when the
 * stream reports a change (at most once a second). Only while the stream is down does it poll,
 * every `everyMs`. `{ data, error, loading, reload }`. `onPush: false` is for an expensive read (the
 * Doctor page runs every check per load): it ignores pushes and polls every `everyMs` instead.
 */
export function useLive<T = any>(path: string | null, everyMs = 5000, onPush = true) {
  const [state, setState] = useState<{ data: T | null; error: string | null; loading: boolean }>({ data: null, error: null, loading: true });
  const alive = useRef(true);
  const load = useCallback(async () => {
    if (!path) return;
    try {
      const data = await api<T>(path);
      if (alive.current) setState({ data, error: null, loading: false });
    } catch (e) {
      if (alive.current) setState((s) => ({ ...s, error: (e as Error).message, loading: false }));
    }
  }, [path]);
  useEffect(() => {
    alive.current = true;
    setState({ data: null, error: null, loading: true });
    void load();
    let last = 0;
    let pending: ReturnType<typeof setTimeout> | undefined;
    const soon = () => {
      if (pending) return;
      pending = setTimeout(() => ((pending = undefined), (last = Date.now()), void load()), Math.max(0, last + 1000 - Date.now()));
    };
    const off = onPush ? onLive((event) => event !== 'hello' && soon()) : () => undefined;
    const offState = onPush ? onLiveState((up) => up && soon()) : () => undefined;
    const t = everyMs > 0 ? setInterval(() => (!onPush || !isLive()) && void load(), everyMs) : undefined;
    return () => {
      alive.current = false;
      off();
      offState();
      if (pending) clearTimeout(pending);
      if (t) clearInterval(t);
    };
  }, [load, everyMs, onPush]);
  return { ...state, reload: load };
}

/** Loading, error and empty states, shown honestly; children only when there is data. */
export function Load<T>({ s, empty, children }: { s: { data: T | null; error: string | null; loading: boolean }; empty?: (d: T) => boolean; children: (d: T) => ComponentChildren }) {
  if (s.loading && !s.data)
    return (
      <p class="muted" role="status">
        Loading…
      </p>
    );
  if (s.error && !s.data)
    return (
      <p class="error" role="alert">
        Could not load: {s.error}
      </p>
    );
  if (!s.data) return null;
  return (
    <>
      {s.error && (
        <p class="error" role="alert">
          Refresh failed: {s.error}
        </p>
      )}
      {empty?.(s.data) ? <p class="muted">Nothing here yet.</p> : children(s.data)}
    </>
  );
}

const pad = (n: number) => String(n).padStart(2, '0');

/** The console's one time format: `2026-12-01 16:04:05` in the browser's zone. */
export function fmtTime(at: string | Date | null | undefined): string {
  if (!at) return '—';
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return '—';
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A server sentence with ISO times in it ("last round at 2026-12-01T17:02:25.273Z"), in the one format. */
export function localizeTimes(text: string | null | undefined): string {
  return (text ?? '').replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z/g, (iso) => fmtTime(iso));
}

/** The same instant in UTC, for hover text. */
export function utcTime(at: string | Date): string {
  return new Date(at)
    .toISOString()
    .replace('T', ' ')
    .replace(/\.\d+Z$/, ' UTC');
}

/** A time in the browser's zone, UTC on hover. */
export function Time({ at }: { at: string | null | undefined }) {
  if (!at) return <span class="muted">—</span>;
  const d = new Date(at);
  return (
    <time dateTime={d.toISOString()} title={utcTime(d)}>
      {fmtTime(d)}
    </time>
  );
}

/** 459743232 → "438 MiB". */
export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  for (; Math.abs(v) >= 1024 && i < units.length - 1; i++) v /= 1024;
  return `${v >= 100 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

/** 1234 → "1.2 s", 95000 → "1 min 35 s". */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.round((ms % 3_600_000) / 60_000)} min`;
}

/** A figure by its name: `*_bytes` as bytes, `*_ms`/`*_seconds` as durations, other numbers grouped. */
export function humanize(key: string, v: unknown): string {
  if (typeof v !== 'number') return v === null || v === undefined ? '—' : String(v);
  if (/bytes$/.test(key)) return bytes(v);
  if (/_ms$/.test(key)) return duration(v);
  if (/_seconds$/.test(key)) return duration(v * 1000);
  return v.toLocaleString('en-US', { maximumFractionDigits: 3 });
}

export function ago(at: string | null | undefined, now = Date.now()): string {
  if (!at) return '—';
  const s = Math.round((now - new Date(at).getTime()) / 1000);
  if (Math.abs(s) < 90) return `${s}s`;
  if (Math.abs(s) < 5400) return `${Math.round(s / 60)}m`;
  return `${Math.round(s / 3600)}h`;
}

export function Badge({ v }: { v: string | null | undefined }) {
  return <span class={`badge b-${v ?? 'none'}`}>{v ?? '—'}</span>;
}

export interface Col<R> {
  h: string;
  c: (r: R) => ComponentChildren;
}

export function Table<R>({ rows, cols, label, rowKey }: { rows: R[]; cols: Col<R>[]; label: string; rowKey: (r: R) => string | number }) {
  if (!rows.length) return <p class="muted">Nothing here yet.</p>;
  return (
    <div class="scroll">
      <table aria-label={label}>
        <thead>
          <tr>
            {cols.map((c) => (
              <th scope="col" key={c.h}>
                {c.h}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr key={rowKey(r)}>
              {cols.map((c) => (
                <td key={c.h}>{c.c(r)}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A generic table of plain objects: every scalar field is a column; secrets never reach the console because the API never answers them. */
export function AutoTable({ rows, label, keys }: { rows: Record<string, unknown>[]; label: string; keys?: string[] }) {
  const cols = (keys ?? Object.keys(rows[0] ?? {}).filter((k) => typeof rows[0]![k] !== 'object' || rows[0]![k] === null)).map((k) => ({
    h: k,
    c: (r: Record<string, unknown>) => {
      const v = r[k];
      if (typeof v === 'string' && /^\d{4}-\d\d-\d\dT/.test(v)) return <Time at={v} />;
      if (v !== null && typeof v === 'object') return <code>{JSON.stringify(v)}</code>;
      return v === null || v === undefined ? '—' : String(v);
    },
  }));
  return <Table rows={rows} cols={cols} label={label} rowKey={(r) => String(r.id ?? JSON.stringify(r))} />;
}

export function Section({ title, children }: { title: string; children: ComponentChildren }) {
  return (
    <section>
      <h2>{title}</h2>
      {children}
    </section>
  );
}

/** "every 1h" / "cron 0 3 * * * (Asia/Shanghai)" in words. */
export function scheduleWords(s: { every?: string; cron?: string; timezone?: string }): string {
  if (s.every) return `every ${s.every}`;
  return `cron "${s.cron}"${s.timezone ? ` in ${s.timezone}` : ''}`;
}
