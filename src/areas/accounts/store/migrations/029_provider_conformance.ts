/**
 * Issue 47. `accounts.metadata`: what the provider tells about an account beside its tokens (the
 * ChatGPT account id a Codex test must send, the Gemini Cloud project, the e-mail).
 * `dead_refresh_tokens`: refresh tokens a provider rejected as dead on a second hit, by
 * fingerprint (never the token), so no replica presents one again whichever account carries it.
 */
export const sql = `
ALTER TABLE accounts ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}';

CREATE TABLE dead_refresh_tokens (
  fingerprint text PRIMARY KEY,
  platform    text NOT NULL,
  account_id  bigint,
  reason      text NOT NULL,
  rejected_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
`;
