import { Badge, Load, Table, Time, useLive } from '../ui';

interface Check {
  name: string;
  group: string;
  status: 'ok' | 'warn' | 'fail';
  measured: string;
  fix: string;
}

/** `GET /api/v1/doctor`: every check run now by the replica that answers, and what the hourly doctor job recorded. */
export function Doctor() {
  // Each load runs every check against the deployment: once a minute, or on demand.
  const s = useLive<{ status: string; checked_at: string; instance_id: string; checks: Check[]; recorded: Array<Check & { checked_at: string; instance_id: string }> }>('/doctor', 60_000, false);
  return (
    <>
      <h1>Doctor</h1>
      <p class="muted">The operating rules of the deployment, checked now: the same report as relay-jobs doctor. Each check that is not ok names its fix.</p>
      <button class="small" onClick={() => void s.reload()}>
        Run checks
      </button>
      <Load s={s}>
        {(d) => (
          <>
            <p role="status">
              Overall <Badge v={d.status} /> · {d.checks.filter((c) => c.status === 'fail').length} fail, {d.checks.filter((c) => c.status === 'warn').length} warn,{' '}
              {d.checks.filter((c) => c.status === 'ok').length} ok · by {d.instance_id} at <Time at={d.checked_at} />
            </p>
            <Table
              label="Doctor checks"
              rows={d.checks}
              rowKey={(c) => c.name}
              cols={[
                { h: 'status', c: (c) => <Badge v={c.status} /> },
                { h: 'check', c: (c) => <code>{c.name}</code> },
                { h: 'group', c: (c) => c.group },
                { h: 'measured', c: (c) => c.measured },
                { h: 'fix', c: (c) => (c.status === 'ok' ? <span class="muted">{c.fix}</span> : c.fix) },
              ]}
            />
            <h2>Last scheduled run (doctor job)</h2>
            <Table
              label="Recorded doctor checks"
              rows={d.recorded}
              rowKey={(c) => c.name}
              cols={[
                { h: 'status', c: (c) => <Badge v={c.status} /> },
                { h: 'check', c: (c) => <code>{c.name}</code> },
                { h: 'checked', c: (c) => <Time at={c.checked_at} /> },
                { h: 'by', c: (c) => c.instance_id },
              ]}
            />
          </>
        )}
      </Load>
    </>
  );
}
