// Starts a throwaway Pyodide runtime and stores its memory snapshot (runtime-snapshot.js says why
// here, off the engine's worker); answers "stored" or "failed: ...".
import { SNAPSHOT_CACHE } from "./runtime-snapshot.js";
import { writeEntry } from "./startup-cache.js";

self.onmessage = async ({ data: { indexURL } }) => {
  try {
    const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
    const pyodide = await loadPyodide({ indexURL, _makeSnapshot: true });
    await writeEntry(SNAPSHOT_CACHE, { version: indexURL }, [pyodide.makeMemorySnapshot()]);
    self.postMessage("stored");
  } catch (error) {
    self.postMessage(`failed: ${error.message ?? error}`);
  }
};
