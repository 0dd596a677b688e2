// `node server/runtime_snapshot.mjs RUNTIME_DIR NUMPY_BUNDLE ENGINE_BUNDLE VERSION OUT`: the
// engine's runtime snapshot for first visits, made by the server (server/runtime_snapshot.py).
//
// Pyodide runs the same in Node: this starts it, installs both bundles and imports the engine as
// the page's worker does (web/js/snapshot-worker.js makes the same snapshot in a browser), then
// writes the framed file a worker restores: header {version, libraries}, then the memory image.
// A browser's runtime adds a function or two to the table that Node's does not (Chromium's
// JSPI wrappers), so the libraries are loaded past empty slots up to TABLE_START, which any

import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

import { frame } from "../web/js/framed.js";
import { installBundle } from "../web/js/package-bundle.js";
import { describeLibraries } from "../web/js/shared-libraries.js";

const SLOTS_ABOVE_RUNTIME = 256;
const [runtimeDir, numpyBundle, engineBundle, version, out] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(`${runtimeDir}/pyodide.mjs`).href);
const pyodide = await loadPyodide({ indexURL: `${runtimeDir}/`, _makeSnapshot: true });
const table = pyodide._module.wasmTable;
const tableStart = Math.ceil((table.length + SLOTS_ABOVE_RUNTIME) / 1024) * 1024;
table.grow(tableStart - table.length);
const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
for (const bundle of [numpyBundle, engineBundle]) installBundle(pyodide, new Uint8Array(readFileSync(bundle)), sitePackages);
pyodide.pyimport("py_in_browser._worker").import_engine();
const libraries = describeLibraries(pyodide, sitePackages);
const snapshot = pyodide.makeMemorySnapshot();
writeFileSync(out, new Uint8Array(await frame({ version, libraries }, [snapshot]).arrayBuffer()));
