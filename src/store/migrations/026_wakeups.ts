/**
 * Wake-ups (issue 26): a write that creates work notifies, in its own transaction, the loop that
 * consumes it (`pg_notify('relay_jobs_wake', <topic>)`; delivered at commit, never for a rolled
 * back write, and PostgreSQL folds identical notifications of one transaction into one). Triggers,
 * not application code, so no write path can forget it. Only changes that make work due sooner
 * notify: a claim or a completion moves the due time later and stays silent, so a loop never
 * wakes the others by doing its own work. Each replica LISTENs on its liveness session.
 */
export const sql = `
CREATE FUNCTION relay_jobs_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('relay_jobs_wake', TG_ARGV[0]);
  RETURN NULL;
END $$;

CREATE TRIGGER scheduler_outbox_wake AFTER INSERT ON scheduler_outbox
  FOR EACH ROW EXECUTE FUNCTION relay_jobs_wake('scheduler_outbox');

CREATE TRIGGER monitors_wake_insert AFTER INSERT ON monitors
  FOR EACH ROW WHEN (NEW.enabled) EXECUTE FUNCTION relay_jobs_wake('monitors');
CREATE TRIGGER monitors_wake_update AFTER UPDATE ON monitors
  FOR EACH ROW WHEN (NEW.enabled AND (NOT OLD.enabled OR NEW.next_due_at < OLD.next_due_at))
  EXECUTE FUNCTION relay_jobs_wake('monitors');

CREATE TRIGGER account_test_plans_wake_insert AFTER INSERT ON account_test_plans
  FOR EACH ROW WHEN (NEW.enabled) EXECUTE FUNCTION relay_jobs_wake('account_tests');
CREATE TRIGGER account_test_plans_wake_update AFTER UPDATE ON account_test_plans
  FOR EACH ROW WHEN (NEW.enabled AND (NOT OLD.enabled OR NEW.next_run_at < OLD.next_run_at))
  EXECUTE FUNCTION relay_jobs_wake('account_tests');

CREATE TRIGGER image_batch_queue_wake_insert AFTER INSERT ON image_batch_queue
  FOR EACH ROW WHEN (NEW.status = 'ready') EXECUTE FUNCTION relay_jobs_wake('image_queue');
CREATE TRIGGER image_batch_queue_wake_update AFTER UPDATE ON image_batch_queue
  FOR EACH ROW WHEN (NEW.status = 'ready' AND (OLD.status <> 'ready' OR NEW.run_at < OLD.run_at))
  EXECUTE FUNCTION relay_jobs_wake('image_queue');
`;
