import { api } from '../api';
import { AutoTable, Load, Section, useLive } from '../ui';

export function Ops() {
  const events = useLive('/ops/alert-events', 5000);
  const rules = useLive('/ops/alert-rules', 10000);
  const silences = useLive('/ops/silences', 10000);
  const reports = useLive('/ops/reports', 30000);
  return (
    <>
      <h1>Alerts</h1>
      <Section title="Alert events">
        <Load s={events} empty={(d: any) => !(d.events ?? d.alert_events ?? []).length}>
          {(d: any) => <AutoTable label="Alert events" rows={d.events ?? d.alert_events} />}
        </Load>
      </Section>
      <Section title="Rules">
        <Load s={rules} empty={(d: any) => !(d.rules ?? d.alert_rules ?? []).length}>
          {(d: any) => <AutoTable label="Alert rules" rows={d.rules ?? d.alert_rules} />}
        </Load>
      </Section>
      <Section title="Silences">
        <Load s={silences} empty={(d: any) => !(d.silences ?? []).length}>
          {(d: any) => (
            <>
              <AutoTable label="Silences" rows={d.silences} />
              {d.silences.map((x: any) => (
                <button key={x.id} class="small" onClick={() => void api(`/ops/silences/${x.id}`, { method: 'DELETE' }).finally(silences.reload)}>
                  Remove silence {x.id}
                </button>
              ))}
            </>
          )}
        </Load>
      </Section>
      <Section title="Scheduled reports">
        <Load s={reports} empty={(d: any) => !(d.reports ?? []).length}>
          {(d: any) => <AutoTable label="Reports" rows={d.reports} />}
        </Load>
      </Section>
    </>
  );
}
