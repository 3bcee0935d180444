/**
 * The scheduler snapshot's outbox, made complete and consumable.
 *
 * Every change to what routing sees of an account is recorded by a trigger on `accounts`, so
 * the event is written in the same transaction as the change by construction: no write path
 * (admin edit, refresh outcome, 401 cooldown, account or proxy expiry, restore, a future one)
 * can forget it. The trigger also stamps `sched_version` from one sequence: per account the
 * versions rise in commit order (row updates are serialised by the row lock), which is the
 * epoch the snapshot compares so an older writer can never overwrite a newer entry.
 *
 * Events of one account are deduplicated while pending (never claimed) by a partial unique
 * index; a claimed event leaves the index, so a change made while it is being applied records
 * a new one. Events carry only the account id (and the buckets it left): the consumer re-reads
 * the row, so a deduplicated event loses nothing.
 */
export const sql = `
ALTER TABLE accounts
  ADD COLUMN priority      integer NOT NULL DEFAULT 50 CHECK (priority BETWEEN 0 AND 10000),
  ADD COLUMN concurrency   integer NOT NULL DEFAULT 3 CHECK (concurrency BETWEEN 0 AND 100000),
  ADD COLUMN sched_group   text,
  ADD COLUMN sched_version bigint NOT NULL DEFAULT 0;
CREATE INDEX accounts_sched_bucket ON accounts (platform, (COALESCE(sched_group, '')), id);

CREATE SEQUENCE scheduler_snapshot_version;

ALTER TABLE scheduler_outbox
  ADD COLUMN dedup_key     text,
  ADD COLUMN claim_token   text,
  ADD COLUMN claimed_until timestamptz,
  ADD COLUMN attempts      integer NOT NULL DEFAULT 0,
  ADD COLUMN consumed_at   timestamptz;
-- At most one pending (unclaimed, unconsumed) event per dedup key: a hot account cannot flood the outbox.
CREATE UNIQUE INDEX scheduler_outbox_pending_dedup ON scheduler_outbox (dedup_key)
  WHERE dedup_key IS NOT NULL AND claim_token IS NULL AND consumed_at IS NULL;
CREATE INDEX scheduler_outbox_unconsumed ON scheduler_outbox (id) WHERE consumed_at IS NULL;
CREATE INDEX scheduler_outbox_consumed ON scheduler_outbox (id) WHERE consumed_at IS NOT NULL;

-- One row: the consumer's watermark (highest event id applied) and the last full rebuild.
CREATE TABLE scheduler_snapshot_state (
  id                  boolean PRIMARY KEY DEFAULT true CHECK (id),
  watermark           bigint NOT NULL DEFAULT 0,
  watermark_at        timestamptz,
  last_rebuild_at     timestamptz,
  last_rebuild_reason text,
  last_rebuild_epoch  bigint
);
INSERT INTO scheduler_snapshot_state DEFAULT VALUES;

-- What routing sees as the status: a refresh in progress keeps the status it started from.
CREATE FUNCTION scheduler_routing_status(status text, before_refresh text) RETURNS text
  LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN status = 'refreshing' THEN COALESCE(before_refresh, 'active') ELSE status END $$;

CREATE FUNCTION scheduler_account_outbox() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  acc_id bigint;
  left_bucket jsonb := '[]'::jsonb;
BEGIN
  IF TG_OP = 'UPDATE' AND
     (NEW.platform, NEW.sched_group, scheduler_routing_status(NEW.status, NEW.status_before_refresh), NEW.schedulable,
      NEW.temp_unschedulable_until, NEW.proxy_id, NEW.token_expires_at, NEW.priority, NEW.concurrency)
     IS NOT DISTINCT FROM
     (OLD.platform, OLD.sched_group, scheduler_routing_status(OLD.status, OLD.status_before_refresh), OLD.schedulable,
      OLD.temp_unschedulable_until, OLD.proxy_id, OLD.token_expires_at, OLD.priority, OLD.concurrency) THEN
    RETURN NEW; -- nothing routing sees changed (a refresh stamp, a failure counter, a name)
  END IF;
  IF TG_OP = 'DELETE' THEN
    acc_id := OLD.id;
    left_bucket := jsonb_build_array(jsonb_build_array(OLD.platform, COALESCE(OLD.sched_group, '')));
  ELSE
    acc_id := NEW.id;
    NEW.sched_version := nextval('scheduler_snapshot_version');
    IF TG_OP = 'UPDATE' AND (NEW.platform, COALESCE(NEW.sched_group, '')) IS DISTINCT FROM (OLD.platform, COALESCE(OLD.sched_group, '')) THEN
      left_bucket := jsonb_build_array(jsonb_build_array(OLD.platform, COALESCE(OLD.sched_group, '')));
    END IF;
  END IF;
  INSERT INTO scheduler_outbox (event_type, payload, dedup_key)
  VALUES ('account_changed', jsonb_build_object('account_id', acc_id, 'left', left_bucket), 'account:' || acc_id)
  ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND claim_token IS NULL AND consumed_at IS NULL
  DO UPDATE SET payload = jsonb_set(scheduler_outbox.payload, '{left}', COALESCE(scheduler_outbox.payload->'left', '[]'::jsonb) || (EXCLUDED.payload->'left'))
  WHERE jsonb_array_length(EXCLUDED.payload->'left') > 0;
  PERFORM pg_notify('scheduler_outbox', '');
  IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
  RETURN NEW;
END
$fn$;

CREATE TRIGGER accounts_scheduler_outbox BEFORE INSERT OR UPDATE OR DELETE ON accounts
  FOR EACH ROW EXECUTE FUNCTION scheduler_account_outbox();
`;
