// Where the engine's start-up time goes inside its stages: each part's span, [start, end] in ms
// since the page's navigation (the clock of ready_ms and the stages), measured in the engine's
// worker. Parts overlap (downloads and compiles go on while the worker's thread does other work),
// so they are spans on one clock, not a sum; pib.startup.runtime_parts reports them and the bench
// prints them.
export class RuntimeParts {
  // `pageOrigin`: the page's performance.timeOrigin, on the clock page and worker share.
  constructor(pageOrigin) {
    this.origin = pageOrigin - performance.timeOrigin;
    this.spans = {};
  }

  now() {
    return Math.round(performance.now() - this.origin);
  }

  // Records `name` from now until `promise` settles; answers the promise.
  time(name, promise) {
    const start = this.now();
    this.spans[name] = [start, null]; // listed in the order the parts began
    const end = () => {
      this.spans[name][1] = this.now();
    };
    promise.then(end, end);
    return promise;
  }

  // Runs `work` (synchronous) as part `name`; answers what it returns.
  run(name, work) {
    const start = this.now();
    try {
      return work();
    } finally {
      this.spans[name] = [start, this.now()];
    }
  }
}
