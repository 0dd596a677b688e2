// The benchmark page: our engine (worker, ?backend=), TF.js and jax-js (this thread), driven through
// window.bench by bench/run.py; it renders the results it is handed as a live report.
import { startEngine } from "/js/pib-client.js";
import { renderReport } from "./report-view.js";
import { JaxjsSide } from "./jaxjs-side.js";
import { TfjsSide } from "./tfjs-side.js";

const status = document.getElementById("status");
const requested = new URLSearchParams(location.search).get("backend");
const engineStarted = performance.now();
const pib = startEngine();
window.pib = pib;

// A JSON string literal is also a valid Python string literal: how arguments reach the worker.
const pyString = (text) => JSON.stringify(text);
// The gist of an error: a Python traceback's last line (the exception), else the first line.
const gist = (message) => {
  const lines = message.trim().split("\n").filter((line) => line.trim());
  return (message.includes("Traceback") ? lines.at(-1) : lines[0]) ?? message;
};
// Once the classic TF.js scripts above this module have loaded and run: TF.js's own load time.
const tfjsScriptsMs = performance.now();

// Ours is ready when the engine booted on the requested backend and our side's code is loaded.
const ours = pib.ready.then(
  async () => {
    const ms = performance.now() - engineStarted;
    if (requested && pib.backend !== requested) {
      return { ok: false, error: `the engine came up on ${pib.backend}, not ${requested}` };
    }
    try {
      const source = await (await fetch("pib_side.py")).text();
      await pib.runPython(source);
    } catch (error) {
      return { ok: false, error: `bench/web/pib_side.py did not load: ${gist(error.message)}` };
    }
    return { ok: true, ms, backend: pib.backend, stages: pib.stages, environment: pib.environment };
  },
  (error) => ({ ok: false, error: gist(error.message) }), // reported as "unavailable: <why>"
);

async function webgpuAdapter() {
  try {
    const adapter = await navigator.gpu?.requestAdapter();
    if (!adapter) return null;
    const { vendor, architecture, device, description } = adapter.info ?? {};
    return { vendor, architecture, device, description, fallback: adapter.info?.isFallbackAdapter ?? null };
  } catch (error) {
    return { error: error.message };
  }
}

function webglRenderer() {
  const gl = document.createElement("canvas").getContext("webgl2");
  if (!gl) return null;
  const debug = gl.getExtension("WEBGL_debug_renderer_info");
  return {
    renderer: gl.getParameter(debug ? debug.UNMASKED_RENDERER_WEBGL : gl.RENDERER),
    vendor: gl.getParameter(debug ? debug.UNMASKED_VENDOR_WEBGL : gl.VENDOR),
    version: gl.getParameter(gl.VERSION),
  };
}

const theirs = new TfjsSide();
const jaxjs = new JaxjsSide();
// The sides share method names; Python spells them first_step, JavaScript firstStep.
const callSide = (side, method, args) => side[method.replace(/_(\w)/g, (_, c) => c.toUpperCase())](args);

window.bench = {
  async info() {
    return {
      user_agent: navigator.userAgent,
      hardware_concurrency: navigator.hardwareConcurrency,
      cross_origin_isolated: crossOriginIsolated,
      webgpu_adapter: await webgpuAdapter(),
      webgl: webglRenderer(),
      tfjs: theirs.info().version,
      jaxjs: (await jaxjs.info()).version,
      tfjs_scripts_loaded_ms: tfjsScriptsMs,
    };
  },
  oursStart: () => ours,
  ours: (method, args = {}) =>
    pib.runPython(`await pib_bench_call(${pyString(method)}, ${pyString(JSON.stringify(args))})`),
  theirs: (method, args = {}) => callSide(theirs, method, args),
  jaxjs: (method, args = {}) => callSide(jaxjs, method, args),
  render(results) {
    renderReport(document.getElementById("report"), results);
  },
  status(text) {
    status.textContent = text;
  },
};

ours.then((outcome) => {
  status.textContent = outcome.ok ? `engine ready on ${outcome.backend}` : outcome.error;
});
