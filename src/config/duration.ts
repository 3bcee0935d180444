const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?$/;

export const DURATION_FORM = 'a duration such as 300ms, 5s, 10m, 1h, 1d (a bare number means seconds)';

/** Parses `300ms`, `1s`, `5m`, `1h`, `1d` or a bare number of seconds into milliseconds; null when malformed. */
export function parseDuration(input: unknown): number | null {
  if (typeof input === 'number') return Number.isFinite(input) && input >= 0 ? Math.round(input * 1000) : null;
  if (typeof input !== 'string') return null;
  const m = DURATION.exec(input.trim());
  if (!m) return null;
  return Math.round(Number(m[1]) * UNIT_MS[m[2] ?? 's']!);
}

export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${ms}ms`;
}
