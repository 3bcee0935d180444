/**
 * Issue 53: the hot path's token cache (token-cache.ts) is told of every change to what it serves.
 * A trigger, not application code, so no write path (admin edit, disable, refresh outcome, expiry,
 * a future one) can forget it: `pg_notify('relay_jobs_wake_detail', 'tokens:<id>')` in the writing
 * transaction, delivered at commit (never for a rolled back write) and, to each listener, in commit
 * order, which is what the cache's freshness pings rely on. Only columns the token answer is made
 * of notify: a refresh failure counter or a name changes nothing served.
 */
export const sql = `
CREATE FUNCTION relay_jobs_token_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('relay_jobs_wake_detail', 'tokens:' || OLD.id);
  RETURN NULL;
END $$;

CREATE TRIGGER accounts_token_changed AFTER UPDATE ON accounts
  FOR EACH ROW WHEN ((OLD.status, OLD.token_version, OLD.token_expires_at, OLD.credentials_sealed)
    IS DISTINCT FROM (NEW.status, NEW.token_version, NEW.token_expires_at, NEW.credentials_sealed))
  EXECUTE FUNCTION relay_jobs_token_changed();
CREATE TRIGGER accounts_token_deleted AFTER DELETE ON accounts
  FOR EACH ROW EXECUTE FUNCTION relay_jobs_token_changed();
`;
