import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { annotateSpan, initTracing, linkedTo, startSpan, traceLink, tracesEndpoint, tracesProtocol, tracingEnabled, withSpan } from '../src/telemetry/tracing.js';
import { captureLogs } from './helpers/log-capture.js';

/**
 * Tracing off (no OTLP endpoint, the default): the kernel's functions only call what they wrap, and
 * no OpenTelemetry SDK module is loaded. What tracing on exports is tested end to end in
 * tracing.e2e.test.ts, against real replicas (this file never turns it on in the test process).
 */
const init = (env: NodeJS.ProcessEnv) => {
  const logs = captureLogs();
  return { logs, on: initTracing({ log: logs.logger, now: () => 0, serviceVersion: '0.0.0', instanceId: 'unit', env: 'test', redactUrl: (u) => u }, env) };
};
const sdkLoaded = () => Object.keys(createRequire(import.meta.url).cache).filter((p) => /[/\\]@opentelemetry[/\\](sdk-trace|exporter-trace|resources)/.test(p));

describe('tracing off', () => {
  it('is on only with an OTLP endpoint, the traces-specific one first, and never when disabled', () => {
    expect(tracesEndpoint({})).toBeNull();
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' })).toBeNull();
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' })).toBe('http://c:4318');
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:4318/x' })).toBe('http://t:4318/x');
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })).toBeNull();
    expect(tracesEndpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeNull();
    expect(tracesProtocol({})).toBe('http/protobuf');
    expect(tracesProtocol({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })).toBe('http/json');
    expect(tracesProtocol({ OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' })).toBe('grpc');
  });

  it('without an endpoint starts nothing and loads no SDK module', async () => {
    const { on, logs } = init({});
    expect(await on).toBe(false);
    expect(tracingEnabled()).toBe(false);
    expect(sdkLoaded()).toEqual([]);
    expect(logs.lines).toEqual([]);
  });

  it('refuses gRPC, naming the variable, and stays off', async () => {
    const { on, logs } = init({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' });
    expect(await on).toBe(false);
    expect(tracingEnabled()).toBe(false);
    expect(sdkLoaded()).toEqual([]);
    expect(logs.lines).toHaveLength(1);
    expect(logs.lines[0]).toMatchObject({ level: 'error', protocol: 'grpc' });
    expect(String(logs.lines[0]!.msg)).toMatch(/OTEL_EXPORTER_OTLP_PROTOCOL.*http\/protobuf or http\/json/);
  });

  it('refuses an endpoint that is not an http(s) URL, naming the variable, and stays off', async () => {
    for (const [env, variable] of [
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'otel-collector:4318' }, 'OTEL_EXPORTER_OTLP_ENDPOINT'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://ok:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://c:4317' }, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'],
    ] as const) {
      const { on, logs } = init(env);
      expect(await on).toBe(false);
      expect(logs.lines).toEqual([expect.objectContaining({ level: 'error', variable, msg: `tracing off: ${variable} is not an http(s) URL (e.g. http://otel-collector:4318)` })]);
    }
    expect(tracingEnabled()).toBe(false);
    expect(sdkLoaded()).toEqual([]);
  });

  it('runs what it wraps, returns its value and passes its error on', async () => {
    expect(await withSpan('x', { a: 1 }, (span) => (span.set({ b: 2 }), 42))).toBe(42);
    await expect(withSpan('x', {}, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    const span = startSpan('y', {}, { root: true, linkActive: true });
    expect(span.run(() => 'inside')).toBe('inside');
    span.end({ done: true }, 'an error');
    annotateSpan({ c: 3 });
    expect(traceLink()).toBeNull();
    expect(linkedTo(null, () => 7)).toBe(7);
    expect(linkedTo({ traceId: 'a'.repeat(32), spanId: 'b'.repeat(16) }, () => 8)).toBe(8);
  });
});
