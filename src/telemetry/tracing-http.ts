// One span per HTTP request (issue 52 point 5), continuing the caller's W3C `traceparent`: a gateway's
// trace runs on into its token, usage and snapshot calls here. Added by `buildHttpServer` only while
// tracing is on (no hook at all otherwise).
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type * as OtelApi from '@opentelemetry/api';
import { tracingKernel } from './tracing.js';

/**
 * Adds the request span's hooks to `app`. The span is named by the route template
 * (`POST /api/v1/jobs/:name/run`), never the URL: no query string, no path value, no header
 * (Authorization, cookies and tokens stay out). Its status is the response's; 5xx marks it failed.
 */
export function traceRequests(app: FastifyInstance): void {
  const k = tracingKernel();
  if (!k) return;
  const { api } = k;
  const open = new WeakMap<FastifyRequest, { span: OtelApi.Span; ctx: OtelApi.Context }>();
  const end = (req: FastifyRequest, status: number | null) => {
    const s = open.get(req);
    if (!s) return;
    open.delete(req);
    if (status === null) s.span.setStatus({ code: api.SpanStatusCode.ERROR, message: 'client closed the request before the answer' });
    else {
      s.span.setAttribute('http.response.status_code', status);
      if (status >= 500) s.span.setStatus({ code: api.SpanStatusCode.ERROR });
    }
    s.span.end();
  };
  app.addHook('onRequest', (req, _reply, done) => {
    const route = req.routeOptions.url;
    const parent = k.extract(req.headers);
    const attributes: OtelApi.Attributes = { 'http.request.method': req.method };
    if (route) attributes['http.route'] = route;
    const span = k.tracer.startSpan(route ? `${req.method} ${route}` : req.method, { kind: api.SpanKind.SERVER, attributes }, parent);
    const ctx = api.trace.setSpan(parent, span);
    open.set(req, { span, ctx });
    api.context.with(ctx, done);
  });
  // Again before the handler: a body read from the socket may have left the request's context behind.
  app.addHook('preHandler', (req, _reply, done) => {
    const s = open.get(req);
    if (s) api.context.with(s.ctx, done);
    else done();
  });
  app.addHook('onResponse', (req, reply, done) => {
    end(req, reply.statusCode);
    done();
  });
  app.addHook('onRequestAbort', (req, done) => {
    end(req, null);
    done();
  });
}
