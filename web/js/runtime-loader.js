// Pyodide's runtime with its WebAssembly compiled from the worker's first moment.
//
// loadPyodide fetches pyodide.asm.wasm early but compiles it only once pyodide.asm.js has loaded
// and the snapshot has been read: one after the other. V8 compiles lazily and keeps the compiled
// code between visits, so in Chromium that costs ~30 ms; JavaScriptCore (Safari, WebKitGTK 2.50)
// validates and prepares every function of the 10 MB module up front on every visit (0.4-0.6 s
// on this machine, more under load) and keeps nothing between visits. Compiling it here, streamed
// as it downloads, while the script loads and the snapshot is read or downloaded, takes that off
// the path to ready; the runtime is then instantiated from the compiled module through
// emscripten's instantiateWasm hook.
import { noteResponse } from "./http-cache.js";

// The runtime's module, compiling as it streams in (WebAssembly.compileStreaming needs the server's
// application/wasm type, which server/static.py gives .wasm files).
export function compileRuntime(indexURL) {
  const response = fetch(runtimeWasmURL(indexURL));
  response.then(noteResponse, () => {}); // a failed download fails the compile, reported there
  return WebAssembly.compileStreaming(response);
}

// The runtime's WebAssembly, the largest of its downloads.
export function runtimeWasmURL(indexURL) {
  return `${indexURL}pyodide.asm.wasm`;
}

// Loads Pyodide's scripts and answers a loadPyodide that instantiates the runtime from `compiled`
// (compileRuntime's promise): parts "instantiate" and "link" (emscripten taking in the instance's
// ~9,800 exports) of `parts`. Pyodide reuses an emscripten
// factory that is already loaded, so the one loaded here is wrapped to pass the compiled module;
// were compiling to fail, Pyodide's own fetch and compile take over. Emscripten has no way to hear
// that instantiating failed (Pyodide's own hook only warns, and loadPyodide never settles), so the
// answered loadPyodide rejects with that error instead.
export async function importRuntime(indexURL, compiled, parts) {
  const [{ loadPyodide }] = await Promise.all([
    import(`${indexURL}pyodide.mjs`),
    import(`${indexURL}pyodide.asm.js`), // defines globalThis._createPyodideModule
  ]);
  const createModule = globalThis._createPyodideModule;
  let failed;
  globalThis._createPyodideModule = (settings) => {
    const fallback = settings.instantiateWasm;
    settings.instantiateWasm = (imports, receive) => {
      const instantiated = compiled.then(
        async (module) => {
          const instance = await parts.time("instantiate", WebAssembly.instantiate(module, imports));
          parts.run("link", () => receive(instance, module));
        },
        () => fallback(imports, receive),
      );
      failed(instantiated);
      return {}; // emscripten's sign that the instance comes later, through `receive`
    };
    return createModule(settings);
  };
  return (options) => {
    const failure = new Promise((_, reject) => {
      failed = (instantiated) => instantiated.catch(reject);
    });
    return Promise.race([loadPyodide(options), failure]);
  };
}
