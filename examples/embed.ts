/**
 * relay-jobs embedded in a gateway process: start the runtime, add one periodic job of the
 * gateway's own, use the hot-path APIs (an account's access token, usage records, quota), shut
 * down cleanly. Run it from the repository with `npx tsx --tsconfig examples/tsconfig.json
 * examples/embed.ts`; in a project that depends on relay-jobs, the same code runs as it is.
 *
 * Embedded mode keeps its data in RELAY_JOBS_DATA_DIR; the example defaults it to ./data-example, so it
 * never writes into the data directory of a service started from the same checkout. Set DATABASE_URL and
 * REDIS_URL (and RELAY_JOBS_INSTANCE_ID, RELAY_JOBS_ENV, RELAY_JOBS_MASTER_KEY) for a cluster.
 */
import { Runtime, defineJob, loadConfig, createLogger } from 'relay-jobs';

// A gateway's own job: once per slot across the whole cluster, with the same lock, slot claim,
// lease, run record and health as the built-in jobs. `needs` names the services it uses.
const staleKeyReport = defineJob({
  name: 'gateway_stale_key_report',
  description: 'Counts accounts whose token expires within the hour (a gateway-specific report)',
  scope: 'cluster',
  defaults: { enabled: true, every: '10m', timeout: '30s' },
  needs: ['accounts'],
  async run(ctx, { accounts }) {
    const soon = (await accounts.list({ limit: 1000 })).filter((a) => a.token_expires_at && Date.parse(a.token_expires_at) - ctx.clock.now() < 3_600_000);
    ctx.log.info({ expiring: soon.length }, 'accounts expiring within the hour');
    return { items: soon.length, note: `${soon.length} expiring` };
  },
});

// RELAY_JOBS_CONFIG, RELAY_JOBS_* variables; `jobs.gateway_stale_key_report.*` works too. Its own data
// directory unless one is given: the example's fake account must not land in a service's ./data.
const config = loadConfig({ env: { RELAY_JOBS_DATA_DIR: 'data-example', ...process.env } });
const log = createLogger({ level: config.logging.level, format: config.logging.format, instanceId: config.instance.id, env: config.instance.env });
const runtime = await Runtime.create(config, { jobs: [staleKeyReport], logger: log });
runtime.start();

// Stop with the process: SIGTERM/SIGINT run the shutdown ladder (drain usage, flush quota, close).
for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void runtime.shutdown(`received ${sig}`));

const { accounts, tokens, usage, quota } = runtime.services;

// An account the gateway pools (normally created through POST /api/v1/accounts).
const account = await accounts.create({
  platform: 'openai',
  name: 'example-account',
  credentials: { access_token: 'example-access-token', refresh_token: 'example-refresh-token' },
  tokenExpiresAt: new Date(Date.now() + 6 * 3_600_000),
});

// Hot path, per upstream request: a valid access token (refreshed first, once cluster-wide, if it is about to expire).
const token = await tokens.getAccessToken(account.id);

// After the upstream answered: one usage record (queued, written in batches) and the user's quota.
const outcome = await usage.record({
  request_id: `req-${Date.now()}`,
  user_id: 'user-1',
  account_id: account.id,
  platform: 'openai',
  model: 'gpt-4o',
  input_tokens: 120,
  output_tokens: 30,
  cost: '0.0012',
});
const { used } = await quota.increment('user-1', 'openai', 150);

// The gateway's job runs on its schedule; run one round now to see it.
const report = await runtime.runNow('gateway_stale_key_report');

process.stdout.write(
  JSON.stringify({
    token_version: token.token_version,
    has_token: token.access_token.length > 0,
    usage: outcome,
    quota_used: used,
    job: report.ran ? report.outcome : { not_started: report.reason },
    jobs: (await runtime.jobViews()).filter((j) => j.name === 'gateway_stale_key_report').map((j) => ({ name: j.name, enabled: j.enabled, schedule: j.schedule })),
  }) + '\n',
);

if (process.env.EXAMPLE_EXIT !== 'stay') await runtime.shutdown('example finished');
