/**
 * What one loop of this process has been doing, as the heartbeat publishes it (issue 49, point 3):
 * the figures a reader needs to say "its ticks keep failing" or "it has not finished a tick for
 * too long" about a replica it cannot ask. Ages are measured back from the moment of the report,
 * on this process's clock, so the reader adds the age of the beat that carried it (database time)
 * and no clock skew enters.
 */
export interface LoopReport {
  loop: string;
  /** Ticks that threw one after another, up to the newest; 0 once a tick did not throw. */
  failed_in_row: number;
  /** The newest failure of the current run of failures (null while the newest tick did not throw). */
  last_error: { class: string; message: string; ago_ms: number } | null;
  /** Since the first failure of the current run of failures (null when not failing). */
  failing_for_ms: number | null;
  /** How long the tick running now has been running (null while the loop sleeps). */
  in_tick_ms: number | null;
  /** A tick running longer than this is a stall. */
  stall_after_ms: number;
  /** Ticks finished since the loop started. */
  ticks: number;
}

/** Every loop's report, and the heartbeat interval of the replica that sent them (how stale the reader may find them). */
export interface LoopsReport {
  heartbeat_ms: number;
  loops: LoopReport[];
}

/** What a loop gives its book. */
export interface ReportingLoop {
  readonly name: string;
  report(nowMs: number): LoopReport;
}

/**
 * The running loops of one runtime, read by its heartbeat. A loop joins the book of the tick
 * counter it counts its ticks on (`ServiceLoopOptions.ticks`, the runtime's `metrics.loopTicks`):
 * every loop of a runtime already gets that counter, one per runtime, so the loops of two runtimes
 * in one test process never mix, and no constructor in the areas has to change.
 */
export class LoopBook {
  private readonly loops = new Set<ReportingLoop>();

  add(loop: ReportingLoop): void {
    this.loops.add(loop);
  }

  delete(loop: ReportingLoop): void {
    this.loops.delete(loop);
  }

  /** One report per loop name: of several loops with one name, the one in the worst state (stalled, then failing longest). */
  report(nowMs: number): LoopReport[] {
    const byName = new Map<string, LoopReport>();
    for (const l of this.loops) {
      const r = l.report(nowMs);
      const had = byName.get(r.loop);
      if (!had || badness(r) > badness(had)) byName.set(r.loop, r);
    }
    return [...byName.values()].sort((a, b) => a.loop.localeCompare(b.loop));
  }
}

function badness(r: LoopReport): number {
  const stall = r.in_tick_ms !== null && r.in_tick_ms > r.stall_after_ms ? 1e15 + r.in_tick_ms : 0;
  return stall + (r.failed_in_row ? 1e12 + (r.failing_for_ms ?? 0) : 0);
}

const books = new WeakMap<object, LoopBook>();

/** The book of the loops that count their ticks on `ticks`. */
export function loopBook(ticks: object): LoopBook {
  let b = books.get(ticks);
  if (!b) books.set(ticks, (b = new LoopBook()));
  return b;
}

/**
 * An error's class, for a reason an operator can act on: the constructor's name (`ReplyError`,
 * `AppError`) with a Node or driver code (`ECONNREFUSED`, PostgreSQL's SQLSTATE) or a Redis reply's
 * code (`WRONGTYPE`); a plain `Error` shows the code alone.
 */
export function errorClass(err: Error): string {
  const code = (err as { code?: unknown }).code;
  const name = err.constructor?.name && err.constructor.name !== 'Object' ? err.constructor.name : err.name || 'Error';
  // A Redis reply error's message starts with its code: `WRONGTYPE Operation against a key…`, `READONLY You can't write…`.
  const prefix = /^([A-Z][A-Z_]{2,}) /.exec(err.message)?.[1];
  const tag = typeof code === 'string' && code ? code : prefix;
  if (!tag) return name;
  return name === 'Error' ? tag : `${name} ${tag}`;
}

/** An error message fit for a health reason: credentials in any URL it quotes masked, one line, at most 300 characters. */
export function shownMessage(err: Error): string {
  return err.message
    .replace(/(\/\/)[^\s/@]*@/g, '$1***@')
    .replace(/\s+/g, ' ')
    .slice(0, 300);
}
