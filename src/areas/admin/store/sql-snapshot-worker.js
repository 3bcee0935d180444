// @ts-check
// Plain JavaScript, type-checked through JSDoc (tsconfig `checkJs`): the thread loads this very
// file whether relay-jobs runs built or from source (vitest, tsx), with no TypeScript loader to
// register in every new thread.
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';

/**
 * The embedded SQL console's thread (sql-snapshot.ts starts it). It opens a PGlite of its own on
 * a copy of the service's data directory (`workerData.dir`), and runs one statement per message. PGlite runs a statement synchronously and its `statement_timeout` never fires (its
 * timers are JavaScript timers on a thread the statement holds), so nothing here bounds a
 * statement: the owner terminates this whole thread at the deadline. That is why it owns a copy:
 * terminating it can lose nothing and cannot touch the live data directory.
 *
 * @typedef {{ id: number; kind: 'query' | 'explain' | 'show'; text: string; maxRows: number; maxBytes: number; timeoutMs: number }} SnapshotRequest
 * @typedef {{ type: 'ready' } | { type: 'failed'; message: string } | { id: number; ok: true; rows: Array<Record<string, unknown>> } | { id: number; ok: false; message: string; code?: string }} SnapshotReply
 * @typedef {Array<Record<string, unknown>>} Rows
 */

const CURSOR = 'relay_jobs_sql_console';
/** The running byte count (sql-console.ts BYTES_SETTING / BYTES_COLUMN: the main thread cuts the reply by it and strips it). */
const BYTES_SETTING = 'relay_jobs.reply_bytes';
const BYTES_COLUMN = 'relay_jobs_reply_bytes';
/** bytea goes out as hex: twice its bytes. Every other type's size is its text form's (free for text, varchar, json: a cast that copies nothing). */
const BYTEA = 17;
const port = /** @type {import('node:worker_threads').MessagePort} */ (parentPort);
const { dir, pgSettings } = /** @type {{ dir: string; pgSettings: string[] }} */ (workerData);

/** @param {string} name */
const ident = (name) => `"${name.replace(/"/g, '""')}"`;

/**
 * The byte bound, per column: PGlite's memory is this process's, so the statement must not copy a
 * large value (a whole-row text form, a window's tuple store spilled to PGlite's in-memory files
 * each cost another copy; measured +240 MB for a 50 MB value). Each row's size is the sum of its
 * values' sizes (text and the like read from the value's header, bytea as hex, others
 * through their text form), added to a transaction-local running count; past `maxBytes` every value is NULL. The
 * OFFSET 0 keeps the statement a subquery of its own, so a value is computed once, not once per
 * reference.
 * @param {string} text @param {Array<{ name: string; dataTypeID: number }>} fields @param {number} maxBytes
 */
function boundedByBytes(text, fields, maxBytes) {
  const cols = fields.map((_, i) => `c${i + 1}`);
  const size = fields.map((f, i) => (f.dataTypeID === BYTEA ? `coalesce(2 * octet_length(u.${cols[i]}) + 2, 0)` : `coalesce(octet_length(u.${cols[i]}::text), 0)`));
  const add = `set_config('${BYTES_SETTING}', (current_setting('${BYTES_SETTING}')::bigint + ${size.join(' + ')})::text, true)::bigint`;
  const out = fields.map((f, i) => `CASE WHEN s.${BYTES_COLUMN} <= ${Math.floor(maxBytes)} THEN s.${cols[i]} END AS ${ident(f.name)}`);
  return `SELECT ${[...out, `s.${BYTES_COLUMN}`].join(', ')} FROM (SELECT u.*, ${add} AS ${BYTES_COLUMN}
    FROM (SELECT * FROM (${text}) relay_jobs_q OFFSET 0) u(${cols.join(', ')})) s`;
}

/** @param {PGlite} pg @param {SnapshotRequest} req @returns {Promise<Rows>} */
async function run(pg, req) {
  const ms = Math.max(1, Math.round(req.timeoutMs));
  // The columns, without running it (parse and plan only): what the per-column bound is built from.
  const fields = req.kind === 'query' ? (await pg.describeQuery(req.text)).resultFields : [];
  return pg.transaction(async (tx) => {
    // Kept though they cannot fire in PGlite: if a later PGlite honours them, they cut first.
    await tx.query('SET TRANSACTION READ ONLY');
    await tx.query(`SET LOCAL statement_timeout = ${ms}`);
    await tx.query(`SET LOCAL lock_timeout = ${ms}`);
    try {
      if (req.kind !== 'query') return (await tx.query(req.text)).rows;
      const bounded = fields.length ? boundedByBytes(req.text, fields, req.maxBytes) : req.text;
      await tx.query(`SET LOCAL ${BYTES_SETTING} = 0`);
      await tx.query(`DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${bounded}`);
      return (await tx.query(`FETCH FORWARD ${req.maxRows + 1} FROM ${CURSOR}`)).rows;
    } finally {
      // Nothing a statement did to the snapshot outlives it either.
      await tx.rollback();
    }
  });
}

/** @param {SnapshotReply} reply */
const reply = (reply) => port.postMessage(reply);

const ready = PGlite.create(dir, { startParams: [...PGlite.defaultStartParams, ...pgSettings] });
ready.then(
  () => reply({ type: 'ready' }),
  (/** @type {Error} */ err) => reply({ type: 'failed', message: err.message }),
);

port.on('message', (/** @type {SnapshotRequest} */ req) => {
  void ready
    .then((pg) => run(pg, req))
    .then(
      (rows) => reply({ id: req.id, ok: true, rows }),
      (/** @type {Error & { code?: string }} */ err) => reply({ id: req.id, ok: false, message: err.message, code: err.code }),
    );
});
