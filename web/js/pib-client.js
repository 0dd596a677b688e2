// window.pib on the page: starts the engine worker and forwards runPython calls to it (API.md).
import { startEngineDownloads } from "./engine-downloads.js";

const BACKENDS = ["webgpu", "webgl2", "cpu"];

// Tells the server which engine build's snapshot this browser holds (server/runtime_snapshot.py's
// SNAPSHOT_COOKIE), so its pages stop preloading the server's copy.
function recordHeldSnapshot(build) {
  document.cookie = `pib-snapshot=${build}; path=/; max-age=31536000; samesite=strict`;
}

// A helper worker the engine's worker asked for (its cpu backend's large products: cpu_simd/pool.js),
// started here because Firefox's Worker constructor inside a worker can hang that worker. `port`
// goes to the helper, which talks to the engine's worker over it alone.
function startHelperWorker(source, port) {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  const helper = new Worker(url);
  helper.onmessage = helper.onerror = () => URL.revokeObjectURL(url); // it runs, or never will
  helper.postMessage({ port }, [port]);
  return helper;
}

export function startEngine({ onStage = () => {} } = {}) {
  const requested = new URLSearchParams(location.search).get("backend");
  const pending = new Map();
  let nextId = 0;
  let failure = null; // once set, the engine is gone: every call rejects with it
  let worker = null;
  const helpers = []; // the engine's helper workers (startHelperWorker)

  function fail(error) {
    failure = error;
    for (const call of pending.values()) call.reject(error);
    pending.clear();
    worker?.terminate();
    for (const helper of helpers) helper.terminate();
  }

  const pib = {
    backend: null,
    environment: null,
    python: null,
    stages: {},
    // Once ready: ready_ms (navigation to ready), stages (ms each), http_cache (per stage,
    // whether its downloads came from the browser's HTTP cache), runtime_parts (runtime-parts.js:
    // each part of start-up's [start, end] ms since navigation), snapshot (the runtime's memory
    // snapshot, numpy and the engine imported) and bytecode (numpy's and the engine's): "loaded" from an earlier visit, or
    // "absent", "stale", "unavailable" or "failed: ..."; snapshot_source: where a loaded snapshot
    // came from, "server" (made at set-up) or "browser" (an earlier visit's); build: the engine
    // build's digest (/api/engine); snapshot_store and bytecode_store:
    // "storing", then "stored" or "failed: ...", null when nothing needed storing.
    startup: null,
    ready: null,
    // Events Python posts from the worker ({type: "event", name, json}), as CustomEvents.
    events: new EventTarget(),
    // Hands binary data (typed arrays, ArrayBuffers; listed in `transfer` to move, not copy) to
    // the worker, where Python reads it as js.pibInbox.get(key).
    put(key, value, transfer = []) {
      if (failure !== null) throw failure;
      worker.postMessage({ type: "put", key: String(key), value }, transfer);
    },
    // Moves an ImageBitmap to the worker (transferred: the page's one is detached), where Python
    // takes it with pib.data.take_bitmap(name); a newer bitmap under the same name replaces one
    // not taken yet.
    putBitmap(name, bitmap) {
      if (failure !== null) throw failure;
      worker.postMessage({ type: "bitmap", name: String(name), bitmap }, [bitmap]);
    },
    runPython(code) {
      if (failure !== null) return Promise.reject(failure);
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        worker.postMessage({ type: "run", id, code: String(code) });
      });
    },
  };
  pib.ready = new Promise((resolve, reject) => {
    if (requested !== null && !BACKENDS.includes(requested)) {
      fail(new Error(`?backend=${requested} is not a backend; use one of ${BACKENDS.join(", ")}`));
      reject(failure);
      return;
    }
    const workerCreated = performance.now();
    worker = new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module" });
    worker.onmessage = ({ data }) => {
      if (data.type === "stage") {
        pib.stages[data.stage] = { state: data.state, ms: data.ms ?? null };
        onStage(data);
      } else if (data.type === "ready") {
        Object.assign(pib, { backend: data.backend, environment: data.environment, python: data.python });
        const stages = Object.fromEntries(Object.entries(pib.stages).map(([name, { ms }]) => [name, ms]));
        pib.startup = {
          ready_ms: Math.round(performance.now()),
          stages,
          http_cache: data.httpCache,
          runtime_parts: data.runtimeParts,
          snapshot: data.snapshot,
          snapshot_source: data.snapshotSource,
          build: data.build,
          snapshot_store: data.storeSnapshot ? "storing" : null,
          bytecode: data.bytecode,
          bytecode_store: data.storeBytecode ? "storing" : null,
        };
        if (data.snapshot === "loaded" && !data.storeSnapshot) recordHeldSnapshot(data.build);
        resolve(pib);
      } else if (data.type === "snapshot-stored") {
        pib.startup.snapshot_store = data.outcome;
        if (data.outcome === "stored") recordHeldSnapshot(pib.startup.build);
      } else if (data.type === "bytecode-stored") {
        pib.startup.bytecode_store = data.outcome;
      } else if (data.type === "boot-error") {
        fail(new Error(data.error));
        reject(failure);
      } else if (data.type === "helper-worker") {
        helpers.push(startHelperWorker(data.source, data.port));
      } else if (data.type === "event") {
        pib.events.dispatchEvent(new CustomEvent(data.name, { detail: JSON.parse(data.json) }));
      } else if (data.type === "result") {
        const call = pending.get(data.id);
        pending.delete(data.id);
        const outcome = JSON.parse(data.json);
        if (outcome.ok) call.resolve(outcome.value);
        else call.reject(new Error(outcome.error));
      }
    };
    worker.onerror = (event) => {
      fail(new Error(`engine worker failed: ${event.message}`));
      reject(failure);
    };
    // The server writes the engine build's description into the page (server/asset_versions.py),
    // sparing the worker a round trip to /api/engine; pages without it leave the worker to ask.
    const described = document.getElementById("pib-engine")?.textContent;
    // The page's time origin (its navigation) lets the worker time the page stage on the clock
    // both share; when the page created the worker starts the worker's part of it.
    const engine = described ? JSON.parse(described) : null;
    // Begun here, not once the worker's own scripts have loaded (engine-downloads.js).
    const pageDownloads = engine ? startEngineDownloads(engine, worker) : null;
    const origin = performance.timeOrigin;
    worker.postMessage({ type: "boot", backend: requested, engine, pageOrigin: origin, workerCreated, pageDownloads });
    // The worker cannot see the page's visibility: tell it, so fit pauses on hidden tabs.
    const tellVisibility = () => worker?.postMessage({ type: "visibility", hidden: document.hidden });
    document.addEventListener("visibilitychange", tellVisibility);
    tellVisibility();
  });
  return pib;
}
