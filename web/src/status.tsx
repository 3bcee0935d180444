// One palette for a round's outcome, used by every chart, badge and the Timeline, with its legend.
// no_work is a healthy round that found nothing to do: grey, never red.

export const OUTCOMES = [
  { status: 'ok', color: '#16a34a', label: 'ok', means: 'did work' },
  { status: 'no_work', color: '#64748b', label: 'no work', means: 'healthy, nothing to do' },
  { status: 'running', color: '#2563eb', label: 'running', means: 'not finished yet' },
  { status: 'failed', color: '#dc2626', label: 'failed', means: 'the round threw' },
  { status: 'timed_out', color: '#ea580c', label: 'timed out', means: 'aborted at its timeout or on a lost lease' },
  { status: 'skipped_not_leader', color: '#a855f7', label: 'skipped', means: 'another replica led this slot' },
] as const;

export function outcomeColor(status: string): string {
  return OUTCOMES.find((o) => o.status === status)?.color ?? '#94a3b8';
}

export function Legend({ extra }: { extra?: { label: string; color: string; means: string; shape?: 'tick' }[] }) {
  return (
    <ul class="legend" aria-label="Legend">
      {OUTCOMES.map((o) => (
        <li key={o.status} title={o.means}>
          <span class="swatch" style={{ background: o.color }} /> {o.label}
        </li>
      ))}
      {extra?.map((e) => (
        <li key={e.label} title={e.means}>
          <span class={e.shape === 'tick' ? 'swatch tick' : 'swatch'} style={{ background: e.color }} /> {e.label}
        </li>
      ))}
    </ul>
  );
}
