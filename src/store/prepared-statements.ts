import { createHash } from 'node:crypto';
import type pg from 'pg';

/** How many distinct statement texts one pool names at most; further texts run unnamed (a text built at run time must not grow every server connection's cache). */
export const MAX_NAMED_STATEMENTS = 500;

/**
 * Named (server-side prepared) statements for a pool's parametrised queries. PostgreSQL parses
 * and plans an unnamed statement again every time; in a replica's steady rhythm (heartbeat,
 * schedule check, slot claims) that was most of the server's CPU per statement (parse 0.5 ms,
 * bind 0.4 ms, execute 0.05 ms in one logged `DELETE`). A named one is parsed once per connection
 * and its plan cached (PostgreSQL chooses a generic plan after five runs only when it costs no
 * more than the custom ones).
 *
 * Off behind a pooler in transaction mode that cannot carry them (PgBouncer before 1.21, or
 * without `max_prepared_statements`): a statement prepared on one server connection is missing
 * on the next. `auto` finds such a pooler at connect (`directOnly`, from `PgDb.connect`'s probe
 * of the session's client port). When the server answers so anyway (SQLSTATE 26000 "does not
 * exist", 42P05 "already exists"), naming stops for the pool (`onRefused`, once) and a statement
 * outside a transaction is sent again unnamed: it did not run, Parse or Bind failed. On a pool
 * whose probe found the server direct, such an answer cannot come from a pooler (a statement
 * deallocated on that session, say): only that text runs unnamed from then on. A statement whose
 * cached plan no longer fits its table (0A000 from `RevalidateCachedQuery`, "cached plan must not
 * change result type": another replica's migration added a column) runs unnamed from then on too.
 */
export class PreparedStatements {
  /** Text to name, for the texts named so far (at most MAX_NAMED_STATEMENTS). */
  private readonly names = new Map<string, string>();
  /** Texts the server refused by name (a changed table, a lost statement): unnamed from now on. */
  private readonly unnamed = new Set<string>();

  constructor(
    private enabled: boolean,
    private readonly onRefused: (reason: string) => void,
  ) {}

  /** Whether statements are named now. */
  get active(): boolean {
    return this.enabled;
  }

  /** `database.prepared_statements: auto` on a connection found direct (`true`) or through a pooler or proxy (`false`, stays off). */
  directOnly(direct: boolean): void {
    this.enabled = direct;
    this.route = direct ? 'direct' : 'pooled';
  }

  /** What the start-up probe found (`directOnly`), if there was one. */
  route: 'direct' | 'pooled' | null = null;

  /** What pg sends: the text with a stable name when it is named, else the text alone (unnamed). */
  config(text: string, values: unknown[] | undefined): pg.QueryConfig {
    const name = this.nameOf(text, values);
    return name ? { name, text, values } : { text, values };
  }

  /**
   * Runs `send` with the statement named, and again unnamed when the server refused the name and
   * `retry()` says the connection is not inside a transaction (whose failed statement aborted it).
   */
  async run<T>(text: string, values: unknown[] | undefined, retry: () => boolean, send: (cfg: pg.QueryConfig) => Promise<T>): Promise<T> {
    const cfg = this.config(text, values);
    if (!cfg.name) return send(cfg);
    try {
      return await send(cfg);
    } catch (err) {
      if (!this.refused(text, err) || !retry()) throw err;
      return send({ text, values });
    }
  }

  private nameOf(text: string, values: unknown[] | undefined): string | null {
    if (!this.enabled || !values?.length) return null; // a statement without parameters may be several: the simple protocol, as before
    const name = this.names.get(text);
    if (name !== undefined) return name;
    if (this.names.size >= MAX_NAMED_STATEMENTS || this.unnamed.has(text)) return null;
    const made = `rj_${createHash('sha1').update(text).digest('hex')}`;
    this.names.set(text, made);
    return made;
  }

  /** True when the error is the server refusing a named statement (then this text, or every text, runs unnamed from now on). */
  private refused(text: string, err: unknown): boolean {
    const e = err as { code?: string; message?: string; routine?: string };
    const replanned = e.code === '0A000' && (e.routine === 'RevalidateCachedQuery' || /cached plan must not change result type/.test(e.message ?? ''));
    const missing = e.code === '26000' || e.code === '42P05';
    if (!replanned && !missing) return false;
    if (replanned || this.route === 'direct') {
      this.names.delete(text);
      this.unnamed.add(text);
    } else if (this.enabled) {
      this.enabled = false;
      this.onRefused(`${e.code}: ${e.message ?? ''}`);
    }
    return true;
  }
}
