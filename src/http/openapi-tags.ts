/**
 * The reference page's sections: one tag per area (and a few for the kernel's routes). A route's
 * contract names one of these (contract.ts refuses another at registration); a new area adds its line.
 */
export const TAGS: Readonly<Record<string, string>> = {
  meta: 'The API describing itself: this document and its reference page',
  probes: 'Liveness, readiness and Prometheus metrics, for orchestrators and scrapers (no token)',
  console: 'The web console (HTML and its assets)',
  jobs: 'Jobs, their rounds, run now, pause and resume',
  instances: 'The replicas of the cluster',
  timeline: 'Rounds of a time window, per replica',
  events: "The console's server push (SSE)",
  sessions: 'Admin sessions: sign in and out (bearer token or the console cookie)',
  admin: 'Administration: dead letters, the read-only SQL console',
  doctor: 'Self-checks of the installation',
  ops: 'Ops metrics, alert rules and events, silences, reports',
  scheduler: "The gateway's hot path: schedulable accounts from the scheduler snapshot",
  accounts: 'Upstream OAuth accounts, their tokens, imports and tests; proxies',
  usage: 'Usage batches, quota counters, idempotency keys, recomputes',
  billing: 'Billing users, subscriptions, payment orders and the payment webhook',
  monitors: 'Channel monitors and scheduled account tests',
  images: 'Batch image generation',
  changes: 'The change stream for gateways',
  backups: 'Backups and their verification',
};
