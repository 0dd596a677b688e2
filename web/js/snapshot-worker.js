// Starts a throwaway Pyodide runtime, installs and imports numpy and the engine as the engine's
// worker does, and stores its memory snapshot (runtime-snapshot.js says why here, off the engine's
// worker); answers "stored" or "failed: ...".
import { fetchBundle, installBundle } from "./package-bundle.js";
import { SNAPSHOT_CACHE } from "./runtime-snapshot.js";
import { describeLibraries } from "./shared-libraries.js";
import { writeEntry } from "./startup-cache.js";

self.onmessage = async ({ data: { indexURL, version, bundleURLs } }) => {
  try {
    const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
    const pyodide = await loadPyodide({ indexURL, _makeSnapshot: true });
    const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
    for (const url of bundleURLs) installBundle(pyodide, await fetchBundle(url), sitePackages);
    pyodide.pyimport("py_in_browser._worker").import_engine();
    const libraries = describeLibraries(pyodide, sitePackages);
    await writeEntry(SNAPSHOT_CACHE, { version, libraries }, [pyodide.makeMemorySnapshot()]);
    self.postMessage("stored");
  } catch (error) {
    self.postMessage(`failed: ${error.message ?? error}`);
  }
};
