import { useState } from 'preact/hooks';
import { api } from '../api';
import { AutoTable, Load, Section, useLive } from '../ui';

/** Orders and subscriptions have no list route: look one up by id, with its audit trail. */
function Lookup() {
  const [kind, setKind] = useState<'orders' | 'subscriptions' | 'users'>('orders');
  const [id, setId] = useState('');
  const [result, setResult] = useState<{ data?: any; error?: string } | null>(null);
  const look = async (e: Event) => {
    e.preventDefault();
    setResult(null);
    try {
      setResult({ data: await api(`/billing/${kind}/${encodeURIComponent(id)}`) });
    } catch (err) {
      setResult({ error: (err as Error).message });
    }
  };
  const events = result?.data?.events as Record<string, unknown>[] | undefined;
  return (
    <form class="filters" onSubmit={look}>
      <label>
        Kind{' '}
        <select value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value as any)}>
          <option value="orders">order</option>
          <option value="subscriptions">subscription</option>
          <option value="users">user</option>
        </select>
      </label>
      <label>
        Id <input value={id} onInput={(e) => setId((e.target as HTMLInputElement).value)} required />
      </label>
      <button type="submit">Look up</button>
      {result?.error && (
        <p class="error" role="alert">
          {result.error}
        </p>
      )}
      {result?.data && (
        <div style="width: 100%">
          <AutoTable label="Record" rows={[result.data]} />
          {events && (
            <>
              <h3>Audit trail</h3>
              <AutoTable label="Audit trail" rows={events} />
            </>
          )}
        </div>
      )}
    </form>
  );
}

export function Billing() {
  const plans = useLive('/billing/plans', 15000);
  const deliveries = useLive('/notifications?limit=100', 5000);
  const channels = useLive('/notifications/channels', 5000);
  const settings = useLive('/notifications/settings', 30000);
  return (
    <>
      <h1>Billing &amp; notifications</h1>
      <Section title="Plans">
        <Load s={plans} empty={(d: any) => !d.plans.length}>
          {(d: any) => <AutoTable label="Plans" rows={d.plans} />}
        </Load>
      </Section>
      <Section title="Notification deliveries">
        <Load s={deliveries} empty={(d: any) => !d.deliveries.length}>
          {(d: any) => <AutoTable label="Notification deliveries" rows={d.deliveries} />}
        </Load>
      </Section>
      <Section title="Channel health">
        <Load s={channels} empty={(d: any) => !Object.keys(d.channels).length}>
          {(d: any) => <AutoTable label="Channels" rows={Object.entries(d.channels).map(([k, v]) => ({ id: k, channel: k, ...(v as object) }))} />}
        </Load>
      </Section>
      <Section title="Reminder settings">
        <Load s={settings}>{(d: any) => <pre>{JSON.stringify(d, null, 2)}</pre>}</Load>
      </Section>
      <Section title="Orders, subscriptions and users">
        <Lookup />
      </Section>
    </>
  );
}
