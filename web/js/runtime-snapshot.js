// The engine right after its imports, as a Pyodide memory snapshot kept between visits.
//
// Starting the interpreter and importing numpy and the engine is most of start-up; restoring a
// snapshot taken after those imports skips all of it. The snapshot is the runtime's memory image
// plus what shared-libraries.js needs to reattach numpy's extension modules and the SIMD kernels.
// An instance started with _makeSnapshot wraps every JS object Python touches in a recording proxy
// (WebGPU calls through it fail), so the snapshot is made by a throwaway instance in a worker of
// its own once the engine is idle after ready, never by the engine's.
import { installBundle } from "./package-bundle.js";
import { relinkLibraries } from "./shared-libraries.js";
import { readEntry } from "./startup-cache.js";

export const SNAPSHOT_CACHE = "pib-runtime-snapshot";

// {pyodide, snapshot}: snapshot "loaded" when restored, else why not ("absent", "stale",
// "unavailable", or "failed: ..." when restoring threw and the runtime started afresh).
// `build` ({indexURL, version, bundles}) names the Pyodide build, the version the entry must have
// been made for (the runtime's and the packages' builds) and the packages' bundles (promises of
// their bytes). A restored runtime has them installed and imported; otherwise the caller does.
export async function startRuntime({ indexURL, version, bundles }) {
  const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
  const stored = await readEntry(SNAPSHOT_CACHE, version);
  if (stored.state !== "loaded") return { pyodide: await loadPyodide({ indexURL }), snapshot: stored.state };
  try {
    // A copy: Pyodide reads the snapshot as 32-bit words, which need an aligned start.
    const pyodide = await loadPyodide({ indexURL, _loadSnapshot: stored.body.slice() });
    const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
    for (const bundle of await Promise.all(bundles)) installBundle(pyodide, bundle, sitePackages);
    relinkLibraries(pyodide, stored.header.libraries);
    // Every restore starts from the same state: reseed Python's random module if it is loaded.
    pyodide.runPython("import sys\nif 'random' in sys.modules:\n    sys.modules['random'].seed()");
    return { pyodide, snapshot: "loaded" };
  } catch (error) {
    return { pyodide: await loadPyodide({ indexURL }), snapshot: `failed: ${error.message ?? error}` };
  }
}

// Makes and stores the snapshot in snapshot-worker.js for `build` ({indexURL, version,
// bundleURLs}); resolves to "stored" or "failed: ...".
export function storeSnapshot(build) {
  const worker = new Worker(new URL("./snapshot-worker.js", import.meta.url), { type: "module" });
  return new Promise((resolve) => {
    const finish = (outcome) => {
      worker.terminate();
      resolve(outcome);
    };
    worker.onmessage = ({ data }) => finish(data);
    worker.onerror = (event) => finish(`failed: ${event.message}`);
    worker.postMessage(build);
  });
}
