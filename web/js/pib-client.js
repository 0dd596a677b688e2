// window.pib on the page: starts the engine worker and forwards runPython calls to it (API.md).

const BACKENDS = ["webgpu", "webgl2", "cpu"];

export function startEngine({ onStage = () => {} } = {}) {
  const requested = new URLSearchParams(location.search).get("backend");
  const worker = new Worker(new URL("./engine-worker.js", import.meta.url), { type: "module" });
  const pending = new Map();
  let nextId = 0;
  const pib = {
    backend: null,
    environment: null,
    python: null,
    stages: {},
    ready: null,
    runPython(code) {
      const id = nextId++;
      return new Promise((resolve, reject) => {
        pending.set(id, { resolve, reject });
        worker.postMessage({ type: "run", id, code: String(code) });
      });
    },
  };
  pib.ready = new Promise((resolve, reject) => {
    if (requested !== null && !BACKENDS.includes(requested)) {
      reject(new Error(`?backend=${requested} is not a backend; use one of ${BACKENDS.join(", ")}`));
      return;
    }
    worker.onmessage = ({ data }) => {
      if (data.type === "stage") {
        pib.stages[data.stage] = { state: data.state, ms: data.ms ?? null };
        onStage(data);
      } else if (data.type === "ready") {
        Object.assign(pib, { backend: data.backend, environment: data.environment, python: data.python });
        resolve(pib);
      } else if (data.type === "boot-error") {
        reject(new Error(data.error));
      } else if (data.type === "result") {
        const call = pending.get(data.id);
        pending.delete(data.id);
        const outcome = JSON.parse(data.json);
        if (outcome.ok) call.resolve(outcome.value);
        else call.reject(new Error(outcome.error));
      }
    };
    worker.onerror = (event) => reject(new Error(`engine worker failed: ${event.message}`));
    worker.postMessage({ type: "boot", backend: requested });
  });
  return pib;
}
