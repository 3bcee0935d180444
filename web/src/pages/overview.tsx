import { useEffect, useState } from 'preact/hooks';
import { Badge, Load, Section, Table, Time, ago, bytes, duration, fmtTime, humanize, useLive, utcTime } from '../ui';

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

/**
 * Jobs by health as the ops series and the health score count them: `healthy` includes `idle`
 * (a job with nothing due is not a problem), so this card agrees with `jobs_healthy`.
 */
function jobCards(by: Record<string, number>): [string, number, string | null][] {
  const out: [string, number, string | null][] = [];
  const healthy = (by.healthy ?? 0) + (by.idle ?? 0);
  if (healthy || !Object.keys(by).length) out.push(['healthy', healthy, by.idle ? `${by.idle} of them idle` : null]);
  for (const [h, n] of Object.entries(by)) if (h !== 'healthy' && h !== 'idle') out.push([h, n, h === 'disabled' ? 'not scheduled' : null]);
  return out;
}

export function Overview() {
  const ov = useLive('/ops/overview', 5000);
  const ready = useReadiness();
  const rc = useLive('/usage/recompute', 10000);
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
              {jobCards(o.jobs_by_health).map(([h, n, note]) => (
                <div class="card" key={h} data-health={h}>
                  <Badge v={h} />
                  <b>{n}</b>
                  {note && <span class="muted small">{note}</span>}
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
                  { h: 'Heartbeat', c: (i: any) => <span title={`${fmtTime(i.heartbeat_at)} (${utcTime(i.heartbeat_at)})`}>{ago(i.heartbeat_at)} ago</span> },
                  { h: 'Clock skew', c: (i: any) => duration(i.clock_skew_ms ?? 0) },
                  { h: 'State', c: (i: any) => <Badge v={i.alive ? 'alive' : 'gone'} /> },
                  // From the replica's newest heartbeat; a dash when that beat is not fresh.
                  { h: 'RSS', c: (i: any) => (i.process ? bytes(i.process.rss_bytes) : '—') },
                  { h: 'Heap', c: (i: any) => (i.process ? bytes(i.process.heap_used_bytes) : '—') },
                  { h: 'Loop lag p99', c: (i: any) => (i.process?.event_loop_lag_p99_ms != null ? duration(i.process.event_loop_lag_p99_ms) : '—') },
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
                        <dd>{humanize(k, v)}</dd>
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
