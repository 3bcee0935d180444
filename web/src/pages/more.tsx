import { useState } from 'preact/hooks';
import { api } from '../api';
import { AutoTable, Load, useLive } from '../ui';

export function Images() {
  const s = useLive('/image-batches?limit=100', 5000);
  return (
    <>
      <h1>Image batches</h1>
      <Load s={s} empty={(d: any) => !(d.batches ?? []).length}>
        {(d: any) => (
          <>
            <AutoTable label="Image batches" rows={d.batches} />
            {d.batches
              .filter((b: any) => !['done', 'failed', 'cancelled', 'completed'].includes(b.state))
              .map((b: any) => (
                <button key={b.id} class="small" onClick={() => void api(`/image-batches/${b.id}/cancel`, { method: 'POST' }).finally(s.reload)}>
                  Cancel batch {b.id}
                </button>
              ))}
          </>
        )}
      </Load>
    </>
  );
}

export function Scheduler() {
  const [platform, setPlatform] = useState('openai');
  const [group, setGroup] = useState('');
  const s = useLive(`/scheduler/accounts?${new URLSearchParams({ platform, ...(group ? { group } : {}) })}`, 5000);
  return (
    <>
      <h1>Scheduler snapshot</h1>
      <div class="filters">
        <label>
          Platform <input value={platform} onChange={(e) => setPlatform((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Group <input value={group} onChange={(e) => setGroup((e.target as HTMLInputElement).value)} placeholder="(none)" />
        </label>
      </div>
      <Load s={s}>
        {(d: any) => (
          <>
            <p class="muted">
              {d.count} schedulable accounts{d.source ? ` · from ${d.source}` : ''}
            </p>
            <AutoTable label="Schedulable accounts" rows={d.accounts} />
          </>
        )}
      </Load>
    </>
  );
}
