import { useEffect, useState } from 'preact/hooks';
import { Badge, Load, Section, Table, Time, ago, usePoll } from '../ui';

/** /readyz (no token needed): PostgreSQL, Redis (cluster mode) and shutdown checks of the replica that answers. */
function useReadiness() {
  const [r, setR] = useState<{ ready: boolean; checks: Record<string, string> } | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const load = () =>
      fetch('/readyz')
        .then((x) => x.json())
        .then(
          (d) => (setR(d), setError(null)),
          (e: Error) => setError(e.message),
        );
    load();
    const t = setInterval(load, 5000);
    return () => clearInterval(t);
  }, []);
  return { r, error };
}

const mib = (bytes: number) => `${Math.round(bytes / 1048576)} MiB`;

export function Overview() {
  const ov = usePoll('/ops/overview', 5000);
  const ready = useReadiness();
  const rc = usePoll('/usage/recompute', 10000);
  return (
    <>
      <h1>Overview</h1>
      <Load s={ov}>
        {(o: any) => (
          <>
            <div class="cards">
              <div class="card">
                <span class="muted">Health score</span>
                <b>{o.health_score ?? '—'}</b>
              </div>
              {Object.entries(o.jobs_by_health as Record<string, number>).map(([h, n]) => (
                <div class="card" key={h}>
                  <Badge v={h} />
                  <b>{n}</b>
                </div>
              ))}
              <div class="card">
                <span class="muted">Firing alerts</span>
                <b>{o.firing_alerts.length}</b>
              </div>
              <div class="card">
                <span class="muted">Collector</span>
                <b>{o.collector_fresh ? 'fresh' : 'stale'}</b>
              </div>
            </div>
            <Section title="Instances">
              <Table
                label="Instances"
                rows={o.instances}
                rowKey={(i: any) => i.instance_id}
                cols={[
                  { h: 'Instance', c: (i: any) => i.instance_id },
                  { h: 'Version', c: (i: any) => i.version },
                  { h: 'Heartbeat', c: (i: any) => <span title={i.heartbeat_at}>{ago(i.heartbeat_at)} ago</span> },
                  { h: 'Clock skew', c: (i: any) => `${i.clock_skew_ms ?? 0} ms` },
                  { h: 'State', c: (i: any) => <Badge v={i.alive ? 'alive' : 'gone'} /> },
                  // From the replica's newest heartbeat; a dash when that beat is not fresh.
                  { h: 'RSS', c: (i: any) => (i.process ? mib(i.process.rss_bytes) : '—') },
                  { h: 'Heap', c: (i: any) => (i.process ? mib(i.process.heap_used_bytes) : '—') },
                  { h: 'Loop lag p99', c: (i: any) => (i.process?.event_loop_lag_p99_ms != null ? `${i.process.event_loop_lag_p99_ms} ms` : '—') },
                  { h: 'CPU', c: (i: any) => (i.process?.cpu_percent != null ? `${i.process.cpu_percent} %` : '—') },
                ]}
              />
            </Section>
            <Section title="Firing alerts">
              <Table
                label="Firing alerts"
                rows={o.firing_alerts}
                rowKey={(e: any) => e.id}
                cols={[
                  { h: 'Rule', c: (e: any) => `${e.rule_name ?? e.rule_id}${e.labels?.monitor ? ` (monitor ${e.labels.monitor})` : ''}` },
                  { h: 'Severity', c: (e: any) => <Badge v={e.severity} /> },
                  { h: 'Since', c: (e: any) => <Time at={e.fired_at ?? e.started_at} /> },
                  { h: 'Silenced', c: (e: any) => (e.silenced ? 'yes' : 'no') },
                ]}
              />
            </Section>
            <Section title="Backends">
              {ready.error && (
                <p class="error" role="alert">
                  Readiness unknown: {ready.error}
                </p>
              )}
              {ready.r && (
                <div class="cards">
                  {Object.entries(ready.r.checks).map(([k, v]) => (
                    <div class="card" key={k}>
                      <span class="muted">{k === 'database' ? 'PostgreSQL / database' : k}</span>
                      <Badge v={v === 'ok' ? 'ok' : 'error'} />
                      {v !== 'ok' && <span class="small">{v}</span>}
                    </div>
                  ))}
                </div>
              )}
            </Section>
            <Section title="Backlogs and latest metrics">
              {o.latest_metrics ? (
                <dl class="kv">
                  {Object.entries(o.latest_metrics as Record<string, unknown>)
                    .filter(([, v]) => typeof v !== 'object')
                    .map(([k, v]) => (
                      <div key={k}>
                        <dt>{k}</dt>
                        <dd>{String(v)}</dd>
                      </div>
                    ))}
                </dl>
              ) : (
                <p class="muted">No ops metrics collected yet (ops_metrics writes a bucket every minute).</p>
              )}
            </Section>
          </>
        )}
      </Load>
      <Section title="Recompute tasks">
        <Load s={rc} empty={(d: any) => !d.recomputes.length}>
          {(d: any) => (
            <Table
              label="Recompute tasks"
              rows={d.recomputes.slice(0, 5)}
              rowKey={(t: any) => t.id}
              cols={[
                { h: 'Id', c: (t: any) => t.id },
                { h: 'Status', c: (t: any) => <Badge v={t.status} /> },
                { h: 'Progress', c: (t: any) => `${t.chunks_done} / ${t.chunks}` },
              ]}
            />
          )}
        </Load>
      </Section>
    </>
  );
}
