import { useState } from 'preact/hooks';
import { api, ApiError } from '../api';
import { Badge, Load, Section, Table, Time, bytes, duration, useLive } from '../ui';

const dur = duration;

const yesNo = (v: boolean | null | undefined) => (v === null || v === undefined ? '—' : v ? 'yes' : 'no');

/** The last hour of one monitor's probes (raw points), or minute rollups if the API answers those. */
function MonitorHistory({ id, name }: { id: number; name: string }) {
  const [from] = useState(() => new Date(Date.now() - 3_600_000).toISOString());
  const s = useLive(`/monitors/${id}/history?${new URLSearchParams({ from })}`, 10000);
  return (
    <Section title={`History of ${name} (last hour)`}>
      <Load s={s} empty={(d: any) => !(d.points ?? []).length}>
        {(d: any) => {
          const pts: any[] = [...d.points].reverse();
          if (d.resolution === 'minute')
            return (
              <Table
                label={`History of ${name}`}
                rows={pts}
                rowKey={(p) => p.minute}
                cols={[
                  { h: 'minute', c: (p) => <Time at={p.minute} /> },
                  { h: 'probes', c: (p) => p.probes },
                  { h: 'ok', c: (p) => p.ok },
                  { h: 'p50', c: (p) => dur(p.p50_ms) },
                  { h: 'p95', c: (p) => dur(p.p95_ms) },
                  { h: 'errors', c: (p) => (p.errors && typeof p.errors === 'object' ? JSON.stringify(p.errors) : String(p.errors ?? '—')) },
                ]}
              />
            );
          const ok = pts.filter((p) => p.ok).length;
          return (
            <>
              <p class="muted">
                {pts.length} probes · availability {((100 * ok) / pts.length).toFixed(1)}%
              </p>
              <Table
                label={`History of ${name}`}
                rows={pts}
                rowKey={(p) => p.started_at}
                cols={[
                  { h: 'started', c: (p) => <Time at={p.started_at} /> },
                  { h: 'result', c: (p) => <Badge v={p.ok ? 'ok' : 'failed'} /> },
                  { h: 'status', c: (p) => p.status ?? '—' },
                  { h: 'latency', c: (p) => dur(p.latency_ms) },
                  { h: 'ttfb', c: (p) => dur(p.ttfb_ms) },
                  { h: 'error', c: (p) => p.error_class ?? '—' },
                ]}
              />
            </>
          );
        }}
      </Load>
    </Section>
  );
}

export function Monitors() {
  const s = useLive('/monitors?limit=1000', 5000);
  const [open, setOpen] = useState<{ id: number; name: string } | null>(null);
  return (
    <>
      <h1>Monitors</h1>
      <Load s={s} empty={(d: any) => !(d.monitors ?? []).length}>
        {(d: any) => (
          <Table
            label="Monitors"
            rows={d.monitors as any[]}
            rowKey={(m) => m.id}
            cols={[
              { h: 'name', c: (m) => m.name },
              {
                h: 'target',
                c: (m) => `${m.account_id !== null && m.account_id !== undefined ? `account ${m.account_id}` : `${m.provider ?? 'openai'} ${m.base_url ?? '—'}`}${m.challenge ? ' (challenge)' : ''}`,
              },
              { h: 'model', c: (m) => m.model },
              { h: 'interval', c: (m) => `every ${dur(m.interval_ms)}` },
              { h: 'enabled', c: (m) => <Badge v={m.enabled ? 'enabled' : 'disabled'} /> },
              { h: 'last probe', c: (m) => <Time at={m.last_probe?.at} /> },
              {
                h: 'last result',
                c: (m) =>
                  m.last_probe?.at ? (
                    <>
                      <Badge v={m.last_probe.error_class === 'degraded' ? 'degraded' : m.last_probe.error_class ? 'failed' : 'ok'} /> {m.last_probe.status ?? ''} {m.last_probe.error_class ?? ''}
                    </>
                  ) : (
                    '—'
                  ),
              },
              { h: 'latency', c: (m) => dur(m.last_probe?.latency_ms) },
              { h: 'next due', c: (m) => <Time at={m.next_due_at} /> },
              {
                h: 'history',
                c: (m) => (
                  <button class="small" aria-pressed={open?.id === m.id} onClick={() => setOpen(open?.id === m.id ? null : { id: m.id, name: m.name })}>
                    History of {m.name}
                  </button>
                ),
              },
            ]}
          />
        )}
      </Load>
      {open && <MonitorHistory key={open.id} id={open.id} name={open.name} />}
    </>
  );
}

export function AccountTests() {
  const s = useLive('/account-tests?limit=1000', 5000);
  return (
    <>
      <h1>Account tests</h1>
      <Load s={s} empty={(d: any) => !(d.plans ?? []).length}>
        {(d: any) => (
          <Table
            label="Account test plans"
            rows={d.plans as any[]}
            rowKey={(p) => p.id}
            cols={[
              { h: 'id', c: (p) => p.id },
              { h: 'account', c: (p) => p.account_id },
              { h: 'schedule', c: (p) => `cron "${p.cron}" in ${p.timezone}` },
              { h: 'model', c: (p) => p.model },
              { h: 'enabled', c: (p) => <Badge v={p.enabled ? 'enabled' : 'disabled'} /> },
              { h: 'auto recover', c: (p) => yesNo(p.auto_recover) },
              { h: 'last run', c: (p) => <Time at={p.last_run_at} /> },
              { h: 'last ok', c: (p) => (p.last_ok === null || p.last_ok === undefined ? '—' : <Badge v={p.last_ok ? 'ok' : 'failed'} />) },
              { h: 'next run', c: (p) => <Time at={p.next_run_at} /> },
            ]}
          />
        )}
      </Load>
    </>
  );
}

export function Backups() {
  const s = useLive('/backups?limit=100', 5000);
  const [msg, setMsg] = useState<{ ok: boolean; text: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const start = async () => {
    setBusy(true);
    setMsg(null);
    try {
      const r = await api<{ id: string; instance_id: string }>('/backups', { method: 'POST', body: {} });
      setMsg({ ok: true, text: `Backup ${r.id} started on ${r.instance_id}.` });
    } catch (e) {
      setMsg({ ok: false, text: e instanceof ApiError && e.status === 409 ? `A backup is already running: ${e.message}` : `Could not start a backup: ${(e as Error).message}` });
    } finally {
      setBusy(false);
      void s.reload();
    }
  };
  return (
    <>
      <h1>Backups</h1>
      <p>
        <button onClick={() => void start()} disabled={busy}>
          Back up now
        </button>
      </p>
      {msg && (
        <p class={msg.ok ? 'muted' : 'error'} role={msg.ok ? 'status' : 'alert'}>
          {msg.text}
        </p>
      )}
      <Load s={s} empty={(d: any) => !(d.backups ?? []).length}>
        {(d: any) => (
          <Table
            label="Backups"
            rows={d.backups as any[]}
            rowKey={(b) => b.id}
            cols={[
              { h: 'id', c: (b) => <code>{b.id}</code> },
              { h: 'state', c: (b) => <Badge v={b.state} /> },
              { h: 'trigger', c: (b) => b.trigger },
              { h: 'size', c: (b) => bytes(b.size_bytes) },
              { h: 'duration', c: (b) => dur(b.duration_ms) },
              { h: 'sha256', c: (b) => (b.sha256 ? <code title={b.sha256}>{String(b.sha256).slice(0, 12)}</code> : '—') },
              { h: 'instance', c: (b) => b.instance_id },
              { h: 'started', c: (b) => <Time at={b.started_at} /> },
              { h: 'finished', c: (b) => <Time at={b.finished_at} /> },
              { h: 'error', c: (b) => b.error ?? b.verify_error ?? '—' },
            ]}
          />
        )}
      </Load>
    </>
  );
}
