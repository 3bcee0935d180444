import { AutoTable, Load, Section, usePoll } from '../ui';

export function Billing() {
  const plans = usePoll('/billing/plans', 15000);
  const deliveries = usePoll('/notifications?limit=100', 5000);
  const channels = usePoll('/notifications/channels', 5000);
  const settings = usePoll('/notifications/settings', 30000);
  return (
    <>
      <h1>Billing &amp; notifications</h1>
      <Section title="Plans">
        <Load s={plans} empty={(d: any) => !d.plans.length}>{(d: any) => <AutoTable label="Plans" rows={d.plans} />}</Load>
      </Section>
      <Section title="Notification deliveries">
        <Load s={deliveries} empty={(d: any) => !d.deliveries.length}>{(d: any) => <AutoTable label="Notification deliveries" rows={d.deliveries} />}</Load>
      </Section>
      <Section title="Channel health">
        <Load s={channels} empty={(d: any) => !Object.keys(d.channels).length}>
          {(d: any) => <AutoTable label="Channels" rows={Object.entries(d.channels).map(([k, v]) => ({ id: k, channel: k, ...(v as object) }))} />}
        </Load>
      </Section>
      <Section title="Reminder settings">
        <Load s={settings}>{(d: any) => <pre>{JSON.stringify(d, null, 2)}</pre>}</Load>
      </Section>
      <p class="muted">Orders and subscriptions are looked up by id through the API (GET /api/v1/billing/orders/:id, /billing/subscriptions/:id).</p>
    </>
  );
}
