/**
 * The gateway change stream's outbox: a sibling of `scheduler_outbox` (which keeps its own
 * trigger, deduplication and consumer untouched).
 *
 * Every change a gateway caches is recorded by a trigger on the table it changes, so the event is
 * written in the transaction that makes the change, by construction: no write path (admin API,
 * refresh outcome, 401 cooldown, account or proxy expiry, subscription expiry, an order paid by a
 * webhook or expired by `payment_order_expiry`, a quota reset, a path added later) can forget it,
 * and a rolled-back change leaves no event. Unlike the scheduler outbox nothing is deduplicated:
 * each event carries the entity's fields as they were after the change, so a follower sees every
 * transition (an account disabled then enabled is two events).
 *
 * `id` is the event id (stable across republishing: what a follower dedupes on). `seq` is the
 * publish order, set by the one publisher holding the `change_stream_state` row lock, in the
 * transaction that marks the rows published; a reader of `GET /api/v1/changes?after=` pages by it.
 */
export const sql = `
CREATE TABLE change_events (
  id           bigserial PRIMARY KEY,
  type         text NOT NULL,
  entity       text NOT NULL,
  entity_id    text NOT NULL,
  fields       jsonb NOT NULL,
  changed      jsonb,
  at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  seq          bigint UNIQUE,
  published_at timestamptz
);
CREATE INDEX change_events_unpublished ON change_events (id) WHERE seq IS NULL;
CREATE INDEX change_events_published_at ON change_events (published_at) WHERE seq IS NOT NULL;

-- One row: the last seq given out. Its row lock is the publisher's claim (one publisher at a time cluster-wide).
CREATE TABLE change_stream_state (
  id           boolean PRIMARY KEY DEFAULT true CHECK (id),
  seq          bigint NOT NULL DEFAULT 0,
  published_at timestamptz
);
INSERT INTO change_stream_state DEFAULT VALUES;

CREATE FUNCTION change_event_fields(r jsonb, keys text[]) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT COALESCE(jsonb_object_agg(k, COALESCE(r->k, 'null'::jsonb)), '{}'::jsonb) FROM unnest(keys) AS k
$$;

-- TG_ARGV: entity name, the columns a gateway sees (never a credential), whether a status change names the event.
CREATE FUNCTION change_event_record() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  entity text := TG_ARGV[0];
  keys text[] := TG_ARGV[1]::text[];
  status_named boolean := TG_ARGV[2]::boolean;
  new_row jsonb;
  old_row jsonb;
  new_f jsonb;
  old_f jsonb;
  changed jsonb;
  kind text;
BEGIN
  IF TG_OP <> 'DELETE' THEN new_row := to_jsonb(NEW); new_f := change_event_fields(new_row, keys); END IF;
  IF TG_OP <> 'INSERT' THEN old_row := to_jsonb(OLD); old_f := change_event_fields(old_row, keys); END IF;
  IF TG_TABLE_NAME = 'accounts' THEN
    -- What the gateway sees as the status: a refresh in progress keeps the status it started from.
    IF new_f IS NOT NULL THEN new_f := new_f || jsonb_build_object('status', scheduler_routing_status(new_row->>'status', new_row->>'status_before_refresh')); END IF;
    IF old_f IS NOT NULL THEN old_f := old_f || jsonb_build_object('status', scheduler_routing_status(old_row->>'status', old_row->>'status_before_refresh')); END IF;
  END IF;
  IF TG_OP = 'UPDATE' AND new_f = old_f THEN
    RETURN NULL; -- nothing a gateway sees changed (a refresh stamp, a check counter)
  END IF;
  IF TG_OP = 'INSERT' THEN
    kind := 'created';
  ELSIF TG_OP = 'DELETE' THEN
    kind := 'deleted';
    new_f := old_f;
    new_row := old_row;
  ELSE
    SELECT COALESCE(jsonb_agg(k ORDER BY k), '[]'::jsonb) INTO changed FROM unnest(keys) AS k WHERE new_f->k IS DISTINCT FROM old_f->k;
    kind := CASE WHEN status_named AND new_f->'status' IS DISTINCT FROM old_f->'status' THEN new_f->>'status' ELSE 'updated' END;
  END IF;
  INSERT INTO change_events (type, entity, entity_id, fields, changed) VALUES (entity || '.' || kind, entity, new_row->>'id', new_f, changed);
  RETURN NULL;
END
$fn$;

CREATE TRIGGER accounts_change_events AFTER INSERT OR UPDATE OR DELETE ON accounts FOR EACH ROW EXECUTE FUNCTION change_event_record(
  'account',
  '{platform,name,status,status_reason,schedulable,temp_unschedulable_until,temp_unschedulable_reason,proxy_id,sched_group,priority,concurrency,expires_at,token_expires_at,token_version}',
  'false');
CREATE TRIGGER proxies_change_events AFTER INSERT OR UPDATE OR DELETE ON proxies FOR EACH ROW EXECUTE FUNCTION change_event_record(
  'proxy', '{name,status,expires_at,fallback_mode,backup_proxy_id}', 'false');
CREATE TRIGGER subscriptions_change_events AFTER INSERT OR UPDATE OR DELETE ON subscriptions FOR EACH ROW EXECUTE FUNCTION change_event_record(
  'subscription', '{user_id,plan_id,status,starts_at,expires_at}', 'true');
CREATE TRIGGER payment_orders_change_events AFTER INSERT OR UPDATE OR DELETE ON payment_orders FOR EACH ROW EXECUTE FUNCTION change_event_record(
  'payment_order', '{user_id,amount,currency,provider,provider_order_id,purpose,plan_id,status,expires_at,paid_at}', 'true');

-- A quota reset is the epoch rising (PlatformQuota.reset, or a flush that carries the reset's epoch first):
-- one event per reset, whichever write lands it. Ordinary flushes (the count growing) record nothing.
CREATE FUNCTION change_event_quota_reset() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'UPDATE' AND NEW.epoch <= OLD.epoch THEN RETURN NULL; END IF;
  IF TG_OP = 'INSERT' AND NEW.epoch <= 0 THEN RETURN NULL; END IF;
  INSERT INTO change_events (type, entity, entity_id, fields)
  VALUES ('quota.reset', 'quota', NEW.user_id || ':' || NEW.platform,
          jsonb_build_object('user_id', NEW.user_id, 'platform', NEW.platform, 'used', NEW.used, 'epoch', NEW.epoch));
  RETURN NULL;
END
$fn$;
CREATE TRIGGER platform_quota_usage_change_events AFTER INSERT OR UPDATE ON platform_quota_usage FOR EACH ROW EXECUTE FUNCTION change_event_quota_reset();

CREATE TRIGGER change_events_wake AFTER INSERT ON change_events FOR EACH STATEMENT EXECUTE FUNCTION relay_jobs_wake('change_events');
`;
