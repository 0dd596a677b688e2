// The engine's downloads, begun by the page: the runtime's wasm (compiled as it streams in), the
// runtime snapshot the server preloads for a first visit, and the numpy and engine bundles.
//
// The engine's worker loads its own module scripts only once the page has created it, and no
// preload reaches them: 2 s of a first visit in WebKit here, 0.5 s in Chromium. Begun on the page,
// the downloads and the compile are that much further along when the worker boots; it takes them
// by message (engine-worker.js): the compiled WebAssembly.Module, which every engine posts to its
// workers, and each download's bytes, transferred. Only first visits (the page preloads the
// server's snapshot) gain: later ones find the worker's scripts cached (0.1-0.5 s), and handing
// over cost more than it saved there (WebKit, second visits alternated on this machine: median
// ready 6.9 s handed over against 4.2 s downloaded by the worker, 5 visits each).
import { stampOf } from "./http-cache.js";
import { runtimeWasmURL } from "./runtime-loader.js";

// The snapshot the server preloads for this page (server/main.py leaves the link out when the
// browser holds its own copy), or null.
function preloadedSnapshot() {
  return document.querySelector('link[rel="preload"][as="fetch"][href*="snapshot"]')?.href ?? null;
}

// On a first visit, starts the downloads of the engine `described` (/api/engine's answer, which
// the page carries) and posts each to `worker` as it completes: {type: "runtime-module", module (null when compiling
// failed), url, stamp, span} and {type: "download", url, bytes (an ArrayBuffer, null when the
// download failed), stamp, span}, where stamp is the server's (http-cache.js) and span [start, end]
// ms since navigation. Answers what the worker is to wait for: {module: the wasm's URL, downloads:
// [URL]}, absolute; null on later visits.
export function startEngineDownloads(described, worker) {
  const snapshot = preloadedSnapshot();
  if (snapshot === null) return null;
  const absolute = (url) => new URL(url, location.href).href;
  const wasm = absolute(runtimeWasmURL(described.runtime_url));
  const compileStarted = performance.now();
  const response = fetch(wasm);
  WebAssembly.compileStreaming(response)
    .then(async (module) => ({ module, stamp: stampOf(await response) }))
    .catch(() => ({ module: null, stamp: NaN }))
    .then(({ module, stamp }) => {
      const message = { type: "runtime-module", url: wasm, stamp, span: [compileStarted, performance.now()] };
      try {
        worker.postMessage({ ...message, module });
      } catch {
        worker.postMessage({ ...message, module: null }); // a browser that cannot post modules
      }
    });
  const urls = [snapshot, described.numpy_bundle_url, described.bundle_url].map(absolute);
  for (const url of urls) {
    const started = performance.now();
    fetch(url)
      .then(async (answer) => {
        if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
        return { bytes: await answer.arrayBuffer(), stamp: stampOf(answer) };
      })
      .catch(() => ({ bytes: null, stamp: NaN })) // the worker downloads it itself then
      .then(({ bytes, stamp }) => {
        const message = { type: "download", url, bytes, stamp, span: [started, performance.now()] };
        worker.postMessage(message, bytes ? [bytes] : []);
      });
  }
  return { module: wasm, downloads: urls };
}
