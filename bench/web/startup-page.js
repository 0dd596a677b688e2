// Start-up of TF.js or jax-js alone, timed from navigation (performance.now() is 0 there) to an
// engine ready on the backend asked for: window.startup resolves to {ready_ms, stages, backend}.
// Stages: the library's code loaded and run (scripts / module), then its backend started.
const params = new URLSearchParams(location.search);
const side = params.get("side");
const backend = params.get("backend");
const TFJS_SCRIPTS = [
  "/vendor/@tensorflow/tfjs/dist/tf.min.js",
  "/vendor/@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js",
  "/vendor/@tensorflow/tfjs-backend-wasm/dist/tf-backend-wasm.min.js",
];

// Classic scripts fetched in parallel and run in order, as the bench page's <script> tags are.
function loadScripts(sources) {
  return Promise.all(
    sources.map(
      (src) =>
        new Promise((resolve, reject) => {
          const script = document.createElement("script");
          script.src = src;
          script.async = false;
          script.onload = resolve;
          script.onerror = () => reject(new Error(`${src} did not load`));
          document.head.append(script);
        }),
    ),
  );
}

async function startTfjs() {
  await loadScripts(TFJS_SCRIPTS);
  const loaded = performance.now();
  tf.wasm.setWasmPaths("/vendor/@tensorflow/tfjs-backend-wasm/dist/");
  if (!(await tf.setBackend(backend)) || tf.getBackend() !== backend) {
    throw new Error(`tf.setBackend("${backend}") failed (now ${tf.getBackend()})`);
  }
  await tf.ready();
  return { loaded, library: tf.version.tfjs };
}

async function startJaxjs() {
  const jax = await import("/vendor/@jax-js/jax/dist/index.js");
  const loaded = performance.now();
  const available = await jax.init(backend);
  if (!available.includes(backend)) throw new Error(`jax-js init("${backend}"): not available here`);
  jax.defaultDevice(backend);
  return { loaded, library: "jax-js" };
}

async function start() {
  const started = side === "tfjs" ? startTfjs() : side === "jaxjs" ? startJaxjs() : Promise.reject(new Error(`unknown side ${side}`));
  const { loaded, library } = await started;
  const ready = performance.now();
  const stages = side === "tfjs" ? { scripts: loaded, backend: ready - loaded } : { module: loaded, init: ready - loaded };
  return { ready_ms: ready, stages, backend, library };
}

window.startup = start();
window.startup.then(
  (outcome) => { document.getElementById("status").textContent = `${outcome.library} ready on ${backend} in ${outcome.ready_ms.toFixed(0)} ms`; },
  (error) => { document.getElementById("status").textContent = error.message; },
);
