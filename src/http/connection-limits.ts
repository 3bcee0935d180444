import type { ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config/load.js';
import { AppError } from '../errors/app-error.js';
import { rawHttpError, sendAppError } from './errors.js';
import { systemClock } from '../time/clock.js';
import { Deadline } from '../time/deadline.js';

/**
 * What keeps slow or idle clients from holding the service (docs/security.md, "Slow clients"):
 * - `http.headers_timeout`: the whole header block must arrive within it;
 * - `http.request_timeout`: the whole request, headers and body, must arrive within it;
 * - `http.keep_alive_timeout`: an idle keep-alive connection is closed after it;
 * - `http.socket_timeout`: a connection with no bytes either way (a client that stopped reading) is closed;
 * - `http.max_connections`: connections past it are closed on arrival;
 * and at shutdown (ServerIngress) every connection still open at the end of the grace is closed.
 * Node checks the header and request deadlines on a timer; it runs every quarter of the shorter one
 * (at least 250 ms, at most 1 s), so a deadline is late by at most that.
 */
export function serverTimeouts(config: Config): { connectionTimeout: number; keepAliveTimeout: number; requestTimeout: number; http: ServerOptions } {
  const h = config.http;
  return {
    connectionTimeout: h.socket_timeout,
    keepAliveTimeout: h.keep_alive_timeout,
    requestTimeout: h.request_timeout,
    http: { headersTimeout: h.headers_timeout, connectionsCheckingInterval: Math.max(250, Math.min(1000, Math.floor(Math.min(h.headers_timeout, h.request_timeout) / 4))) },
  };
}

/**
 * How many connections one address may hold open without having sent a complete request head:
 * a tenth of `http.max_connections` (100 at the default), at least 8. A client opens a connection
 * to send a request at once, so a legitimate one is past this in milliseconds; only a flood of
 * silent (or header-trickling) connections from one address ever reaches it.
 */
export function unservedPerAddress(maxConnections: number): number {
  return Math.max(8, Math.floor(maxConnections / 10));
}

/**
 * The connection cap, and what keeps a flood from one address from starving the liveness probe
 * (issue 51). A connection is *unserved* until its first request head has arrived. Then:
 * - per address, at most `unservedPerAddress(http.max_connections)` unserved connections: a new
 *   one past that closes that address's oldest unserved one (never the newcomer: the probe may
 *   come from the same address as the flood, and it sends its request at once);
 * - in all, at most `http.max_connections`: past it the oldest unserved connection anywhere is
 *   closed to make room, and only when every open connection is serving a request is the
 *   newcomer closed on arrival (as before).
 * So silent or trickling connections can never hold the service's last connection slot, and
 * `/healthz` answers with 1,000 of them open from one address. The slow ones a cap leaves open
 * still end at `http.headers_timeout`.
 */
export function applyConnectionCap(app: FastifyInstance, config: Config): void {
  const max = config.http.max_connections;
  const perAddress = unservedPerAddress(max);
  const server = app.server;
  // Our own count replaces Node's (which would close the newcomer before we could make room).
  server.maxConnections = Number.MAX_SAFE_INTEGER;
  let open = 0;
  const tracked = new Set<Socket>();
  /** Unserved connections, oldest first: all of them, and by remote address. */
  const unserved = new Set<Socket>();
  const byAddress = new Map<string, Set<Socket>>();
  const addressOf = new WeakMap<Socket, string>();
  const served = (socket: Socket) => {
    if (!unserved.delete(socket)) return;
    const key = addressOf.get(socket)!;
    const mine = byAddress.get(key);
    mine?.delete(socket);
    if (mine && !mine.size) byAddress.delete(key);
  };
  const gone = (socket: Socket) => {
    if (!tracked.delete(socket)) return;
    open--;
    served(socket);
  };
  const evict = (socket: Socket) => {
    gone(socket);
    socket.destroy();
  };
  server.on('request', (req: { socket: Socket }) => served(req.socket));
  server.on('connection', (socket: Socket) => {
    const key = socket.remoteAddress ?? '?';
    tracked.add(socket);
    open++;
    addressOf.set(socket, key);
    unserved.add(socket);
    const mine = byAddress.get(key) ?? byAddress.set(key, new Set()).get(key)!;
    mine.add(socket);
    socket.once('close', () => gone(socket));
    if (mine.size > perAddress) evict(mine.values().next().value!);
    if (open <= max) return;
    const oldest = unserved.values().next().value;
    evict(oldest && oldest !== socket ? oldest : socket);
  });
}

/** Errors Node's HTTP parser raises before Fastify sees a request (timeouts, malformed requests), in the API's one error shape. */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const refusal =
    err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? new AppError('request_timeout', 'timeout', 'the request did not arrive within http.request_timeout (or its headers within http.headers_timeout)')
      : err.code === 'HPE_HEADER_OVERFLOW'
        ? new AppError('headers_too_large', 'too_large', 'the request headers are too large')
        : new AppError('invalid', 'bad_request', 'malformed HTTP request');
  if (socket.writable) socket.write(rawHttpError(refusal));
  socket.destroy();
}

/** Fastify's own refusals before routing (a URL that is not valid percent-encoding, an over-long parameter), in the one error shape. */
export function frameworkErrors(err: Error & { code?: string }, _req: FastifyRequest, reply: FastifyReply): void {
  const message = err.code === 'FST_ERR_BAD_URL' ? 'the URL is not valid (bad percent-encoding)' : err.message;
  void sendAppError(reply.header('cache-control', 'no-store'), new AppError('invalid', 'bad_request', message));
}

/** The shutdown ladder's view of the HTTP server: stop taking connections first, cut the ones left at the end of the grace. */
export class ServerIngress {
  private closing: Promise<void> | null = null;

  constructor(private readonly app: FastifyInstance) {}

  /** No new connections; idle keep-alive ones close now; requests in flight go on (new requests on open connections get 503). */
  stopAccepting(): void {
    this.closing ??= this.app.close();
  }

  /** Waits until `by` for requests in flight, then closes every connection still open (half-sent requests included). */
  async close(by: Deadline): Promise<string | void> {
    this.stopAccepting();
    if (await by.settled(this.closing!)) return;
    const open = await new Promise<number>((r) => this.app.server.getConnections((_e, n) => r(n ?? 0)));
    this.app.server.closeAllConnections();
    // A second of wall time for the sockets just cut to finish closing (past the grace by design).
    await Deadline.within(systemClock, 1000).settled(this.closing!);
    return `${open} HTTP connection(s) still open at the end of the grace period were closed`;
  }
}
