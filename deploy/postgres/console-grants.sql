-- The SQL console role's read grants (docs/security.md, "SQL console role"), for the database relay
-- and the role relay_sql: rename both for yours. Run as a superuser connected to the service's
-- database, after the first start (the migrations make the tables) and after every upgrade.
-- Generated from src/areas/admin/store/console-role.ts; test/deploy-files.test.ts keeps it equal.
GRANT CONNECT ON DATABASE relay TO relay_sql;
GRANT USAGE ON SCHEMA public TO relay_sql;
-- Every column of the service's tables except the secret ones (src/areas/admin/store/console-role.ts).
DO $$
DECLARE
  secret CONSTANT text[] := ARRAY['accounts.credentials_sealed', 'accounts.refresh_sent_fp', 'proxies.url_sealed', 'monitors.api_key_sealed', 'admin_sessions.token_hash', 'admin_sessions.admin_fingerprint', 'dead_refresh_tokens.fingerprint', 'secret_keys.fingerprint'];
  t record;
BEGIN
  FOR t IN
    SELECT c.relname,
           string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE NOT c.relname || '.' || a.attname = ANY (secret)) AS readable,
           bool_or(c.relname || '.' || a.attname = ANY (secret)) AS has_secret
      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm') AND NOT c.relispartition
     GROUP BY c.relname
  LOOP
    EXECUTE format('REVOKE ALL ON public.%I FROM relay_sql', t.relname);
    IF t.has_secret THEN
      EXECUTE format('GRANT SELECT (%s) ON public.%I TO relay_sql', t.readable, t.relname);
    ELSE
      EXECUTE format('GRANT SELECT ON public.%I TO relay_sql', t.relname);
    END IF;
  END LOOP;
END $$;
