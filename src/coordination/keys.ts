/**
 * Every Redis key lives under `<prefix>:<env>:` so staging and production never share a lock.
 * Lock keys carry a hash tag (`{job:<name>}`, `{<account>}`); they are single-key, so a Redis
 * Cluster is fine for them. The quota scripts touch two keys (a counter and the dirty set) that
 * are NOT tagged alike: quota counters need a single Redis node (or Sentinel), not Redis
 * Cluster, which would answer CROSSSLOT. Tagging them would move live counters on upgrade.
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
