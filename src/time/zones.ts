/**
 * Time zones without loading ICU's zone data when the zone is UTC, the default of every job and
 * of `usage.timezone`. A Node process's first `Intl.DateTimeFormat` with a `timeZone` (and croner's
 * `timezone` option, which uses one) loads that data: 90-160 ms of CPU, paid by every replica start
 * and one-shot command, for nothing when every zone is UTC. croner's `utcOffset: 0` computes the
 * same instants without it (checked against `timezone: 'UTC'` in test/time-zones.test.ts).
 */
export function isUtcZone(tz: string): boolean {
  return tz === 'UTC' || tz === 'Etc/UTC';
}

/** Whether `tz` is a time zone Node knows (an IANA name); UTC without loading the zone data. */
export function isKnownTimeZone(tz: string): boolean {
  if (isUtcZone(tz)) return true;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** croner's zone option for `tz`: a fixed offset of 0 for UTC, the zone's name otherwise. */
export function cronZone(tz: string): { utcOffset: number } | { timezone: string } {
  return isUtcZone(tz) ? { utcOffset: 0 } : { timezone: tz };
}
