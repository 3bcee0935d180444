/**
 * Alert rules over channel monitors. A rule may carry a monitor selector, and a rule's state and
 * events are kept per series: `''` for a rule over the ops series (one per rule, as before),
 * `monitor:<id>` for each monitor a rule selects, so each monitor has its own streak and event.
 */
export const sql = `
ALTER TABLE ops_alert_rules ADD COLUMN selector jsonb;

ALTER TABLE ops_alert_state ADD COLUMN series text NOT NULL DEFAULT '';
ALTER TABLE ops_alert_state DROP CONSTRAINT ops_alert_state_pkey;
ALTER TABLE ops_alert_state ADD PRIMARY KEY (rule_id, series);

ALTER TABLE ops_alert_events ADD COLUMN series text NOT NULL DEFAULT '';
-- At most one open event per rule and series, whatever the evaluator does.
DROP INDEX ops_alert_events_open;
CREATE UNIQUE INDEX ops_alert_events_open ON ops_alert_events (rule_id, series) WHERE state = 'firing';
`;
