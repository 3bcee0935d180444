import { useState } from 'preact/hooks';
import { api } from '../api';
import { Badge, Load, Section, Table, Time, useLive } from '../ui';

const STATUSES = ['', 'active', 'quota_exhausted', 'refreshing', 'expired', 'error', 'disabled', 'banned'];

function Action({ label, path, after }: { label: string; path: string; after: () => void }) {
  const [msg, setMsg] = useState<string | null>(null);
  return (
    <>
      <button
        class="small"
        onClick={async () => {
          try {
            await api(path, { method: 'POST' });
            setMsg(null);
          } catch (e) {
            setMsg((e as Error).message);
          }
          after();
        }}
      >
        {label}
      </button>
      {msg && (
        <span class="error small" role="alert">
          {msg}
        </span>
      )}
    </>
  );
}

export function Accounts() {
  const [status, setStatus] = useState('');
  const [platform, setPlatform] = useState('');
  const q = new URLSearchParams({ limit: '500', ...(status ? { status } : {}), ...(platform ? { platform } : {}) });
  const acc = useLive(`/accounts?${q}`, 5000);
  const all = useLive('/accounts?limit=1000', 10000);
  const px = useLive('/proxies', 5000);
  const counts: Record<string, number> = {};
  for (const a of (all.data as any)?.accounts ?? []) counts[a.status] = (counts[a.status] ?? 0) + 1;
  return (
    <>
      <h1>Accounts &amp; proxies</h1>
      <div class="cards">
        {Object.entries(counts).map(([k, n]) => (
          <div class="card" key={k}>
            <Badge v={k} />
            <b>{n}</b>
          </div>
        ))}
      </div>
      <div class="filters">
        <label>
          Status{' '}
          <select value={status} onChange={(e) => setStatus((e.target as HTMLSelectElement).value)}>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s || 'any'}
              </option>
            ))}
          </select>
        </label>
        <label>
          Platform <input value={platform} onChange={(e) => setPlatform((e.target as HTMLInputElement).value)} placeholder="any" />
        </label>
      </div>
      <Load s={acc}>
        {(d: any) => (
          <Table
            label="Accounts"
            rows={d.accounts}
            rowKey={(a: any) => a.id}
            cols={[
              { h: 'Id', c: (a: any) => a.id },
              { h: 'Name', c: (a: any) => a.name },
              { h: 'Platform', c: (a: any) => a.platform },
              { h: 'Status', c: (a: any) => <Badge v={a.status} /> },
              { h: 'Expires', c: (a: any) => <Time at={a.expires_at} /> },
              { h: 'Token expires', c: (a: any) => <Time at={a.token_expires_at} /> },
              { h: 'Last refresh', c: (a: any) => <Time at={a.refresh?.last_success_at} /> },
              { h: 'Failures', c: (a: any) => (a.refresh?.consecutive_failures ? `${a.refresh.consecutive_failures}× ${a.refresh.last_error ?? ''}` : (a.status_reason ?? '')) },
              {
                h: 'Actions',
                c: (a: any) => (
                  <>
                    <Action label="Refresh" path={`/accounts/${a.id}/refresh`} after={acc.reload} />{' '}
                    {a.status === 'disabled' ? (
                      <Action label="Enable" path={`/accounts/${a.id}/enable`} after={acc.reload} />
                    ) : (
                      <Action label="Disable" path={`/accounts/${a.id}/disable`} after={acc.reload} />
                    )}
                  </>
                ),
              },
            ]}
          />
        )}
      </Load>
      <Section title="Proxies">
        <Load s={px}>
          {(d: any) => (
            <Table
              label="Proxies"
              rows={d.proxies}
              rowKey={(p: any) => p.id}
              cols={[
                { h: 'Id', c: (p: any) => p.id },
                { h: 'Name', c: (p: any) => p.name },
                { h: 'Status', c: (p: any) => <Badge v={p.status} /> },
                { h: 'Fallback', c: (p: any) => `${p.fallback_mode}${p.backup_proxy_id ? ` → proxy ${p.backup_proxy_id}` : ''}` },
                { h: 'Accounts', c: (p: any) => `${p.accounts}${p.fallback_accounts ? ` (+${p.fallback_accounts} on fallback)` : ''}` },
                { h: 'Expires', c: (p: any) => <Time at={p.expires_at} /> },
                { h: 'Action', c: (p: any) => (p.status !== 'active' ? <Action label="Restore" path={`/proxies/${p.id}/restore`} after={px.reload} /> : null) },
              ]}
            />
          )}
        </Load>
      </Section>
    </>
  );
}
