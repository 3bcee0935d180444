type Tree = Record<string, unknown>;

function section(tree: Tree, key: string): Tree | undefined {
  const v = tree[key];
  return v && typeof v === 'object' && !Array.isArray(v) ? (v as Tree) : undefined;
}

/**
 * Keys that still load but have a replacement. Each is taken out of the raw tree before the
 * schema sees it (so it is not an unknown key) and, where it can be, moved into its
 * replacement; every one leaves a warning naming the replacement. The effective configuration
 * then holds only the replacement, so `config check --print` never prints a deprecated key.
 *
 * - `ops.retention_days.job_runs` (days) → `scheduler.run_retention`: job_runs were pruned by
 *   `scheduler.run_retention` before ops_cleanup reached rows that old, so the old key never
 *   took effect. ops_cleanup (the retention round) now prunes job_runs by that one setting.
 * - `channel_monitor.account_base_url` → `oauth.providers.<platform>.api_url` (issue 47): every
 *   account's tests and monitors were OpenAI chat completions to that one URL, which no OAuth
 *   account could pass; each platform's account test now has its own base URL. The old value has
 *   no meaning in the new shape (a chat-completions host is not a Codex, Claude or Gemini one), so
 *   it is dropped with the warning, not moved.
 */
export function moveDeprecatedKeys(tree: Tree, from: (key: string) => string, sources: Map<string, string>): string[] {
  const warnings: string[] = [];
  const days = section(section(tree, 'ops') ?? {}, 'retention_days');
  if (days && 'job_runs' in days) {
    const value = days.job_runs;
    delete days.job_runs;
    const key = 'ops.retention_days.job_runs';
    const where = from(key);
    const scheduler = section(tree, 'scheduler');
    const head = `${key} (${where}) is deprecated: job_runs records are pruned by scheduler.run_retention`;
    if (scheduler && scheduler.run_retention !== undefined) {
      warnings.push(`${head}, which is also set (${from('scheduler.run_retention')}) and wins; remove ${key}`);
    } else if (typeof value === 'number' && Number.isInteger(value) && value > 0) {
      tree.scheduler = { ...(scheduler ?? {}), run_retention: `${value}d` };
      sources.set('scheduler.run_retention', `${where} as ${key}`);
      warnings.push(`${head}; its ${value} days are used as scheduler.run_retention: ${value}d (write that instead)`);
    } else {
      warnings.push(`${head}, which takes a positive duration; ${JSON.stringify(value)} is ignored and scheduler.run_retention keeps its default`);
    }
  }
  const monitor = section(tree, 'channel_monitor');
  if (monitor && 'account_base_url' in monitor) {
    delete monitor.account_base_url;
    const key = 'channel_monitor.account_base_url';
    warnings.push(
      `${key} (${from(key)}) is no longer used and is ignored: monitors and tests with an account_id send their platform's account test to oauth.providers.<platform>.api_url (docs/providers.md); remove it`,
    );
  }
  return warnings;
}
