// Helper workers for the cpu backend's large matrix products (cpu_simd/threads.py drives them).
//
// Pyodide runs in one thread and its memory cannot be shared, so each helper owns a shared
// WebAssembly memory running gemm-helper.wasm (gemm.c built on its own). For a product split by
// rows of C, begin() copies a helper's rows of A and the whole of B into its memory and wakes it;
// the engine's worker computes its own rows meanwhile; finish() waits for each helper and copies
// its rows of C back into Pyodide's memory. The engine's worker sleeps in Atomics.wait: Python
// calls these synchronously, in the middle of an op.
//
// The page starts the helpers (pib-client.js, asked with a "helper-worker" message) and hands each
// a MessagePort to this worker: Firefox's Worker constructor, called inside a worker, waits on the
// page's thread and now and then never returns (the engine's worker hung in about 1 page load of
// 15 under Playwright, seen in CI).

// The control cells at CONTROL in each helper's memory (Int32Array indices).
const STATE = 0; // IDLE -> JOB (engine) -> DONE (helper) -> IDLE (engine); STOP ends the helper
const IDLE = 0;
const JOB = 1;
const DONE = 2;
const STOP = 3;
const CELLS = 16; // STATE, then m, n, k, a, b, c, work, transposed B (byte offsets for a, b, c, work)

const PAGE = 65536;
const MAX_PAGES = 32768; // the module's declared maximum (simd_build.py: --max-memory=2 GiB)

// How long the page and a new helper may take to answer before the pool is given up.
const START_TIMEOUT_MS = 20000;

// The helper's script: its first message (from the page) carries the port to the engine's worker,
// which sends the module, the memory and where the control cells are. A job is taken JOB -> DONE
// atomically, so a STOP stored while it computes is not overwritten.
const HELPER_SOURCE = `
onmessage = ({ data: { port } }) => {
  port.onmessage = ({ data: { module, memory, control } }) => {
    const { exports } = new WebAssembly.Instance(module, { env: { memory } });
    const cells = new Int32Array(memory.buffer, control, ${CELLS});
    port.postMessage({ workFloats: exports.gemm_work_floats() });
    for (;;) {
      const state = Atomics.load(cells, ${STATE});
      if (state === ${STOP}) return close();
      if (state !== ${JOB}) {
        Atomics.wait(cells, ${STATE}, state); // until the engine posts the next job
        continue;
      }
      const [, m, n, k, a, b, c, work, transposedB] = cells;
      exports.gemm(1, m, n, k, a, 0, 0, b, 0, transposedB, c, work);
      if (Atomics.compareExchange(cells, ${STATE}, ${JOB}, ${DONE}) !== ${JOB}) return close();
      Atomics.notify(cells, ${STATE});
    }
  };
  postMessage("started"); // the page may let go of the script's URL
};`;

class Helper {
  constructor(port, memory, control, work) {
    this.port = port;
    this.memory = memory;
    this.cells = new Int32Array(memory.buffer, control, CELLS);
    this.work = work; // byte offset of gemm's packing scratch
    this.data = work; // set by start: where operands go, past the scratch
    this.rows = null; // [first row, row count, C's byte offset] of the job in flight
  }

  // Grows the memory to hold `bytes` past `data`; false past the module's maximum.
  reserve(bytes) {
    const needed = Math.ceil((this.data + bytes) / PAGE);
    const pages = this.memory.buffer.byteLength / PAGE;
    if (needed > MAX_PAGES) return false;
    if (needed > pages) this.memory.grow(needed - pages);
    return true;
  }
}

function startHelper(module) {
  const memory = new WebAssembly.Memory({ initial: 32, maximum: MAX_PAGES, shared: true });
  // Past the module's stack (the first HELPER_STACK_BYTES): the control cells, then the scratch.
  const control = 1 << 20;
  const { port1, port2 } = new MessageChannel();
  self.postMessage({ type: "helper-worker", source: HELPER_SOURCE, port: port2 }, [port2]);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      port1.close();
      reject(new Error(`no helper worker answered within ${START_TIMEOUT_MS} ms`));
    }, START_TIMEOUT_MS);
    port1.onmessage = ({ data: { workFloats } }) => {
      clearTimeout(timer);
      port1.onmessage = null;
      const helper = new Helper(port1, memory, control, control + CELLS * 4);
      helper.data = helper.work + workFloats * 4;
      resolve(helper);
    };
    port1.postMessage({ module, memory, control });
  });
}

export class GemmPool {
  // `count` helpers running `wasmBytes` (gemm-helper.wasm); `runtime`: Pyodide's module, whose
  // HEAPU8 is read at every call (it is replaced when Pyodide's memory grows).
  static async start(wasmBytes, count, runtime) {
    const module = await WebAssembly.compile(wasmBytes);
    const started = await Promise.allSettled(Array.from({ length: count }, () => startHelper(module)));
    const helpers = started.filter(({ status }) => status === "fulfilled").map(({ value }) => value);
    if (helpers.length < count) {
      new GemmPool(helpers, runtime).close();
      throw started.find(({ status }) => status === "rejected").reason;
    }
    return new GemmPool(helpers, runtime);
  }

  constructor(helpers, runtime) {
    this.helpers = helpers;
    this.runtime = runtime;
    this.products = 0; // products helpers took part in (tests read it)
  }

  get size() {
    return this.helpers.length;
  }

  // Hands helper i rows [first + i * per, ...) of C = A (m x k, row-major at byte `a` of Pyodide's
  // memory) . op(B) (B at byte `b`: k x n, or n x k when `transposedB`); the caller computes rows
  // [0, first) itself. `per`: rows per helper (the last takes what is left). False when an operand
  // does not fit a helper's memory: then nothing was started.
  begin(a, b, m, n, k, transposedB, first, per) {
    const heap = this.runtime.HEAPU8;
    const bBytes = k * n * 4;
    const jobs = this.helpers.map((helper, i) => {
      const row = first + i * per;
      const rows = i === this.helpers.length - 1 ? m - row : per;
      return [helper, row, rows];
    });
    if (!jobs.every(([helper, , rows]) => helper.reserve(bBytes + rows * (k + n) * 4))) return false;
    for (const [helper, row, rows] of jobs) {
      const at = helper.data;
      const into = new Uint8Array(helper.memory.buffer);
      into.set(heap.subarray(b, b + bBytes), at);
      into.set(heap.subarray(a + row * k * 4, a + (row + rows) * k * 4), at + bBytes);
      const c = at + bBytes + rows * k * 4;
      helper.rows = [row, rows, c];
      helper.cells.set([rows, n, k, at + bBytes, at, c, helper.work, transposedB ? 1 : 0], 1);
      Atomics.store(helper.cells, STATE, JOB); // after the job's cells: the store publishes them
      Atomics.notify(helper.cells, STATE);
    }
    this.products += 1;
    return true;
  }

  // Waits for the helpers' rows and copies them into C (byte `c` of Pyodide's memory, n columns).
  // Returns [[first row, count], ...] of the helpers that did not answer within `timeoutMs`
  // (empty when all did): their rows are not written, and the pool should be closed.
  finish(c, n, timeoutMs) {
    const deadline = performance.now() + timeoutMs;
    const missing = [];
    for (const helper of this.helpers) {
      while (Atomics.load(helper.cells, STATE) === JOB) {
        const left = deadline - performance.now();
        if (left <= 0 || Atomics.wait(helper.cells, STATE, JOB, left) === "timed-out") break;
      }
      const [row, rows, at] = helper.rows;
      helper.rows = null;
      if (Atomics.load(helper.cells, STATE) !== DONE) {
        missing.push([row, rows]);
        continue;
      }
      this.runtime.HEAPU8.set(new Uint8Array(helper.memory.buffer, at, rows * n * 4), c + row * n * 4);
      Atomics.store(helper.cells, STATE, IDLE);
    }
    return missing;
  }

  close() {
    for (const helper of this.helpers) {
      Atomics.store(helper.cells, STATE, STOP);
      Atomics.notify(helper.cells, STATE);
      helper.port.close();
    }
    this.helpers = [];
  }
}
