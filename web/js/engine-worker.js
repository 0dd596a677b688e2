// The engine's Web Worker: loads Pyodide, numpy and the py_in_browser wheel, then runs page code.
import { probeGPU } from "./gpu-probe.js";

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

// The engine's JS bridges ship inside its wheel; py_in_browser/_js.py imports them through this.
self.pibImportModule = async (source) => {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  try {
    return await import(url);
  } finally {
    URL.revokeObjectURL(url);
  }
};

function post(message) {
  self.postMessage(message);
}

async function stage(name, work) {
  post({ type: "stage", stage: name, state: "start" });
  const started = performance.now();
  const value = await work();
  post({ type: "stage", stage: name, state: "done", ms: Math.round(performance.now() - started) });
  return value;
}

async function fetchOk(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${await response.text()}`);
  return response;
}

// The server rebuilds the wheel when the engine's sources change; an edit between asking for the
// current build and downloading it makes that build vanish, so ask once more.
async function fetchEngineWheel(engine) {
  const response = await fetch(engine.wheel_url);
  if (response.status === 404) {
    const current = await (await fetchOk("/api/engine")).json();
    return (await fetchOk(current.wheel_url)).arrayBuffer();
  }
  if (!response.ok) throw new Error(`${engine.wheel_url}: HTTP ${response.status} ${await response.text()}`);
  return response.arrayBuffer();
}

async function boot({ backend }) {
  const environmentPromise = probeGPU();
  const engine = await (await fetchOk("/api/engine")).json();
  const pyodide = await stage("runtime", async () => {
    const { loadPyodide } = await import(`${engine.runtime_url}pyodide.mjs`);
    return loadPyodide({ indexURL: engine.runtime_url });
  });
  await stage("numpy", () => pyodide.loadPackage("numpy", { messageCallback: () => {} }));
  const environment = await environmentPromise;
  const chosen = await stage("engine", async () => {
    const wheel = await fetchEngineWheel(engine);
    const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
    pyodide.unpackArchive(wheel, "wheel", { extractDir: sitePackages });
    runner = pyodide.pyimport("py_in_browser._worker");
    runner.set_hidden(hidden);
    return runner.boot(backend ?? null);
  });
  post({ type: "ready", backend: chosen, environment, python: runner.python_version() });
}

async function run({ id, code }) {
  try {
    if (runner === null) throw new Error("the engine is not loaded yet: await window.pib.ready first");
    post({ type: "result", id, json: await runner.run_json(code) });
  } catch (error) {
    post({ type: "result", id, json: JSON.stringify({ ok: false, error: error.message ?? String(error) }) });
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
  } else if (data.type === "bitmap") {
    self.pibBitmaps.get(data.name)?.close(); // a frame nobody took is replaced by the newer one
    self.pibBitmaps.set(data.name, data.bitmap);
  }
};
