// The engine right after its imports, as a Pyodide memory snapshot kept between visits.
//
// Starting the interpreter and importing numpy and the engine is most of start-up; restoring a
// snapshot taken after those imports skips all of it. The snapshot is the runtime's memory image
// plus what shared-libraries.js needs to reattach numpy's extension modules and the SIMD kernels.
// An instance started with _makeSnapshot wraps every JS object Python touches in a recording proxy
// (WebGPU calls through it fail), so the snapshot is made by a throwaway instance in a worker of
// its own once the engine is idle after ready, never by the engine's.
import { bundleFiles, installBundle } from "./package-bundle.js";
import { compileLibraries, relinkLibraries } from "./shared-libraries.js";
import { checkEntry, openEntry } from "./startup-cache.js";

export const SNAPSHOT_CACHE = "pib-runtime-snapshot";

// Starts reading the stored snapshot before the build it must match is known (a promise for
// startRuntime).
export function openSnapshot() {
  return openEntry(SNAPSHOT_CACHE);
}

// The libraries a snapshot relinks, compiled from the bundles as soon as they arrive.
async function compileFromBundles(libraries, bundles) {
  const files = new Map();
  for (const bytes of await Promise.all(bundles)) for (const [name, contents] of bundleFiles(bytes)) files.set(name, contents);
  const compiled = compileLibraries(libraries, files);
  for (const module of compiled) module.catch(() => {}); // awaited by relinkLibraries, if it gets there
  return compiled;
}

// {pyodide, snapshot}: snapshot "loaded" when restored, else why not ("absent", "stale",
// "unavailable", or "failed: ..." when restoring threw and the runtime started afresh).
// `build` ({indexURL, version, bundles, stored}) names the Pyodide build, the version the entry
// must have been made for (the runtime's and the packages' builds), the packages' bundles
// (promises of their bytes) and the stored entry (openSnapshot's promise). A restored runtime has
// the packages installed and imported; otherwise the caller does both.
export async function startRuntime({ indexURL, version, bundles, stored }) {
  const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
  const entry = checkEntry(await stored, version);
  if (entry.state !== "loaded") return { pyodide: await loadPyodide({ indexURL }), snapshot: entry.state };
  try {
    const { libraries } = entry.header;
    const compiled = compileFromBundles(libraries, bundles);
    // A copy: Pyodide reads the snapshot as 32-bit words, which need an aligned start.
    const pyodide = await loadPyodide({ indexURL, _loadSnapshot: entry.body.slice() });
    for (const bytes of await Promise.all(bundles)) installBundle(pyodide, bytes, libraries.sitePackages);
    await relinkLibraries(pyodide, libraries, await compiled);
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
