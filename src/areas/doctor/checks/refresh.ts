import { formatDuration } from '../../../config/duration.js';
import { combine, fail, ok, warn, type CheckOutcome, type DoctorCheck } from '../check.js';
import { refreshRetryBudgetMs } from '../../accounts/index.js';

const d = (ms: number) => formatDuration(Math.max(1000, Math.round(ms / 1000) * 1000));

/**
 * Refresh margin against the retries. A refresh is planned at least the margin before expiry
 * (refresh-timing.ts: the jitter only moves it earlier), and retries are deadline-aware: they are
 * squeezed (down to `auth.refresh_retry_floor` apart) rather than scheduled past the token's
 * expiry. `warn` when the margin is shorter than the retry schedule (`refreshRetryBudgetMs`,
 * accounts/config.ts: the backoff the refresher uses, the same that `config check` and the
 * start-up log compare with), so failures would squeeze it; `fail` when even squeezed the
 * attempts cannot fit (their request timeouts plus the floors: the token then lapses whenever the
 * provider fails). The requests' own time is shown beside the schedule.
 */
export const refreshMargin: DoctorCheck = {
  name: 'refresh_margin',
  group: 'refresh',
  modes: ['cluster', 'embedded'],
  async run({ config, jobs }) {
    if (!config.auth.refresh_enabled || !jobs.some((j) => j.name === 'token_refresh' && j.settings.enabled))
      return ok('token refresh is off (auth.refresh_enabled or jobs.token_refresh.enabled)', 'nothing to do');
    const a = config.auth;
    const margin = a.refresh_margin_seconds * 1000;
    const latency = a.refresh_max_attempts * a.refresh_request_timeout;
    // The same schedule `config check` and the start-up log compare the margin with (one definition).
    const budget = refreshRetryBudgetMs(config);
    const squeezed = latency + (a.refresh_max_attempts - 1) * a.refresh_retry_floor;
    const measured = `auth.refresh_margin_seconds ${a.refresh_margin_seconds} (latest start ${d(margin)} before expiry) vs the retry schedule ${d(budget)} (auth.refresh_max_attempts ${a.refresh_max_attempts}, backoff ${d(a.refresh_backoff_base)}…${d(a.refresh_backoff_max)}) plus up to ${d(latency)} of requests (auth.refresh_request_timeout ${d(a.refresh_request_timeout)} each), ${d(squeezed)} when squeezed to auth.refresh_retry_floor`;
    const fix = `raise auth.refresh_margin_seconds to at least ${Math.ceil(Math.max(budget, squeezed) / 1000)}, or lower auth.refresh_max_attempts / auth.refresh_backoff_max / auth.refresh_request_timeout`;
    if (margin < squeezed) return fail(measured, fix);
    if (margin < budget) return warn(measured, fix);
    return ok(measured, fix);
  },
};

/** Refreshable accounts whose token expires before their latest planned refresh (margin/2 before expiry), or already expired. */
export const tokenExpiry: DoctorCheck = {
  name: 'token_expiry',
  group: 'refresh',
  modes: ['cluster', 'embedded'],
  async run({ config, facts, nowMs }) {
    if (!config.auth.refresh_enabled) return ok('token refresh is off (auth.refresh_enabled)', 'nothing to do');
    const late = await facts.expiringTokens((config.auth.refresh_margin_seconds * 1000) / 2);
    const name = (a: { id: number; name: string; platform: string }) => `${a.id} ${a.name} (${a.platform})`;
    const expired = late.filter((a) => a.expiresAt.getTime() <= nowMs);
    const findings: CheckOutcome[] = [];
    const fix = 'look at the accounts in GET /api/v1/accounts?status=expired and the token_refresh rounds; re-authorize accounts whose refresh token is dead';
    if (expired.length) findings.push(fail(`${expired.length}${expired.length === 20 ? '+' : ''} refreshable account(s) with an expired token: ${expired.slice(0, 5).map(name).join(', ')}`, fix));
    const soon = late.filter((a) => a.expiresAt.getTime() > nowMs);
    if (soon.length) findings.push(warn(`${soon.length} account(s) inside half the refresh margin and not refreshed yet: ${soon.slice(0, 5).map(name).join(', ')}`, fix));
    return combine(findings, ok('every refreshable token expires after its planned refresh', fix));
  },
};

/** The per-platform refresh breaker of this replica: open means a provider (or our OAuth client) is failing. */
export const refreshBreaker: DoctorCheck = {
  name: 'refresh_breaker',
  group: 'refresh',
  modes: ['cluster', 'embedded'],
  async run({ breakers }) {
    const open = breakers();
    if (!open.length) return ok('no platform breaker open on this replica', 'nothing to do');
    return warn(
      `breaker open for ${open.map((b) => `${b.platform} (${b.reason}, ${d(b.ms)} left)`).join(', ')}`,
      'check the provider status and oauth.providers.<platform> (client id, token_url); the breaker closes by itself after auth.refresh_breaker_open',
    );
  },
};

/**
 * Refreshes the provider refused as our fault (issue 47): a wrong token URL (404), a client id it
 * does not know, a missing client secret, a body in the wrong encoding. No account is marked for
 * them (they retry every auth.refresh_recovery_delay), so this check is where they show, and the
 * doctor job raises an alert for it.
 */
export const oauthConfig: DoctorCheck = {
  name: 'oauth_config',
  group: 'refresh',
  modes: ['cluster', 'embedded'],
  async run({ facts }) {
    const faults = await facts.oauthConfigFaults();
    const fix = 'fix oauth.providers.<platform> (token_url, client_id, client_secret, body) as docs/providers.md says, then POST /api/v1/accounts/{id}/refresh one account to check';
    if (!faults.length) return ok('no refresh refused as a configuration fault', fix);
    return fail(faults.map((f) => `${f.platform}: ${f.accounts} account(s) last refused as ${f.reason.slice('config:'.length)}`).join('; '), fix);
  },
};
