import { useState } from 'preact/hooks';
import { api } from '../api';
import { Chart } from '../chart';
import { Legend, OUTCOMES } from '../status';
import { Badge, Load, Table, Time, duration, localizeTimes, scheduleWords, useLive } from '../ui';

/** Why the API would refuse a round now (409), or null: the button is disabled only for that. */
function busyReason(j: any): string | null {
  if (j.paused) return 'paused: resume it first (the API and CLI can force a round)';
  if (j.lease_holder) return `a round holds the lease (${j.lease_holder})`;
  if (j.last_run?.status === 'running') return 'a round is running';
  return null;
}

function RunNow({ job, after }: { job: any; after: () => void }) {
  const [msg, setMsg] = useState<string | null>(null);
  const reason = busyReason(job);
  const run = async () => {
    setMsg(null);
    try {
      const r = await api(`/jobs/${job.name}/run`, { method: 'POST' });
      setMsg(`started run ${r.run_id}`);
    } catch (e) {
      setMsg((e as Error).message);
    }
    after();
  };
  return (
    <>
      <button onClick={run} disabled={!!reason} title={reason ?? `run ${job.name} now`} aria-describedby={reason ? `why-${job.name}` : undefined}>
        Run now
      </button>
      {reason && (
        <span id={`why-${job.name}`} class="muted small">
          {' '}
          {reason}
        </span>
      )}
      {!reason && !job.enabled && (
        <span class="muted small" title={job.disabled_reason ?? undefined}>
          {' '}
          not scheduled; runs one round by hand, as the CLI and API do
        </span>
      )}
      {msg && (
        <span class="small" role="status">
          {' '}
          {msg}
        </span>
      )}
    </>
  );
}

/**
 * Pause and resume (issue 49): `Pause` opens a reason field (the API requires one; it goes into the
 * audit with this session), `Resume` lifts the pause. Both apply to every replica at once.
 */
function PauseControl({ job, after }: { job: any; after: () => void }) {
  const [asking, setAsking] = useState(false);
  const [reason, setReason] = useState('');
  const [msg, setMsg] = useState<string | null>(null);
  const call = async (action: 'pause' | 'resume', body?: unknown) => {
    setMsg(null);
    try {
      await api(`/jobs/${job.name}/${action}`, { method: 'POST', body: body ?? {} });
      setAsking(false);
      setReason('');
      setMsg(action === 'pause' ? 'paused' : 'resumed');
    } catch (e) {
      setMsg((e as Error).message);
    }
    after();
  };
  if (job.paused) {
    return (
      <>
        <button onClick={() => call('resume')} title={`resume ${job.name}: its next slot runs as scheduled`}>
          Resume
        </button>
        {msg && (
          <span class="small" role="status">
            {' '}
            {msg}
          </span>
        )}
      </>
    );
  }
  if (!asking) {
    return (
      <>
        <button onClick={() => setAsking(true)} title={`pause ${job.name} on every replica; a running round finishes`}>
          Pause
        </button>
        {msg && (
          <span class="small" role="status">
            {' '}
            {msg}
          </span>
        )}
      </>
    );
  }
  return (
    <form
      class="inline"
      onSubmit={(e) => {
        e.preventDefault();
        void call('pause', { reason });
      }}
    >
      <input aria-label={`Reason for pausing ${job.name}`} placeholder="why pause?" required maxLength={500} value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />{' '}
      <button type="submit" disabled={!reason.trim()}>
        Pause {job.name}
      </button>{' '}
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
      {msg && (
        <span class="small" role="status">
          {' '}
          {msg}
        </span>
      )}
    </form>
  );
}

function lastRun(r: any) {
  if (!r) return <span class="muted">never</span>;
  return (
    <>
      <Badge v={r.status} /> <Time at={r.started_at} />{' '}
      <span class="muted small">
        on {r.instance_id}
        {r.duration_ms != null ? `, ${duration(r.duration_ms)}` : ''}
      </span>
    </>
  );
}

/** Instance-scoped jobs are judged per live replica: name the one the health comes from, or how many are fine. */
function replicaWords(j: any): string {
  if (!j.instances) return '—';
  if (j.worst_instance) return `${j.worst_instance} (${j.instances.find((i: any) => i.instance_id === j.worst_instance)?.health ?? j.health})`;
  return `${j.instances.length} live, all ${j.health}`;
}

export function Jobs() {
  const s = useLive('/jobs', 2000);
  return (
    <>
      <h1>Jobs</h1>
      <Load s={s}>
        {(d: any) => (
          <Table
            label="Jobs"
            rows={d.jobs}
            rowKey={(j: any) => j.name}
            cols={[
              { h: 'Name', c: (j: any) => <a href={`#/jobs/${j.name}`}>{j.name}</a> },
              { h: 'Scope', c: (j: any) => j.scope },
              { h: 'Schedule', c: (j: any) => scheduleWords(j.schedule) },
              {
                h: 'Health',
                c: (j: any) => (
                  <>
                    <Badge v={j.health} /> <span class="muted small">{localizeTimes(j.health_reason)}</span>
                  </>
                ),
              },
              { h: 'Last run', c: (j: any) => lastRun(j.last_run) },
              { h: 'Replica', c: (j: any) => replicaWords(j) },
              { h: 'Next attempt', c: (j: any) => <Time at={j.next_attempt} /> },
              { h: 'Lease holder', c: (j: any) => j.lease_holder ?? '—' },
              {
                h: 'Action',
                c: (j: any) => (
                  <>
                    <RunNow job={j} after={s.reload} /> <PauseControl job={j} after={s.reload} />
                  </>
                ),
              },
            ]}
          />
        )}
      </Load>
    </>
  );
}

export function JobPage({ name }: { name: string }) {
  const s = useLive(`/jobs/${encodeURIComponent(name)}`, 2000);
  return (
    <>
      <p>
        <a href="#/jobs">← all jobs</a>
      </p>
      <h1>Job {name}</h1>
      <Load s={s}>
        {(d: any) => {
          const runs = [...d.runs].reverse();
          const done = runs.filter((r: any) => r.duration_ms != null);
          return (
            <>
              <p>
                {d.job.description} · <Badge v={d.job.health} /> {localizeTimes(d.job.health_reason)} · {scheduleWords(d.job.schedule)} · <RunNow job={d.job} after={s.reload} />{' '}
                <PauseControl job={d.job} after={s.reload} />
              </p>
              {done.length > 0 && (
                <>
                  <Chart
                    title="Round duration (ms) by outcome"
                    x={done.map((r: any) => new Date(r.started_at).getTime() / 1000)}
                    series={OUTCOMES.filter((o) => done.some((r: any) => r.status === o.status)).map((o) => ({
                      label: o.label,
                      color: o.color,
                      values: done.map((r: any) => (r.status === o.status ? r.duration_ms : null)),
                      points: true,
                    }))}
                  />
                  <Legend />
                </>
              )}
              <h2>Recent rounds</h2>
              <Table
                label="Recent rounds"
                rows={d.runs}
                rowKey={(r: any) => r.id}
                cols={[
                  { h: 'Run', c: (r: any) => r.id },
                  { h: 'Status', c: (r: any) => <Badge v={r.status} /> },
                  { h: 'Trigger', c: (r: any) => r.trigger },
                  { h: 'Started', c: (r: any) => <Time at={r.started_at} /> },
                  { h: 'Instance', c: (r: any) => r.instance_id },
                  { h: 'Fencing token', c: (r: any) => r.fencing_token ?? '—' },
                  { h: 'Duration', c: (r: any) => duration(r.duration_ms) },
                  { h: 'Items', c: (r: any) => r.items ?? '—' },
                  { h: 'Error', c: (r: any) => r.error ?? '' },
                ]}
              />
            </>
          );
        }}
      </Load>
    </>
  );
}
