// The Python runtime right after start-up, as a Pyodide memory snapshot kept between visits.
//
// Starting the interpreter (its own imports, Pyodide's Python side) is most of the runtime stage;
// restoring a snapshot of its memory skips it. Pyodide 0.27 cannot snapshot after loading binary
// extensions (numpy), so the snapshot holds the bare runtime and numpy and the engine load after
// it as usual. An instance started with _makeSnapshot wraps every JS object Python touches in a
// recording proxy (WebGPU calls through it fail), so the snapshot is made by a throwaway instance
// in a worker of its own once the engine is idle after ready, never by the engine's.
import { readEntry } from "./startup-cache.js";

export const SNAPSHOT_CACHE = "pib-runtime-snapshot";

// {pyodide, snapshot}: snapshot "loaded" when restored, else why not ("absent", "stale",
// "unavailable", or "failed: ..." when restoring threw and the runtime started afresh).
// `indexURL` names the Pyodide build, which the entry must have been made from.
export async function startRuntime(indexURL) {
  const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
  const stored = await readEntry(SNAPSHOT_CACHE, indexURL);
  if (stored.state !== "loaded") return { pyodide: await loadPyodide({ indexURL }), snapshot: stored.state };
  try {
    // A copy: Pyodide reads the snapshot as 32-bit words, which need an aligned start.
    const pyodide = await loadPyodide({ indexURL, _loadSnapshot: stored.body.slice() });
    // Every restore starts from the same state: reseed Python's random module if it is loaded.
    pyodide.runPython("import sys\nif 'random' in sys.modules:\n    sys.modules['random'].seed()");
    return { pyodide, snapshot: "loaded" };
  } catch (error) {
    return { pyodide: await loadPyodide({ indexURL }), snapshot: `failed: ${error.message ?? error}` };
  }
}

// Makes and stores the snapshot in snapshot-worker.js; resolves to "stored" or "failed: ...".
export function storeSnapshot(indexURL) {
  const worker = new Worker(new URL("./snapshot-worker.js", import.meta.url), { type: "module" });
  return new Promise((resolve) => {
    const finish = (outcome) => {
      worker.terminate();
      resolve(outcome);
    };
    worker.onmessage = ({ data }) => finish(data);
    worker.onerror = (event) => finish(`failed: ${event.message}`);
    worker.postMessage({ indexURL });
  });
}
