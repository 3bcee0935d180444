// Traces (issue 52 point 5): OpenTelemetry spans exported over OTLP/HTTP, configured by the standard
// OTEL_* variables and off unless an OTLP endpoint is set. Everything else in src/ calls the few
// functions below and never the SDK: while tracing is off (the default) they call their function
// and return, and no OpenTelemetry module is loaded (the SDK is imported by `initTracing` only).
//
// One tracer per process: `initTracing` is idempotent (a library user running two runtimes in one
// process gets the first one's resource). Spans never carry a secret: callers pass ids, names and
// outcomes only; the HTTP span (tracing-http.ts) names the route template, never the URL.
import type * as OtelApi from '@opentelemetry/api';
import type { Logger } from './logger.js';
import { WarnSampler } from './warn-sampler.js';
import type { Deadline } from '../time/deadline.js';

/** What a span says: ids, names, counts and outcomes (never a token, a URL or a request body). */
export type SpanAttributes = Record<string, string | number | boolean | null | undefined>;

/** The active span of a `withSpan` function: what it learns on the way (its outcome) is added here. */
export interface SpanScope {
  set(attrs: SpanAttributes): void;
}

/** A span to link to later (`linkedTo`): the span that caused some work done elsewhere or later. Opaque. */
export interface TraceLink {
  readonly traceId: string;
  readonly spanId: string;
}

export interface SpanOptions {
  /** Start a new trace even inside another span (work that outlives its cause: a round, a batch step). */
  root?: boolean;
  /** Link the new span to the span active where it starts (with `root`: a manual round links to its request). */
  linkActive?: boolean;
  kind?: 'internal' | 'server' | 'client';
}

/** A span ended by hand, for code whose outcome is known only after a try/finally (the round runner). */
export interface ManualSpan extends SpanScope {
  /** Runs `fn` with this span active, so spans started inside it are its children. */
  run<T>(fn: () => T): T;
  end(attrs?: SpanAttributes, error?: string | null): void;
}

interface Kernel {
  api: typeof OtelApi;
  tracer: OtelApi.Tracer;
  provider: { forceFlush(): Promise<void> };
  /** The context key under which `linkedTo` leaves the cause for the next span started. */
  causeKey: symbol;
  extract(headers: Record<string, string | string[] | undefined>): OtelApi.Context;
}

let kernel: Kernel | null = null;
let starting: Promise<boolean> | null = null;

const NOOP_SCOPE: ManualSpan = { set() {}, run: (fn) => fn(), end() {} };

/** The OTLP endpoint traces go to (the traces-specific variable first), or null: tracing off. */
export function tracesEndpoint(env: NodeJS.ProcessEnv = process.env): string | null {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return null;
  if ((env.OTEL_TRACES_EXPORTER ?? '').trim().toLowerCase() === 'none') return null;
  const url = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  return url || null;
}

/** `http/protobuf` (the OTLP default) or `http/json`; anything else is refused by `initTracing`. */
export function tracesProtocol(env: NodeJS.ProcessEnv = process.env): string {
  return (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL?.trim() || env.OTEL_EXPORTER_OTLP_PROTOCOL?.trim() || 'http/protobuf').toLowerCase();
}

export function tracingEnabled(): boolean {
  return kernel !== null;
}

/** For tracing-http.ts only: the loaded SDK, or null while tracing is off. */
export function tracingKernel(): Kernel | null {
  return kernel;
}

export interface TracingInit {
  log: Logger;
  /** The injected clock's `now`: export errors are logged at most once a minute. */
  now: () => number;
  serviceVersion: string;
  instanceId: string;
  env: string;
  /** The service's URL redaction (config/redact-url.ts): the endpoint is logged through it (credentials and secret query parameters masked). */
  redactUrl: (url: string) => string;
}

/**
 * Loads the SDK and starts exporting when an OTLP endpoint is set (`tracesEndpoint`); otherwise does
 * nothing and returns false. The SDK reads its own variables: OTEL_EXPORTER_OTLP_(TRACES_)HEADERS,
 * _TIMEOUT, _COMPRESSION, OTEL_TRACES_SAMPLER(_ARG), OTEL_BSP_*, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
 */
export function initTracing(o: TracingInit, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (kernel) return Promise.resolve(true);
  starting ??= start(o, env).finally(() => (starting = null));
  return starting;
}

async function start(o: TracingInit, env: NodeJS.ProcessEnv): Promise<boolean> {
  const endpoint = tracesEndpoint(env);
  if (!endpoint) return false;
  const variable = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  if (!/^https?:\/\/[^/\s]/i.test(endpoint) || !URL.canParse(endpoint)) {
    o.log.error({ variable }, `tracing off: ${variable} is not an http(s) URL (e.g. http://otel-collector:4318)`);
    return false;
  }
  const protocol = tracesProtocol(env);
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    o.log.error({ protocol }, `tracing off: OTEL_EXPORTER_OTLP_PROTOCOL (or OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) is "${protocol}"; relay-jobs exports over OTLP/HTTP: use http/protobuf or http/json`);
    return false;
  }
  // The SDK is CommonJS: Node's import() gives its exports by name as well as `default`, a bundle
  // (esbuild, the tests' .test-dist) only `default` (module.exports). A name each one exports tells which.
  const exportsOf = <M extends object>(m: M, name: string): M => (name in m ? m : (m as unknown as { default: M }).default);
  const [api, sdk, core, resources, semconv, exporterModule] = await Promise.all([
    import('@opentelemetry/api').then((m) => exportsOf(m, 'ROOT_CONTEXT')),
    import('@opentelemetry/sdk-trace-node').then((m) => exportsOf(m, 'NodeTracerProvider')),
    import('@opentelemetry/core').then((m) => exportsOf(m, 'W3CTraceContextPropagator')),
    import('@opentelemetry/resources').then((m) => exportsOf(m, 'resourceFromAttributes')),
    import('@opentelemetry/semantic-conventions').then((m) => exportsOf(m, 'ATTR_SERVICE_NAME')),
    (protocol === 'http/json' ? import('@opentelemetry/exporter-trace-otlp-http') : import('@opentelemetry/exporter-trace-otlp-proto')).then((m) => exportsOf(m, 'OTLPTraceExporter')),
  ]);
  const sampler = new WarnSampler(60_000, o.now);
  const diagLine = (level: 'error' | 'warn') => (message: string) => {
    const taken = sampler.take(level);
    // The SDK's own words (an export refused, a collector unreachable); a URL's user:password never reaches the log.
    if (taken)
      o.log.warn(
        { suppressed: taken.suppressed, otel: level },
        `tracing: ${String(message)
          .replace(/\/\/[^/@\s]*@/g, '//***@')
          .slice(0, 300)}`,
      );
  };
  const quiet = () => {};
  api.diag.setLogger({ error: diagLine('error'), warn: diagLine('warn'), info: quiet, debug: quiet, verbose: quiet }, api.DiagLogLevel.WARN);
  // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (envDetector) win over the defaults named here.
  const resource = resources
    .resourceFromAttributes({
      [semconv.ATTR_SERVICE_NAME]: 'relay-jobs',
      [semconv.ATTR_SERVICE_VERSION]: o.serviceVersion,
      'service.instance.id': o.instanceId,
      'deployment.environment.name': o.env,
    })
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  const exporter = new exporterModule.OTLPTraceExporter();
  const provider = new sdk.NodeTracerProvider({ resource, spanProcessors: [new sdk.BatchSpanProcessor(exporter)] });
  // The global context manager (AsyncLocalStorage) carries the active span through awaits; the W3C
  // propagator is ours alone (the HTTP hook extracts `traceparent` with it), the global one is left as it is.
  provider.register({ propagator: null });
  const w3c = new core.W3CTraceContextPropagator();
  const getter: OtelApi.TextMapGetter<Record<string, string | string[] | undefined>> = {
    keys: (carrier) => Object.keys(carrier),
    get: (carrier, key) => carrier[key],
  };
  kernel = {
    api,
    tracer: provider.getTracer('relay-jobs', o.serviceVersion),
    provider,
    causeKey: Symbol('relay-jobs.trace-cause'),
    extract: (headers) => w3c.extract(api.ROOT_CONTEXT, headers, getter),
  };
  o.log.info({ endpoint: o.redactUrl(endpoint), protocol, service: resource.attributes[semconv.ATTR_SERVICE_NAME] }, 'tracing on: exporting spans over OTLP/HTTP');
  return true;
}

function clean(attrs: SpanAttributes | undefined): OtelApi.Attributes {
  const out: OtelApi.Attributes = {};
  if (attrs) for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) out[k] = v;
  return out;
}

function begin(k: Kernel, name: string, attrs: SpanAttributes, opts: SpanOptions): { span: OtelApi.Span; ctx: OtelApi.Context } {
  const { api } = k;
  const active = api.context.active();
  const links: OtelApi.Link[] = [];
  const cause = active.getValue(k.causeKey) as TraceLink | undefined;
  if (cause) links.push({ context: { traceId: cause.traceId, spanId: cause.spanId, traceFlags: api.TraceFlags.SAMPLED } });
  const current = api.trace.getSpan(active)?.spanContext();
  if (opts.linkActive && current && api.isSpanContextValid(current)) links.push({ context: current });
  const kind = opts.kind === 'server' ? api.SpanKind.SERVER : opts.kind === 'client' ? api.SpanKind.CLIENT : api.SpanKind.INTERNAL;
  // A cause is used once: spans nested inside this one are its children, not linked again.
  const base = cause ? active.deleteValue(k.causeKey) : active;
  const span = k.tracer.startSpan(name, { kind, attributes: clean(attrs), links, root: opts.root }, base);
  return { span, ctx: api.trace.setSpan(base, span) };
}

function finish(k: Kernel, span: OtelApi.Span, error?: string | null): void {
  if (error) span.setStatus({ code: k.api.SpanStatusCode.ERROR, message: error.slice(0, 500) });
  span.end();
}

/** Runs `fn` in a span named `name`; a throw marks the span failed (its message, cut short) and is rethrown. */
export async function withSpan<T>(name: string, attrs: SpanAttributes, fn: (span: SpanScope) => Promise<T> | T, opts: SpanOptions = {}): Promise<T> {
  const k = kernel;
  if (!k) return fn(NOOP_SCOPE);
  const { span, ctx } = begin(k, name, attrs, opts);
  const scope: SpanScope = { set: (a) => void span.setAttributes(clean(a)) };
  try {
    const result = await k.api.context.with(ctx, () => fn(scope));
    finish(k, span);
    return result;
  } catch (err) {
    finish(k, span, (err as Error)?.message ?? String(err));
    throw err;
  }
}

/** A span started now and ended by `end`; `run` makes it the active span for the work inside it. */
export function startSpan(name: string, attrs: SpanAttributes, opts: SpanOptions = {}): ManualSpan {
  const k = kernel;
  if (!k) return NOOP_SCOPE;
  const { span, ctx } = begin(k, name, attrs, opts);
  return {
    set: (a) => void span.setAttributes(clean(a)),
    run: (fn) => k.api.context.with(ctx, fn),
    end: (a, error) => {
      span.setAttributes(clean(a));
      finish(k, span, error);
    },
  };
}

/** Adds attributes to the active span (the one a caller's `withSpan` started); nothing while off. */
export function annotateSpan(attrs: SpanAttributes): void {
  if (kernel) kernel.api.trace.getSpan(kernel.api.context.active())?.setAttributes(clean(attrs));
}

/** The active span, to link from work started later elsewhere (`linkedTo`); null while off or outside a span. */
export function traceLink(): TraceLink | null {
  if (!kernel) return null;
  const sc = kernel.api.trace.getSpan(kernel.api.context.active())?.spanContext();
  return sc && kernel.api.isSpanContextValid(sc) ? { traceId: sc.traceId, spanId: sc.spanId } : null;
}

/** Runs `fn` so that the first span started inside it links to `link` (the work's cause, e.g. the round that armed a timer). */
export function linkedTo<T>(link: TraceLink | null | undefined, fn: () => T): T {
  const k = kernel;
  if (!k || !link) return fn();
  return k.api.context.with(k.api.context.active().setValue(k.causeKey, link), fn);
}

/** Exports what is buffered, by `by` (the shutdown ladder's last rung: the grace left); a string is a warning. */
export async function flushTracing(by: Deadline): Promise<string | void> {
  const k = kernel;
  if (!k) return;
  const flush = k.provider.forceFlush();
  try {
    const limitMs = by.leftMs();
    if (!(await by.settled(flush))) return `spans not exported within ${Math.round(limitMs)} ms; they are dropped`;
    await flush;
  } catch (err) {
    return `spans not exported: ${(err as Error).message.slice(0, 200)}`;
  }
}
