/**
 * Rows a pipeline could not store: the database refused them for their content (a data
 * exception), so retrying cannot help. They are set aside here, with the database's reason,
 * instead of blocking their batch forever. `payload` is JSON text, not jsonb: the offending
 * text (a NUL, a lone surrogate) is kept escaped, which jsonb would refuse.
 */
export const sql = `
CREATE TABLE dead_letters (
  id         bigserial PRIMARY KEY,
  source     text NOT NULL,
  reason     text NOT NULL,
  payload    text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX dead_letters_source_id ON dead_letters (source, id);
`;
