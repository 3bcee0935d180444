/**
 * Issue 26: a backup that starts notifies `backups` (migration 026's `relay_jobs_wake`), so each
 * replica's backup reaper looks when a lease appears and then sleeps until that lease could
 * expire, instead of reading `backups` every lease period while nothing runs.
 */
export const sql = `
CREATE TRIGGER backups_wake_insert AFTER INSERT ON backups
  FOR EACH ROW WHEN (NEW.state = 'running') EXECUTE FUNCTION relay_jobs_wake('backups');
`;
