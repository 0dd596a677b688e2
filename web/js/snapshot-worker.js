// Starts a throwaway Pyodide runtime, installs and imports numpy and the engine as the engine's
// worker does, and makes its memory snapshot (runtime-snapshot.js says why here, off the engine's
// worker). With deliver "cache" it stores the snapshot in the browser and answers "stored"; with
// "blob" it answers the stored layout as a Blob; on failure it answers "failed: ...".
import { frame } from "./framed.js";
import { fetchBundle, installBundle } from "./package-bundle.js";
import { SNAPSHOT_CACHE } from "./runtime-snapshot.js";
import { describeLibraries } from "./shared-libraries.js";
import { writeEntry } from "./startup-cache.js";

self.onmessage = async ({ data: { indexURL, version, bundleURLs, deliver } }) => {
  try {
    const { loadPyodide } = await import(`${indexURL}pyodide.mjs`);
    const pyodide = await loadPyodide({ indexURL, _makeSnapshot: true });
    const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
    for (const url of bundleURLs) installBundle(pyodide, await fetchBundle(url), sitePackages);
    pyodide.pyimport("py_in_browser._worker").import_engine();
    const header = { version, libraries: describeLibraries(pyodide, sitePackages) };
    const image = pyodide.makeMemorySnapshot();
    if (deliver === "blob") {
      self.postMessage(frame(header, [image]));
    } else {
      await writeEntry(SNAPSHOT_CACHE, header, [image]);
      self.postMessage("stored");
    }
  } catch (error) {
    self.postMessage(`failed: ${error.message ?? error}`);
  }
};
