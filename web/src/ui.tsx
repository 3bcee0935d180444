import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import { api } from './api';

/** Polls an API path: `{ data, error, loading, reload }`; live pages refresh without a reload. */
export function usePoll<T = any>(path: string | null, everyMs = 3000) {
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
    const t = everyMs > 0 ? setInterval(() => void load(), everyMs) : undefined;
    return () => {
      alive.current = false;
      if (t) clearInterval(t);
    };
  }, [load, everyMs]);
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

/** A time in the browser's zone, UTC on hover. */
export function Time({ at }: { at: string | null | undefined }) {
  if (!at) return <span class="muted">—</span>;
  const d = new Date(at);
  return (
    <time
      dateTime={d.toISOString()}
      title={d
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, ' UTC')}
    >
      {d.toLocaleString()}
    </time>
  );
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
