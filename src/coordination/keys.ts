/**
 * Every Redis key lives under `<prefix>:<env>:` so staging and production never share a lock.
 * Lock keys carry a hash tag (`{job:<name>}`, `{<account>}`): single-key, and spread over the
 * slots of a Redis Cluster by job and by account. The quota scripts touch two keys (a counter and
 * a dirty set), so on a Redis Cluster both carry one shard's tag (`{q<n>}`, the shard a stable
 * hash of the member) and the dirty set is one per shard; on one node or behind Sentinel the
 * untagged layout of earlier releases is kept, so an upgrade moves no live counter.
 */
export interface KeySpace {
  prefix: string;
  env: string;
}

export function leaderKey(ks: KeySpace, job: string): string {
  return `${ks.prefix}:${ks.env}:{job:${job}}:leader`;
}

/** Which database this key space belongs to (coordination/database-marker.ts): one string key, JSON. */
export function databaseMarkerKey(ks: KeySpace): string {
  return `${ks.prefix}:${ks.env}:database`;
}

/** The text hashed to the 64-bit PostgreSQL advisory-lock key for a job (same namespace rule). */
export function advisoryLockName(ks: KeySpace, job: string): string {
  return `${ks.prefix}:${ks.env}:job:${job}`;
}

/** Dirty-set shards on a Redis Cluster: enough to spread quota keys over a few primaries. */
export const CLUSTER_QUOTA_SHARDS = 8;

/** The shard of a quota member (FNV-1a): stable across replicas and releases. */
export function quotaShard(member: string, shards: number): number {
  if (shards <= 1) return 0;
  let h = 0x811c9dc5;
  for (let i = 0; i < member.length; i++) h = Math.imul(h ^ member.charCodeAt(i), 0x01000193);
  return (h >>> 0) % shards;
}

/** A user's usage counter for one platform (`shards` 1: the untagged single-node layout). */
export function quotaCounterKey(ks: KeySpace, member: string, shards = 1): string {
  if (shards <= 1) return `${ks.prefix}:${ks.env}:quota:${member}`;
  return `${ks.prefix}:${ks.env}:quota:{q${quotaShard(member, shards)}}:${member}`;
}

/** The set of counters changed since the last flush, one per shard. */
export function quotaDirtyKey(ks: KeySpace, shard = 0, shards = 1): string {
  if (shards <= 1) return `${ks.prefix}:${ks.env}:quota:dirty`;
  return `${ks.prefix}:${ks.env}:quota:{q${shard}}:dirty`;
}
