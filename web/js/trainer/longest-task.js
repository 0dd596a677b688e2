// The main thread's longest task over a stretch of time (PerformanceObserver "longtask": tasks
// over 50 ms; none at all means the page never blocked that long). Where the browser has no
// longtask entries, the longest gap between animation frames stands in for it.

export class LongestTask {
  constructor() {
    this.observer = null;
    this.longestMs = 0;
    this.frameLoop = null;
    this.since = null; // {time, longestMs}: the longest task after mark()
  }

  record(startTime, duration) {
    this.longestMs = Math.max(this.longestMs, duration);
    if (this.since !== null && startTime + duration >= this.since.time) {
      this.since.longestMs = Math.max(this.since.longestMs, duration);
    }
  }

  // From now on also track the longest task separately (e.g. once training steps run).
  mark() {
    this.since = { time: performance.now(), longestMs: 0 };
  }

  start() {
    this.longestMs = 0;
    this.since = null;
    if (PerformanceObserver.supportedEntryTypes?.includes("longtask")) {
      this.observer = new PerformanceObserver((list) => {
        for (const entry of list.getEntries()) this.record(entry.startTime, entry.duration);
      });
      this.observer.observe({ type: "longtask" });
      return;
    }
    let last = performance.now();
    const tick = (now) => {
      this.record(last, now - last);
      last = now;
      this.frameLoop = requestAnimationFrame(tick);
    };
    this.frameLoop = requestAnimationFrame(tick);
  }

  // Stops measuring; {overallMs, sinceMarkMs} (sinceMarkMs null when mark() was not called).
  stop() {
    this.observer?.takeRecords().forEach((entry) => this.record(entry.startTime, entry.duration));
    this.observer?.disconnect();
    this.observer = null;
    if (this.frameLoop !== null) cancelAnimationFrame(this.frameLoop);
    this.frameLoop = null;
    return { overallMs: this.longestMs, sinceMarkMs: this.since?.longestMs ?? null };
  }
}
