/**
 * Every Redis key lives under `<prefix>:<env>:` so staging and production never share a lock,
 * and carries a hash tag (`{...}`) so a job's keys land on one slot of a Redis Cluster.
 */
export interface KeySpace {
  prefix: string;
  env: string;
}

export function leaderKey(ks: KeySpace, job: string): string {
  return `${ks.prefix}:${ks.env}:{job:${job}}:leader`;
}

/** The text hashed to the 64-bit PostgreSQL advisory-lock key for a job (same namespace rule). */
export function advisoryLockName(ks: KeySpace, job: string): string {
  return `${ks.prefix}:${ks.env}:job:${job}`;
}

/** The per-account refresh lock (`oauth:refresh_lock:{account}` in the issue), shared with the hot path. */
export function refreshLockKey(ks: KeySpace, accountId: number): string {
  return `${ks.prefix}:${ks.env}:oauth:refresh_lock:{${accountId}}`;
}

/** A user's usage counter for one platform, and the set of counters changed since the last flush. */
export function quotaCounterKey(ks: KeySpace, member: string): string {
  return `${ks.prefix}:${ks.env}:quota:${member}`;
}

export function quotaDirtyKey(ks: KeySpace): string {
  return `${ks.prefix}:${ks.env}:quota:dirty`;
}
