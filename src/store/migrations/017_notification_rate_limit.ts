/**
 * The cluster-wide per-channel send budget (`notify.rate_limit`): `count` slots per channel, a
 * slot held from the moment a sender takes it until `period` after its send finished (or, if the
 * sender dies, until the pessimistic hold it took expires). A send needs a free slot, so no
 * `period`-long interval sees more than `count` sends of a channel, whatever the replica count.
 * A delivery the budget refuses goes back to `pending` at the first slot's release, counted in
 * `deferrals` and flagged `rate_limited`, never as a failed attempt.
 */
export const sql = `
CREATE TABLE notification_channel_slots (
  channel    text NOT NULL,
  slot       integer NOT NULL,
  busy_until timestamptz NOT NULL DEFAULT '-infinity',
  token      text,
  PRIMARY KEY (channel, slot)
);

ALTER TABLE notification_deliveries
  ADD COLUMN deferrals integer NOT NULL DEFAULT 0,
  ADD COLUMN rate_limited boolean NOT NULL DEFAULT false;
`;
