// The engine right after its imports, as a Pyodide memory snapshot kept between visits.
//
// Starting the interpreter and importing numpy and the engine is most of start-up; restoring a
// snapshot taken after those imports skips all of it. The snapshot is the runtime's memory image
// plus what shared-libraries.js needs to reattach numpy's extension modules and the SIMD kernels.
// An instance started with _makeSnapshot wraps every JS object Python touches in a recording proxy
// (WebGPU calls through it fail), so the snapshot is made by a throwaway instance in a worker of
// its own once the engine is idle after ready, never by the engine's.
//
// A first visit has no snapshot of its own: the dev server offers one that `py-in-browser setup`
// made in headless Chromium with this same code (snapshot-maker.js), so even the first visit
// skips Python's start-up; the browser makes its own only when the server has none for this build.
import { unframe } from "./framed.js";
import { askWorker } from "./one-shot-worker.js";
import { bundleFiles, installBundle } from "./package-bundle.js";
import { compileLibraries, relinkLibraries } from "./shared-libraries.js";
import { importRuntime } from "./runtime-loader.js";
import { checkEntry, openEntry, writeEntry } from "./startup-cache.js";

export const SNAPSHOT_CACHE = "pib-runtime-snapshot";

// What an engine build is made of, as /api/engine names it: the runtime's and the packages'
// builds. Snapshots and bytecode made from another are stale.
export function buildVersion(engine) {
  return `${engine.runtime_url} ${engine.numpy_bundle_url} ${engine.digest}`;
}

// Whether this browser can suspend WebAssembly (JSPI): WebKit cannot.
function hasJSPI() {
  return typeof WebAssembly.Suspending === "function";
}

// What a snapshot depends on beyond the build: Pyodide records at start-up whether the browser can
// suspend WebAssembly (JSPI), and a restored image keeps that answer.
function snapshotVersion(version) {
  return `${version} jspi=${hasJSPI()}`;
}

// The server's snapshot for this browser in /api/engine's description `engine`, or null: the one
// set-up made in WebKitGTK for browsers without JSPI (an image holds function-table slots that
// only the engine which made it assigns alike, so Chromium's would not restore in WebKit).
export function serverSnapshotURL(engine) {
  return (hasJSPI() ? engine.snapshot_url : engine.snapshot_url_without_jspi) ?? null;
}

// Starts reading the browser's own snapshot before the build it must match is known.
export function openSnapshot() {
  return openEntry(SNAPSHOT_CACHE);
}

// The snapshot the server offers at `url`: its bytes, or null when it has none (any longer).
export async function downloadSnapshot(url) {
  const response = await fetch(url);
  return response.ok ? new Uint8Array(await response.arrayBuffer()) : null;
}

// The snapshot to restore for `version` (a promise for startRuntime): the browser's own (`local`,
// openSnapshot's promise) when it was made for this build, else the server's at `serverURL` (null
// when it has none; `download` gets its bytes, downloadSnapshot's way), else the local entry's
// state. The server's, once restored, replaces a stale local entry (keepSnapshot).
export async function chooseSnapshot(local, serverURL, version, download = downloadSnapshot) {
  const expected = snapshotVersion(version);
  const own = checkEntry(await local, expected);
  if (own.state === "loaded" || !serverURL) return { ...own, source: "browser" };
  const bytes = await download(serverURL);
  if (bytes === null) return own;
  const served = checkEntry({ state: "found", ...unframe(bytes) }, expected);
  if (served.state !== "loaded") return own;
  return { ...served, source: "server" };
}

// The libraries a snapshot relinks, compiled from the bundles as soon as they arrive (part
// "libraries" of `parts`, until the last is compiled).
async function compileFromBundles(libraries, bundles, parts) {
  const files = new Map();
  for (const bytes of await Promise.all(bundles)) for (const [name, contents] of bundleFiles(bytes)) files.set(name, contents);
  const compiled = compileLibraries(libraries, files);
  for (const module of compiled) module.catch(() => {}); // awaited by relinkLibraries, if it gets there
  parts.time("libraries", Promise.all(compiled)).catch(() => {});
  return compiled;
}

// Why a runtime starts afresh: the snapshot's state ("absent", "stale", "unavailable").
class NotRestoring extends Error {
  constructor(state) {
    super(state);
    this.state = state;
  }
}

// The snapshot's image as Pyodide reads it (32-bit words, so a 4-byte-aligned start; frame()
// pads headers so the body is, and copies only otherwise), or NotRestoring.
function restorableImage(entry) {
  if (entry.state !== "loaded") throw new NotRestoring(entry.state);
  return entry.body.byteOffset % 4 === 0 ? entry.body : entry.body.slice();
}

// {pyodide, snapshot}: snapshot "loaded" when restored, else why not ("absent", "stale",
// "unavailable", or "failed: ..." when restoring threw and the runtime started afresh).
// `build` ({indexURL, bundles, stored, compiled, parts}) names the Pyodide build, the packages'
// bundles (promises of their bytes), the snapshot (chooseSnapshot's promise) and the runtime's
// module (runtime-loader.js's compileRuntime promise); the parts are timed in `parts`
// (runtime-parts.js). A restored runtime has the packages installed and imported; otherwise the
// caller does both.
export async function startRuntime({ indexURL, bundles, stored, compiled, parts }) {
  const loadPyodide = await parts.time("script", importRuntime(indexURL, compiled, parts));
  // The shared libraries compile (off this thread) from the moment the bundles and the snapshot's
  // record of them are here, while the runtime starts.
  const libraries = stored.then((entry) => entry.state === "loaded" && compileFromBundles(entry.header.libraries, bundles, parts));
  libraries.catch(() => {}); // awaited below, if restoring gets there
  try {
    // loadPyodide awaits the image only after it has loaded its scripts, so both happen while the
    // snapshot arrives.
    const image = stored.then(restorableImage);
    const pyodide = await parts.time("restore", loadPyodide({ indexURL, _loadSnapshot: image }));
    const described = (await stored).header.libraries;
    const compiledLibraries = await libraries;
    const bundleBytes = await Promise.all(bundles);
    parts.run("files", () => {
      for (const bytes of bundleBytes) installBundle(pyodide, bytes, described.sitePackages);
    });
    await parts.time("relink", relinkLibraries(pyodide, described, compiledLibraries));
    // Every restore starts from the same state: reseed Python's random module if it is loaded
    // (through proxies, not runPython: compiling source first runs the parser, ~5 ms cold).
    const modules = pyodide.pyimport("sys").modules;
    const random = modules.get("random");
    random?.seed();
    random?.destroy();
    modules.destroy();
    return { pyodide, snapshot: "loaded" };
  } catch (error) {
    const why = error instanceof NotRestoring ? error.state : `failed: ${error.message ?? error}`;
    return { pyodide: await parts.time("fresh", loadPyodide({ indexURL })), snapshot: why };
  }
}

// Runs snapshot-worker.js on `task` ({indexURL, version, bundleURLs, deliver}); resolves to what
// it answers.
function runSnapshotWorker(task) {
  const url = new URL("./snapshot-worker.js", import.meta.url);
  return askWorker(url, { ...task, version: snapshotVersion(task.version) });
}

// Makes the snapshot for `build` ({indexURL, version, bundleURLs}) and stores it in the browser;
// resolves to "stored" or "failed: ...".
export function storeSnapshot(build) {
  return runSnapshotWorker({ ...build, deliver: "cache" });
}

// Keeps a snapshot the server sent (chooseSnapshot's promise) as the browser's own; resolves to
// "stored" or "failed: ...".
export async function keepSnapshot(stored) {
  const { header, body } = await stored;
  return writeEntry(SNAPSHOT_CACHE, header, [body]).then(
    () => "stored",
    (error) => `failed: ${error.message ?? error}`,
  );
}

// Makes the snapshot for `build` as a Blob in the stored layout (the server's copy).
export async function makeSnapshot(build) {
  const made = await runSnapshotWorker({ ...build, deliver: "blob" });
  if (typeof made === "string") throw new Error(made);
  return made;
}
