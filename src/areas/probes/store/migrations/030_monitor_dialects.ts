/**
 * Issue 47: a channel monitor speaks its provider's API-key dialect (`provider`: openai,
 * anthropic, gemini), may check an arithmetic challenge in the answer (`challenge`), and may set
 * its own threshold for a slow answer (`degraded_after_ms`; null: `channel_monitor.degraded_after`).
 */
export const sql = `
ALTER TABLE monitors ADD COLUMN provider text NOT NULL DEFAULT 'openai' CHECK (provider IN ('openai', 'anthropic', 'gemini'));
ALTER TABLE monitors ADD COLUMN challenge boolean NOT NULL DEFAULT false;
ALTER TABLE monitors ADD COLUMN degraded_after_ms integer CHECK (degraded_after_ms > 0);
`;
