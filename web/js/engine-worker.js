// The engine's Web Worker: loads Pyodide, numpy and the py_in_browser package, then runs page code.
import { keptVerdicts, openVerdicts, storeVerdicts, verdictsVersion } from "./backend-verdicts.js";
import { restoreBytecode, saveBytecode } from "./bytecode-cache.js";
import { primeCodeCache } from "./code-cache.js";
import { probeGPU, releaseProbedContext } from "./gpu-probe.js";
import { fetchBundle, installBundle } from "./package-bundle.js";
import { fromHttpCache, noteStamp } from "./http-cache.js";
import { compileRuntime, runtimeWasmURL } from "./runtime-loader.js";
import { RuntimeParts } from "./runtime-parts.js";
import {
  buildVersion,
  chooseSnapshot,
  downloadSnapshot,
  keepSnapshot,
  openSnapshot,
  serverSnapshotURL,
  startRuntime,
  storeSnapshot,
} from "./runtime-snapshot.js";
import { canKeepEntries } from "./startup-cache.js";

let runner = null; // py_in_browser._worker, once the engine is loaded
let hidden = false; // the page's visibility, told by pib-client.js; handed to the engine at boot

// Binary data the page hands to Python without spelling it into code (the app's pixels, model
// files): Python takes it with js.pibInbox.get(key). Messages are handled in order, so a runPython
// sent after a put sees the data.
self.pibInbox = new Map();

// Frames the page sends for the engine, by name: post {type: "bitmap", name, bitmap} with the
// ImageBitmap in the transfer list, then runPython code that takes it with
// pib.data.take_bitmap(name) (py_in_browser/_js.py). Messages arrive in order, so the frame is
// here before code sent after it runs.
self.pibBitmaps = new Map();

// The engine's JS bridges ship inside its package; py_in_browser/_js.py imports them through this.
self.pibImportModule = async (source) => {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  try {
    return await import(url);
  } finally {
    URL.revokeObjectURL(url);
  }
};

// runPython calls in flight, and when the last one ended: work that can wait (making the runtime
// snapshot, a whole Python start-up on another thread) waits until the page leaves the engine
// idle, so it does not slow the first steps after ready.
let running = 0;
let lastRunEnded = 0;
const IDLE_MS = 3000;

function whenIdle(task) {
  const check = () => {
    if (running === 0 && performance.now() - lastRunEnded >= IDLE_MS) task();
    else setTimeout(check, IDLE_MS / 4);
  };
  setTimeout(check, IDLE_MS);
}

function post(message) {
  self.postMessage(message);
}

async function fetchOk(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${await response.text()}`);
  return response;
}

// The server rebuilds the engine's bundle when its sources change; an edit between asking for the
// current build and downloading it makes that build vanish, so ask once more.
async function fetchEngineBundle(engine) {
  try {
    return await fetchBundle(engine.bundle_url);
  } catch (error) {
    if (!String(error.message).includes("HTTP 404")) throw error;
    return fetchBundle((await (await fetchOk("/api/engine")).json()).bundle_url);
  }
}

// The page stage: from the page's navigation to the worker's first stage (the page's scripts, the
// worker's module graph, its boot message), on the clock page and worker share; with it the stages
// add up to the page's ready_ms.
function pageStage(pageOrigin) {
  const ms = Math.round(performance.timeOrigin + performance.now() - pageOrigin);
  post({ type: "stage", stage: "page", state: "done", ms });
}

async function stage(name, work) {
  post({ type: "stage", stage: name, state: "start" });
  const started = performance.now();
  const value = await work();
  post({ type: "stage", stage: name, state: "done", ms: Math.round(performance.now() - started) });
  return value;
}

// `described`: /api/engine's answer as the page was served with it, or null; `pageOrigin`: the
// page's performance.timeOrigin; `workerCreated`: when the page created this worker (ms since
// its navigation).
// What the page downloads for this worker (engine-downloads.js): each message, by URL, as it
// arrives (it may come before boot asks for it).
const fromPage = new Map();
function arrival(url) {
  if (!fromPage.has(url)) {
    let resolve;
    const promise = new Promise((settle) => {
      resolve = settle;
    });
    fromPage.set(url, { promise, resolve });
  }
  return fromPage.get(url);
}

// What the worker takes from the page, as startEngineDownloads answered it ({module, downloads},
// or null when the page started none): the runtime's module and the downloads' bytes, each noted
// for http_cache (http-cache.js) and timed in `parts` as the page timed it; what the page failed
// to get (or did not start) the worker gets itself.
function handOver(pageDownloads, parts) {
  const { module: wasmURL, downloads } = pageDownloads ?? { module: null, downloads: [] };
  const taken = ({ url, stamp, span }, part) => {
    noteStamp(url, stamp);
    parts.spans[part] = span.map(Math.round);
  };
  return {
    async module(indexURL) {
      const handed = wasmURL === null ? null : await arrival(wasmURL).promise;
      if (handed?.module) {
        taken(handed, "wasm");
        return handed.module;
      }
      return parts.time("wasm", compileRuntime(indexURL));
    },
    // The bytes at `url` as `part`, else what `fetchItself()` answers.
    async bytes(url, part, fetchItself) {
      const absolute = new URL(url, self.location.href).href;
      const handed = downloads.includes(absolute) ? await arrival(absolute).promise : null;
      if (!handed?.bytes) return fetchItself();
      taken(handed, part);
      return new Uint8Array(handed.bytes);
    },
  };
}

// `pageDownloads`: what the page downloads for the worker (engine-downloads.js), or null.
async function boot({ backend, engine: described, pageOrigin, workerCreated, pageDownloads }) {
  const parts = new RuntimeParts(pageOrigin);
  parts.spans.worker = [Math.round(workerCreated), parts.now()]; // its scripts loading, until this boot
  const environmentPromise = parts.time("gpu_probe", probeGPU());
  const ownSnapshot = openSnapshot();
  const storedVerdicts = openVerdicts();
  const engine = described ?? (await (await fetchOk("/api/engine")).json());
  const page = handOver(pageDownloads, parts);
  const compiled = page.module(engine.runtime_url);
  compiled.catch(() => {}); // Pyodide compiles it itself then (runtime-loader.js)
  // The bundles download while the runtime compiles and starts Python, not after it.
  const numpyURL = engine.numpy_bundle_url;
  const numpyBundle = page.bytes(numpyURL, "numpy_download", () => fetchBundle(numpyURL));
  const engineBundle = page.bytes(engine.bundle_url, "engine_download", () => fetchEngineBundle(engine));
  numpyBundle.catch(() => {}); // awaited below; a failure surfaces there, not as an unhandled rejection
  engineBundle.catch(() => {});
  // What the stored snapshot and bytecode must have been made from: this runtime and these sources.
  const version = buildVersion(engine);
  const download = (url) => page.bytes(url, "snapshot_download", () => downloadSnapshot(url));
  const stored = parts.time("snapshot", chooseSnapshot(ownSnapshot, serverSnapshotURL(engine), version, download));
  pageStage(pageOrigin);
  const { pyodide, snapshot } = await stage("runtime", () =>
    startRuntime({ indexURL: engine.runtime_url, bundles: [numpyBundle, engineBundle], stored, compiled, parts }),
  );
  // A restored runtime has both packages installed and imported already.
  const restored = snapshot === "loaded";
  // Python is driven through proxies here, not runPython: compiling source wakes the parser.
  const sys = pyodide.pyimport("sys");
  const listed = pyodide.pyimport("site").getsitepackages();
  const sitePackages = listed.get(0);
  listed.destroy();
  await stage("numpy", async () => restored || installBundle(pyodide, await numpyBundle, sitePackages));
  const roots = ["numpy", "py_in_browser"].map((name) => `${sitePackages}/${name}`);
  let bytecode = null; // "loaded", "absent", "stale" or "unavailable" (bytecode-cache.js)
  let storeBytecode = false;
  await stage("engine", async () => {
    if (!restored) installBundle(pyodide, await engineBundle, sitePackages);
    // Modules imported after the snapshot's imports (by init, by page code) use it too.
    bytecode = await restoreBytecode(pyodide, version);
    // Python writes __pycache__ only when asked; what it writes now is stored after ready.
    storeBytecode = bytecode === "absent" || bytecode === "stale";
    if (storeBytecode) sys.dont_write_bytecode = false;
    runner = pyodide.pyimport("py_in_browser._worker");
    runner.set_hidden(hidden);
    runner.import_engine();
  });
  // Probed while the runtime started: the GPU the verdicts of earlier visits must have been made on.
  const environment = await environmentPromise;
  const verdictsFor = verdictsVersion(engine.digest, environment);
  const verdicts = await keptVerdicts(storedVerdicts, verdictsFor);
  const chosen = await stage("init", () => runner.boot(backend ?? null, verdicts));
  releaseProbedContext();
  sys.dont_write_bytecode = true; // init imports a few modules too
  // Per stage, whether its downloads came from the HTTP cache: the runtime's is its wasm, 10 of
  // its 14 MB (Pyodide fetches the rest itself).
  const httpCache = {
    runtime: fromHttpCache([runtimeWasmURL(engine.runtime_url)], engine.served_at),
    numpy: fromHttpCache([engine.numpy_bundle_url], engine.served_at),
    engine: fromHttpCache([engine.bundle_url], engine.served_at),
  };
  const snapshotSource = snapshot === "loaded" ? (await stored).source : null;
  // A snapshot that failed to restore is replaced too; the server's is kept in the browser, which
  // reads it back faster than from the HTTP cache (a plain file, no inflating).
  const makeSnapshot = snapshot !== "loaded" && snapshot !== "unavailable";
  const keepServerSnapshot = snapshotSource === "server" && (await canKeepEntries());
  post({
    type: "ready",
    backend: chosen,
    environment,
    python: runner.python_version(),
    httpCache,
    runtimeParts: parts.spans,
    bytecode,
    storeBytecode,
    snapshot,
    snapshotSource,
    storeSnapshot: makeSnapshot || keepServerSnapshot,
    build: engine.digest,
  });
  runner.after_ready(); // the backend's warm-up starts now that it cannot delay ready
  const learned = runner.verdicts_to_keep();
  if (verdicts !== null && learned !== verdicts) storeVerdicts(verdictsFor, learned).catch(() => {});
  const snapshotStored = (outcome) => post({ type: "snapshot-stored", outcome });
  if (makeSnapshot) {
    whenIdle(() =>
      storeSnapshot({
        indexURL: engine.runtime_url,
        version,
        bundleURLs: [engine.numpy_bundle_url, engine.bundle_url],
      }).then(snapshotStored),
    );
  } else if (keepServerSnapshot) {
    // The next visit then also finds the runtime's script compiled (code-cache.js).
    const script = `${engine.runtime_url}pyodide.asm.js`;
    whenIdle(() =>
      Promise.all([keepSnapshot(stored), primeCodeCache(script)]).then(([outcome]) => snapshotStored(outcome)),
    );
  }
  if (storeBytecode) {
    // After ready, so the first visit does not wait for it; the page hears when it is stored.
    saveBytecode(pyodide, roots, version).then(
      () => post({ type: "bytecode-stored", outcome: "stored" }),
      (error) => post({ type: "bytecode-stored", outcome: `failed: ${error.message ?? error}` }),
    );
  }
}

async function run({ id, code }) {
  running += 1;
  try {
    if (runner === null) throw new Error("the engine is not loaded yet: await window.pib.ready first");
    post({ type: "result", id, json: await runner.run_json(code) });
  } catch (error) {
    post({ type: "result", id, json: JSON.stringify({ ok: false, error: error.message ?? String(error) }) });
  } finally {
    running -= 1;
    lastRunEnded = performance.now();
  }
}

self.onmessage = ({ data }) => {
  if (data.type === "boot") {
    boot(data).catch((error) => post({ type: "boot-error", error: error.message ?? String(error) }));
  } else if (data.type === "run") {
    run(data);
  } else if (data.type === "put") {
    self.pibInbox.set(data.key, data.value);
  } else if (data.type === "visibility") {
    hidden = data.hidden;
    runner?.set_hidden(hidden);
  } else if (data.type === "runtime-module" || data.type === "download") {
    arrival(data.url).resolve(data);
  } else if (data.type === "bitmap") {
    self.pibBitmaps.get(data.name)?.close(); // a frame nobody took is replaced by the newer one
    self.pibBitmaps.set(data.name, data.bitmap);
  }
};
