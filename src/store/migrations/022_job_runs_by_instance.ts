/**
 * Health per replica (scheduler/health.ts judgeReplicas): the newest round of an instance-scoped
 * job on each live replica is one index probe per (job, replica), however many rounds the job
 * has recorded and however long a replica has gone without one.
 */
export const sql = `
CREATE INDEX job_runs_by_job_instance ON job_runs (job_name, instance_id, started_at DESC);
`;
