#!/usr/bin/env bash
# PostgreSQL init script for deploy/compose.yaml, mounted into /docker-entrypoint-initdb.d: the
# postgres image runs it once, when it creates an empty data directory, as the superuser
# POSTGRES_USER. It makes the two roles relay-jobs connects as, neither of them a superuser:
#
#   relay_jobs          the service (DATABASE_URL). Owns the database, so the replicas' migrations
#                       create and alter its tables; cannot create roles or databases.
#   relay_jobs_console  the SQL console (sql.database_url). May connect to this database and see
#                       its schema, nothing else: no other database, no server files, no table
#                       until the console grants below are run.
#
# The passwords come from the environment (compose.yaml requires them to be set) and reach the
# server only as psql variables, quoted by psql. An existing data directory is left alone: to
# change a password later, ALTER ROLE … PASSWORD by hand (and the variable with it).
set -Eeo pipefail

: "${POSTGRES_USER:?}" "${POSTGRES_DB:?}"
: "${RELAY_JOBS_DB_PASSWORD:?set RELAY_JOBS_DB_PASSWORD (the relay_jobs role)}"
: "${RELAY_JOBS_CONSOLE_DB_PASSWORD:?set RELAY_JOBS_CONSOLE_DB_PASSWORD (the relay_jobs_console role)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  --set db="$POSTGRES_DB" \
  --set app_password="$RELAY_JOBS_DB_PASSWORD" \
  --set console_password="$RELAY_JOBS_CONSOLE_DB_PASSWORD" <<'SQL'
-- CREATEDB: backup.verify (on in cluster mode) restores each backup into a scratch database
-- (rj_verify_<id>) and drops it. With backup.verify: false the role needs NOCREATEDB only.
CREATE ROLE relay_jobs LOGIN NOSUPERUSER CREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  PASSWORD :'app_password';
CREATE ROLE relay_jobs_console LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  PASSWORD :'console_password';

-- The service owns its database (and so, on PostgreSQL 15, its public schema).
ALTER DATABASE :"db" OWNER TO relay_jobs;
ALTER SCHEMA public OWNER TO relay_jobs;

-- Nobody else connects: the console gets this database only, and no role but the superuser
-- reaches the maintenance database.
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
REVOKE CONNECT ON DATABASE postgres FROM PUBLIC;
REVOKE CONNECT ON DATABASE template1 FROM PUBLIC;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT CONNECT ON DATABASE :"db" TO relay_jobs_console;
GRANT USAGE ON SCHEMA public TO relay_jobs_console;

-- ======================= CONSOLE GRANTS: NOT HERE, AFTER THE FIRST START =======================
-- The console reads the service's own tables only, with credential and secret columns left out.
-- Those tables do not exist yet (the replicas create them at their first start, and later
-- releases add more), so no SELECT is granted here, and none by default privileges (which cannot
-- leave columns out). Once the replicas are up, and again after an upgrade that adds tables, run
-- the console role recipe of docs/security.md ("SQL console role") as the superuser, with
-- relay -> relay_jobs, relay_sql -> relay_jobs_console and without its CREATE ROLE line:
--   docker compose -p relay-jobs -f deploy/compose.yaml exec -T postgres \
--     psql -v ON_ERROR_STOP=1 -U postgres -d relay_jobs -f - < console-grants.sql
-- Until then the console answers every table with "permission denied": it fails closed.
-- (test/deploy-files.test.ts runs this script, the migrations and that recipe on a real server.)
-- ===============================================================================================
SQL
