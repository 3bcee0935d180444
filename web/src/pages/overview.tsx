import { Badge, Load, Section, Table, Time, ago, usePoll } from '../ui';

export function Overview() {
  const ov = usePoll('/ops/overview', 5000);
  const ready = usePoll('/instances', 5000);
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
                ]}
              />
            </Section>
            <Section title="Firing alerts">
              <Table
                label="Firing alerts"
                rows={o.firing_alerts}
                rowKey={(e: any) => e.id}
                cols={[
                  { h: 'Rule', c: (e: any) => e.rule_name ?? e.rule_id },
                  { h: 'Severity', c: (e: any) => <Badge v={e.severity} /> },
                  { h: 'Since', c: (e: any) => <Time at={e.fired_at ?? e.started_at} /> },
                  { h: 'Silenced', c: (e: any) => (e.silenced ? 'yes' : 'no') },
                ]}
              />
            </Section>
            <Section title="Backends and backlogs">
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
          {(d: any) => <Table label="Recompute tasks" rows={d.recomputes.slice(0, 5)} rowKey={(t: any) => t.id} cols={[{ h: 'Id', c: (t: any) => t.id }, { h: 'Status', c: (t: any) => <Badge v={t.status} /> }, { h: 'Progress', c: (t: any) => `${t.done_chunks ?? t.done ?? '?'} / ${t.chunks}` }]} />}
        </Load>
      </Section>
      {ready.error && <p class="error">{ready.error}</p>}
    </>
  );
}
