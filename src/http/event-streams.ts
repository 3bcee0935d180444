import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../modules/area.js';
import { sessionToken } from './auth.js';
import { writeRawAppError } from './errors.js';
import { route, sse } from './contract.js';
import { ServiceLoop } from '../workers/service-loop.js';
import { Deadline } from '../time/deadline.js';
import { AppError } from '../errors/app-error.js';

export interface EventStreamLimits {
  /** Open streams per session (the console opens one; a reload's new stream replaces the old). */
  perSession: number;
  /** Open streams on this replica, all sessions together; more are refused with 503. */
  total: number;
  /** How often the one shared reader looks for new or finished rounds while any stream is open. */
  pollMs: number;
  /** A comment line this often keeps proxies from closing an idle stream. */
  keepaliveMs: number;
  /**
   * The open streams' session tokens are re-checked this often (one query for all of them), so a
   * sign-out or a revoke-all on another replica ends the stream within about this much (issue 51: under 1 s).
   */
  reverifyMs: number;
  /** A client this far behind (bytes queued) is cut off instead of growing the queue. */
  maxQueuedBytes: number;
}

export const DEFAULT_EVENT_STREAM_LIMITS: EventStreamLimits = { perSession: 1, total: 32, pollMs: 1000, keepaliveMs: 15_000, reverifyMs: 250, maxQueuedBytes: 1 << 20 };

interface Stream {
  key: string;
  token: string | null;
  res: ServerResponse;
}

/** The admin area's sessions answer this too: which of many tokens are still live, in one query. */
interface BatchSessionCheck {
  liveTokens?(tokens: string[], adminToken: string | undefined): Promise<Set<string>>;
}

/**
 * Server push for the console (`GET /api/v1/events`, Server-Sent Events). One reader per replica
 * polls `job_runs` for new and finished rounds (and the replicas' liveness) while any stream is
 * open, and fans each change out to every stream: the database is read once per tick, however
 * many consoles watch. Streams are bounded per session and in total, authenticated like the API
 * (they sit behind the same onRequest check), ended on sign-out, and ended at once when the HTTP
 * server closes, so an open console never holds shutdown.
 */
export class EventStreams {
  private readonly streams = new Set<Stream>();
  /** The one reader of run and instance changes, polling while a stream is open and asleep (no timer) while none is. */
  private readonly loop: ServiceLoop;
  private lastId = -1;
  private readonly watched = new Set<number>();
  private lastInstances = '';
  private lastKeepalive = 0;
  private lastRead = -Infinity;
  private lastVerify = -Infinity;
  private closed = false;

  constructor(
    private readonly deps: Pick<RouteDeps, 'adminToken' | 'clock' | 'config' | 'instances' | 'isShuttingDown' | 'log' | 'records' | 'sessions'>,
    readonly limits: EventStreamLimits = DEFAULT_EVENT_STREAM_LIMITS,
  ) {
    this.loop = new ServiceLoop({
      name: 'event_streams',
      clock: deps.clock,
      log: deps.log,
      // The sessions' short re-check sets the pace while a session's stream is open; the rounds are read every pollMs.
      backstopMs: () => (!this.streams.size ? Infinity : this.hasSessionStreams() ? Math.min(this.limits.pollMs, this.limits.reverifyMs) : this.limits.pollMs),
      tick: async () => ({ items: this.streams.size ? await this.tick() : 0 }),
    });
  }

  get size(): number {
    return this.streams.size;
  }

  /** Opens a stream on a hijacked reply; false (and nothing written) when the replica is full or closing. */
  open(key: string, token: string | null, res: ServerResponse): boolean {
    if (this.closed) return false;
    const mine = [...this.streams].filter((s) => s.key === key);
    // The newest stream of a session wins: a reload must not wait for the old socket to time out.
    for (const old of mine.slice(0, Math.max(0, mine.length - this.limits.perSession + 1))) this.end(old, 'replaced by a newer stream of this session');
    if (this.streams.size >= this.limits.total) return false;
    const s: Stream = { key, token, res };
    this.streams.add(s);
    res.on('close', () => this.streams.delete(s));
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    res.write('retry: 3000\n\n');
    this.send(s, 'hello', { instance_id: this.deps.config.instance.id, poll_ms: this.limits.pollMs });
    // The first stream starts the reader (its first tick is now), or wakes it from its idle sleep.
    if (!this.loop.isRunning) this.loop.start();
    else if (this.streams.size === 1) this.loop.wake('stream opened');
    return true;
  }

  /** Ends every stream of a session (sign-out). */
  closeSession(key: string): void {
    for (const s of this.streams) if (s.key === key) this.end(s, 'signed out');
  }

  /** Ends the streams of every session (revoke-all); streams opened with the admin token itself go on. */
  closeSessions(reason: string): void {
    for (const s of this.streams) if (s.token) this.end(s, reason);
  }

  /** Ends every stream and stops the reader; later opens are refused. */
  closeAll(): void {
    this.closed = true;
    void this.loop.stop(Deadline.reached(this.deps.clock));
    for (const s of this.streams) this.end(s, 'the server is shutting down');
  }

  private end(s: Stream, reason: string): void {
    this.streams.delete(s);
    if (!s.res.writableEnded) s.res.end(`event: bye\ndata: ${JSON.stringify({ reason })}\n\n`);
  }

  private send(s: Stream, event: string, data: unknown): void {
    if (s.res.writableLength > this.limits.maxQueuedBytes) return this.end(s, 'the client reads too slowly');
    s.res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  private broadcast(event: string, data: unknown): void {
    for (const s of this.streams) this.send(s, event, data);
  }

  private hasSessionStreams(): boolean {
    for (const s of this.streams) if (s.token) return true;
    return false;
  }

  /** One look: the sessions re-checked every `reverifyMs`, the changes read every `pollMs`; the rounds and instances sent. */
  private async tick(): Promise<number> {
    const now = this.deps.clock.now();
    if (now - this.lastVerify >= this.limits.reverifyMs) {
      this.lastVerify = now;
      await this.verifySessions().catch((err) => this.deps.log.debug({ err: (err as Error).message }, 'console event stream: session re-check failed; retrying'));
    }
    if (now - this.lastRead < this.limits.pollMs) return 0;
    this.lastRead = now;
    return this.readChanges(now);
  }

  /**
   * Ends the streams whose session is gone: signed out or revoked (on any replica: they share the
   * table), expired, or minted by another admin token. One query for every open session stream.
   */
  private async verifySessions(): Promise<void> {
    const open = [...this.streams].filter((s) => s.token);
    if (!open.length) return;
    const tokens = [...new Set(open.map((s) => s.token!))];
    const batch = (this.deps.sessions as BatchSessionCheck).liveTokens;
    const live = batch
      ? await batch.call(this.deps.sessions, tokens, this.deps.adminToken)
      : new Set((await Promise.all(tokens.map(async (t) => ((await this.deps.sessions.verify(t, this.deps.adminToken)) ? t : null)))).filter((t) => t !== null));
    for (const s of open) if (this.streams.has(s) && !live.has(s.token!)) this.end(s, 'the session ended');
  }

  /** One read of what changed; the rounds and instances sent (a failed read is retried at the next poll). */
  private async readChanges(now: number): Promise<number> {
    let sent = 0;
    try {
      if (this.lastId < 0) this.lastId = await this.deps.records.latestId();
      const changed = await this.deps.records.changedSince(this.lastId, [...this.watched], 500);
      for (const r of changed) {
        this.lastId = Math.max(this.lastId, r.id);
        if (r.status === 'running') this.watched.add(r.id);
        else this.watched.delete(r.id);
      }
      if (changed.length) this.broadcast('rounds', { rounds: changed });
      sent += changed.length;
      const instances = (await this.deps.instances()).map((i) => ({ instance_id: i.instance_id, alive: i.alive, stopped_at: i.stopped_at }));
      const json = JSON.stringify(instances);
      if (json !== this.lastInstances) {
        this.broadcast('instances', { instances });
        sent += instances.length;
      }
      this.lastInstances = json;
      if (now - this.lastKeepalive >= this.limits.keepaliveMs) {
        this.lastKeepalive = now;
        for (const s of this.streams) s.res.write(': keepalive\n\n');
      }
    } catch (err) {
      this.deps.log.debug({ err: (err as Error).message }, 'console event stream: reading changes failed; retrying');
    }
    return sent;
  }
}

/** Streams are keyed by session without holding the key in the clear. */
function streamKey(token: string | null): string {
  return token ? createHash('sha256').update(token).digest('hex').slice(0, 32) : 'admin-token';
}

/**
 * `GET /api/v1/events`. Registered inside `/api/v1`, so the admin check runs first. The route sets
 * its own socket timeout (none: the stream is long-lived by design and sends a keepalive), so the
 * server's request timeouts do not apply, and the server's close ends every stream (preClose).
 */
export function registerEventRoutes(
  api: FastifyInstance,
  deps: Pick<RouteDeps, 'adminToken' | 'clock' | 'config' | 'instances' | 'isShuttingDown' | 'log' | 'records' | 'sessions'>,
  limits?: EventStreamLimits,
): EventStreams {
  const hub = new EventStreams(deps, limits);
  route(
    api,
    {
      method: 'GET',
      path: '/events',
      operationId: 'streamConsoleEvents',
      summary: "The console's server push",
      description:
        'A server-sent event stream (one per session, 32 per replica): `hello` first, `rounds` as rounds start and finish, `instances` when the replicas change, a keepalive comment every 15 s, and `bye` (with its `reason`) when the stream is ended (sign-out, revoke-all, shutdown).',
      tag: 'events',
      responses: { 200: sse('`event: <name>` / `data: <json>` frames') },
      errors: { 503: '`shutting_down`, or `too_many_streams` (the replica holds its limit of streams; `Retry-After`)' },
    },
    async (_input, req, reply) => {
      const auth = sessionToken(req);
      const token = auth && !(deps.adminToken && !auth.viaCookie && auth.token === deps.adminToken) ? auth.token : null;
      if (deps.isShuttingDown) throw new AppError('unavailable', 'shutting_down', 'this replica is shutting down; reconnect to another');
      reply.hijack();
      req.raw.socket.setTimeout(0);
      if (!hub.open(streamKey(token), token, reply.raw)) {
        const message = `this replica has ${hub.limits.total} console event streams open (the limit); close a console tab or retry later`;
        writeRawAppError(reply.raw, new AppError('unavailable', 'too_many_streams', message, undefined, undefined, 10));
      }
    },
  );
  // Sign-out and revoke-all end the streams here at once; other replicas notice at their next
  // session re-check (`reverifyMs`, 250 ms), so a stream anywhere ends within a second.
  api.addHook('onResponse', async (req, reply) => {
    if (req.method === 'DELETE' && req.routeOptions.url === '/api/v1/sessions/current' && reply.statusCode === 204) {
      const auth = sessionToken(req);
      if (auth) hub.closeSession(streamKey(auth.token));
    }
    if (req.method === 'POST' && req.routeOptions.url === '/api/v1/sessions/revoke-all' && reply.statusCode === 200) hub.closeSessions('every session was revoked');
  });
  // preClose, not onClose: Fastify's own onClose waits in server.close() for every open connection,
  // which an open stream would hold until the grace runs out; preClose runs before that.
  api.addHook('preClose', async () => hub.closeAll());
  return hub;
}
