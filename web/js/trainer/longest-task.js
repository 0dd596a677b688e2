// The main thread's longest task over a stretch of time (PerformanceObserver "longtask": tasks
// over 50 ms; none at all means the page never blocked that long). Where the browser has no
// longtask entries, the longest gap between animation frames stands in for it.

export class LongestTask {
  constructor() {
    this.observer = null;
    this.longestMs = 0;
    this.frameLoop = null;
  }

  start() {
    this.longestMs = 0;
    if (PerformanceObserver.supportedEntryTypes?.includes("longtask")) {
      this.observer = new PerformanceObserver((list) => {
        for (const entry of list.getEntries()) this.longestMs = Math.max(this.longestMs, entry.duration);
      });
      this.observer.observe({ type: "longtask" });
      return;
    }
    let last = performance.now();
    const tick = (now) => {
      this.longestMs = Math.max(this.longestMs, now - last);
      last = now;
      this.frameLoop = requestAnimationFrame(tick);
    };
    this.frameLoop = requestAnimationFrame(tick);
  }

  // Stops measuring; the longest task in milliseconds.
  stop() {
    this.observer?.takeRecords().forEach((entry) => {
      this.longestMs = Math.max(this.longestMs, entry.duration);
    });
    this.observer?.disconnect();
    this.observer = null;
    if (this.frameLoop !== null) cancelAnimationFrame(this.frameLoop);
    this.frameLoop = null;
    return this.longestMs;
  }
}
