import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import { monotonic } from '../time/wall.js';

/** One replica's process figures over one heartbeat interval, as its `instances` row carries them. */
export interface ProcessFigures {
  rss_bytes: number;
  heap_used_bytes: number;
  /** p99 of the event loop's delay beyond the sampling timer since the previous sample; null before any sample. */
  event_loop_lag_p99_ms: number | null;
  /** User + system CPU time over wall time since the previous sample (or the sampler's start), in % of one core. */
  cpu_percent: number | null;
}

/** Where the figures come from; tests substitute their own. */
export interface ProcessSource {
  memory(): { rss: number; heapUsed: number };
  cpu(): { user: number; system: number };
  /** Monotonic milliseconds. */
  now(): number;
}

const RESOLUTION_MS = 10;
const nodeSource: ProcessSource = { memory: () => process.memoryUsage(), cpu: () => process.cpuUsage(), now: monotonic };

/**
 * Samples this process once per heartbeat. The loop-delay histogram and the CPU baseline are
 * reset by each sample, so a figure describes the interval since the previous beat, not the
 * process's whole life (a stall an hour ago does not colour every later beat).
 */
export class ProcessSampler {
  private readonly loop: IntervalHistogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  private last: { cpu: { user: number; system: number }; at: number };

  constructor(private readonly src: ProcessSource = nodeSource) {
    this.loop.enable();
    this.last = { cpu: src.cpu(), at: src.now() };
  }

  sample(): ProcessFigures {
    const mem = this.src.memory();
    const cpu = this.src.cpu();
    const at = this.src.now();
    let cpuPercent: number | null = null;
    if (at > this.last.at) {
      const usedMicros = cpu.user - this.last.cpu.user + (cpu.system - this.last.cpu.system);
      cpuPercent = Math.round((usedMicros / 1000 / (at - this.last.at)) * 10_000) / 100;
    }
    this.last = { cpu, at };
    // The histogram records the time between timer ticks: the lag is what exceeds the tick.
    const lag = this.loop.count ? Math.max(0, this.loop.percentile(99) / 1e6 - RESOLUTION_MS) : null;
    this.loop.reset();
    return { rss_bytes: mem.rss, heap_used_bytes: mem.heapUsed, event_loop_lag_p99_ms: lag === null ? null : Math.round(lag * 100) / 100, cpu_percent: cpuPercent };
  }

  close(): void {
    this.loop.disable();
  }
}
