import { AppError } from '../../../errors/app-error.js';

/** A statement the SQL console will not run, with the reason the caller sees (kind invalid). */
export class SqlRefused extends AppError {
  constructor(message: string) {
    super('invalid', 'sql_refused', message);
  }
}

/**
 * The console cannot run now (busy, unsafe role, shutting down; or it gave way to a lock the
 * service needed): HTTP 503/429/409 with the reason, never the statement's fault.
 */
export class SqlUnavailable extends AppError {
  constructor(
    message: string,
    readonly reason: 'busy' | 'unsafe_role' | 'unavailable' | 'locked',
  ) {
    super(reason === 'busy' ? 'rate_limited' : reason === 'locked' ? 'conflict' : 'unavailable', `sql_${reason}`, message, undefined, undefined, reason === 'busy' ? 1 : undefined);
  }
}

export interface ClassifiedStatement {
  /** `query` (SELECT / WITH / TABLE / VALUES: read through a cursor), `explain` or `show` (small, bounded results). */
  kind: 'query' | 'explain' | 'show';
  /** The statement's own text, without a trailing `;` or comments around it. */
  text: string;
}

/**
 * Functions a read-only console must not call: they read or write host files, run programs,
 * touch large objects, change settings beyond the statement (set_config), signal or reconfigure
 * the server, take advisory locks, move sequences, assign transaction ids, notify, or run SQL
 * text of their own (query_to_xml, ts_stat), which the parser cannot see into.
 */
const DENIED = new Set([
  'set_config',
  'nextval',
  'setval',
  'setseed',
  'pg_notify',
  'pg_terminate_backend',
  'pg_cancel_backend',
  'pg_reload_conf',
  'pg_rotate_logfile',
  'pg_promote',
  'pg_switch_wal',
  'pg_create_restore_point',
  'pg_backup_start',
  'pg_backup_stop',
  'pg_log_backend_memory_contexts',
  'pg_import_system_collations',
  'pg_stat_file',
  'pg_logdir_ls',
  'pg_truncate_visibility_map',
  'pg_prewarm',
  'query_to_xml',
  'query_to_xmlschema',
  'query_to_xml_and_xmlschema',
  'cursor_to_xml',
  'cursor_to_xmlschema',
  'ts_stat',
  'ts_rewrite',
  'loread',
  'lowrite',
  'txid_current',
  'txid_current_if_assigned',
  'pg_current_xact_id',
  'pg_current_xact_id_if_assigned',
  'brin_summarize_new_values',
  'brin_summarize_range',
  'brin_desummarize_range',
  'gin_clean_pending_list',
  'pg_export_snapshot',
]);
/** Whole families, by prefix (file access, large objects, dblink, advisory locks, replication, WAL replay, statistics resets, adminpack). */
const DENIED_PREFIXES = [
  'pg_read_',
  'pg_ls_',
  'pg_file_',
  'lo_',
  'dblink',
  'pg_advisory',
  'pg_try_advisory',
  'pg_replication_',
  'pg_create_',
  'pg_drop_',
  'pg_logical_',
  'pg_wal_replay_',
  'pg_stat_reset',
  'binary_upgrade_',
];

const WRITE_NODES: Record<string, string> = {
  InsertStmt: 'INSERT',
  UpdateStmt: 'UPDATE',
  DeleteStmt: 'DELETE',
  MergeStmt: 'MERGE',
};

/** Statement node names as PostgreSQL's grammar calls them, translated to what a person typed. */
const STATEMENT_NAMES: Record<string, string> = {
  CopyStmt: 'COPY',
  VariableSetStmt: 'SET',
  DoStmt: 'DO',
  CallStmt: 'CALL',
  LockStmt: 'LOCK',
  ListenStmt: 'LISTEN',
  NotifyStmt: 'NOTIFY',
  TransactionStmt: 'a transaction command',
  DeclareCursorStmt: 'DECLARE',
  CreateTableAsStmt: 'CREATE TABLE AS',
  ...WRITE_NODES,
};

/**
 * The SQL console's gate: PostgreSQL's own parser (libpg_query, compiled to WASM) reads the text,
 * and only one SELECT / WITH without data-modifying parts / TABLE / VALUES / EXPLAIN without
 * ANALYZE / SHOW passes, with no denied function called anywhere in the tree. Not a regex: a
 * comment, a quoted `;` or a dollar-quoted string cannot hide a second statement from it.
 */
export async function classifyStatement(text: string): Promise<ClassifiedStatement> {
  let stmts: Array<{ stmt?: Record<string, unknown>; stmt_location?: number; stmt_len?: number }>;
  // Imported on first use: the parser's 1.7 MB of WASM is compiled only where the console is used.
  const { parse } = await import('libpg-query');
  try {
    stmts = (await parse(text)).stmts ?? [];
  } catch (err) {
    throw new SqlRefused(`syntax error: ${(err as Error).message}`);
  }
  if (stmts.length !== 1 || !stmts[0]!.stmt) throw new SqlRefused(`expected exactly one SQL statement, got ${stmts.length}`);
  const { stmt, stmt_location = 0, stmt_len = 0 } = stmts[0]!;
  const [node, body] = Object.entries(stmt!)[0] as [string, Record<string, unknown>];
  // Offsets are bytes of UTF-8, not UTF-16 code units.
  const bytes = Buffer.from(text, 'utf8');
  const own = bytes
    .subarray(stmt_location, stmt_len ? stmt_location + stmt_len : undefined)
    .toString('utf8')
    .trim();
  let kind: ClassifiedStatement['kind'];
  if (node === 'SelectStmt') kind = 'query';
  else if (node === 'VariableShowStmt') kind = 'show';
  else if (node === 'ExplainStmt') {
    kind = 'explain';
    const options = (body.options as Array<{ DefElem: { defname: string } }> | undefined) ?? [];
    if (options.some((o) => o.DefElem.defname.toLowerCase() === 'analyze')) throw new SqlRefused('EXPLAIN ANALYZE runs the statement; the console allows EXPLAIN without ANALYZE');
    const inner = Object.keys(body.query as object)[0];
    if (inner !== 'SelectStmt') throw new SqlRefused(`EXPLAIN of ${STATEMENT_NAMES[inner!] ?? inner} is refused: the console explains SELECT / WITH / TABLE / VALUES only`);
  } else {
    throw new SqlRefused(`${STATEMENT_NAMES[node] ?? node.replace(/Stmt$/, '')} is refused: the console is read-only and runs one SELECT, WITH, TABLE, VALUES, EXPLAIN (without ANALYZE) or SHOW`);
  }
  walk(stmt);
  return { kind, text: own };
}

/** Every node of the parse tree, iteratively (hostile nesting cannot overflow the stack). */
function walk(root: unknown): void {
  const stack: unknown[] = [root];
  while (stack.length) {
    const v = stack.pop();
    if (Array.isArray(v)) {
      stack.push(...(v as unknown[]));
      continue;
    }
    if (typeof v !== 'object' || v === null) continue;
    for (const [key, child] of Object.entries(v as Record<string, unknown>)) {
      if (key in WRITE_NODES) throw new SqlRefused(`a data-modifying part (${WRITE_NODES[key]}) is refused: the console is read-only`);
      if (key === 'intoClause') throw new SqlRefused('SELECT INTO creates a table and is refused: the console is read-only');
      if (key === 'lockingClause') throw new SqlRefused('FOR UPDATE / FOR SHARE lock rows and are refused: the console is read-only');
      if (key === 'FuncCall') checkFunction(child as { funcname: Array<{ String: { sval: string } }> });
      stack.push(child);
    }
  }
}

function checkFunction(call: { funcname: Array<{ String: { sval: string } }> }): void {
  const name = (call.funcname.at(-1)?.String.sval ?? '').toLowerCase();
  const why = 'the console is read-only and calls no function that reads host files, runs programs, uses large objects, changes settings, signals the server, locks or moves sequences';
  if (DENIED.has(name) || DENIED_PREFIXES.some((p) => name.startsWith(p))) throw new SqlRefused(`function ${name}() is refused: ${why}`);
}
