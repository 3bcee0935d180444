// The replica environment shared by the two scheduler-snapshot end-to-end files (the epoch chaos
// run and the convergence run): the same three-replica cluster, a short claim TTL so a killed
// replica's rebuild claim expires within the convergence bound, account expiry every second.
export const SNAPSHOT_CLUSTER_ENV: Record<string, string> = {
  RELAY_JOBS__DATABASE__POOL_SIZE: '4',
  RELAY_JOBS__SHUTDOWN__GRACE: '5s',
  RELAY_JOBS__AUTH__REFRESH_ENABLED: 'false',
  RELAY_JOBS__JOBS__ACCOUNT_EXPIRY__EVERY: '1s',
  RELAY_JOBS__SNAPSHOT__CLAIM_TTL: '5s',
};

/** One bucket's answer from `GET /api/v1/scheduler/accounts`. */
export interface SnapshotAnswer {
  source: string;
  epoch: number;
  accounts: { id: number }[];
}
