// Reattaches the shared libraries a restored memory snapshot's Python state uses.
//
// A Pyodide 0.27 snapshot is the runtime's memory image; the code of the shared libraries loaded
// before it (numpy's extension modules, the cpu SIMD kernels) lives in WebAssembly instances of
// their own, which the image does not hold, and the image refers to their functions by slots in
// the function table. Emscripten's dlopen records, in each library's handle in wasm memory, the
// memory and table bases it gave the library, and a load through that handle reuses them (its way
// of loading one library in several threads). So reloading every library through its handle, in
// the original order, puts its own functions back in their slots; the slots dlsym appended for
// exported functions (each PyInit_*, every kernel ctypes calls) are put back by name; and as
// instantiating re-applies a library's initial data, its data region is then written back from
// the image.

// The handle fields emscripten's dlopen fills (struct dso in its libc): byte offsets.
const MEMORY_BASE = 12;
const MEMORY_SIZE = 16;
const TABLE_BASE = 20;
const TABLE_SIZE = 24;
const FLAGS = 4;
const RTLD_GLOBAL = 256;

function layout(module, handle) {
  return {
    memoryBase: module.HEAPU32[(handle + MEMORY_BASE) >>> 2],
    memorySize: module.HEAP32[(handle + MEMORY_SIZE) >>> 2],
    tableBase: module.HEAPU32[(handle + TABLE_BASE) >>> 2],
    tableSize: module.HEAP32[(handle + TABLE_SIZE) >>> 2],
  };
}

// Every exported function of the loaded libraries, by function: [library index, export name].
function exportedFunctions(module, handles) {
  const byFunction = new Map();
  handles.forEach((handle, index) => {
    for (const [name, value] of Object.entries(module.LDSO.loadedLibsByHandle[handle].exports)) {
      if (typeof value === "function" && !byFunction.has(value)) byFunction.set(value, [index, name]);
    }
  });
  return byFunction;
}

// What relinking needs, read from the runtime before its snapshot is taken: every library's
// handle and path in load order, the slots outside the libraries' own ranges (dlsym's and the GOT's) by
// the export they hold, the table length, and the value of every GOT entry. Throws when a slot
// holds a function no library exports (relinking could not put it back).
export function describeLibraries(pyodide, sitePackages) {
  const module = pyodide._module;
  const { LDSO, GOT, wasmTable } = module;
  const byDso = new Map(Object.entries(LDSO.loadedLibsByHandle).map(([handle, dso]) => [dso, Number(handle)]));
  const handles = Object.values(LDSO.loadedLibsByName)
    .map((dso) => byDso.get(dso))
    .filter((handle) => handle !== undefined && handle !== 0); // 0: the runtime itself
  const owned = handles.map((handle) => layout(module, handle)).filter(({ tableSize }) => tableSize > 0);
  const functions = exportedFunctions(module, handles);
  const slots = [];
  for (let slot = owned[0]?.tableBase ?? wasmTable.length; slot < wasmTable.length; slot++) {
    if (owned.some(({ tableBase, tableSize }) => slot >= tableBase && slot < tableBase + tableSize)) continue;
    const holder = functions.get(wasmTable.get(slot));
    if (holder === undefined) throw new Error(`table slot ${slot} holds a function no library exports`);
    slots.push([slot, ...holder]);
  }
  const got = Object.fromEntries(Object.entries(GOT).map(([symbol, global]) => [symbol, global.value]));
  const paths = handles.map((handle) => LDSO.loadedLibsByHandle[handle].name);
  return { handles, paths, sitePackages, slots, tableLength: wasmTable.length, got };
}

// The cpu SIMD kernels ship in two builds (server/simd_build.py) and the engine loads the relaxed
// one where relaxed SIMD validates (cpu_simd/loader.py). A snapshot made in such a browser records
// the relaxed build; a browser without relaxed SIMD (WebKit) relinks the plain build in its place.
// Neither build has data or table slots of its own (the build checks their dylink.0 sections are
// equal), so the restored handle fits either.
const RELAXED_KERNELS = "/kernels-relaxed.wasm";
const PLAIN_KERNELS = "/kernels.wasm";
// One function, f32x4.relaxed_madd of its three arguments (loader.py's RELAXED_PROBE).
const RELAXED_PROBE = "0061736d0100000001080160037b7b7b017b030201000a0d010b00200020012002fd85020b";

function runnableLibrary(path) {
  if (!path.endsWith(RELAXED_KERNELS)) return path;
  const probe = new Uint8Array(RELAXED_PROBE.match(/../g).map((pair) => parseInt(pair, 16)));
  return WebAssembly.validate(probe) ? path : path.slice(0, -RELAXED_KERNELS.length) + PLAIN_KERNELS;
}

// The libraries `described` lists, compiled (WebAssembly.Module promises, in its order) from
// `files` (path relative to site-packages -> bytes): off the worker's thread, while the runtime
// itself starts.
export function compileLibraries(described, files) {
  return described.paths.map((path) => {
    const bytes = files.get(runnableLibrary(path).slice(described.sitePackages.length + 1));
    return bytes === undefined ? Promise.reject(new Error(`no file ${path} to relink`)) : WebAssembly.compile(bytes);
  });
}

// Reloads the libraries `described` lists (`compiled` by compileLibraries) into a runtime just
// restored from the snapshot it was read with. Throws when the function table does not come out
// as it was: the restored state would call the wrong functions, so the caller starts the runtime
// afresh instead.
export async function relinkLibraries(pyodide, described, compiled) {
  const module = pyodide._module;
  const { HEAP8, HEAP32, GOT, wasmTable, dlopenInternal, LDSO, loadWebAssemblyModule, preloadedWasm } = module;
  const expected = ([, index, name]) => LDSO.loadedLibsByHandle[described.handles[index]].exports[name];
  const pending = [...described.slots];
  // Appends the recorded slots below `length` that relinking has not made again itself (dlsym's;
  // the GOT's come back as each library loads), once their libraries are loaded.
  const fillTo = (length) => {
    while (pending.length > 0 && pending[0][0] < length && pending[0][0] <= wasmTable.length) {
      const record = pending.shift();
      if (record[0] === wasmTable.length) {
        wasmTable.grow(1);
        wasmTable.set(record[0], expected(record));
      }
    }
  };
  for (const [index, handle] of described.handles.entries()) {
    const { memoryBase, memorySize, tableBase, tableSize } = layout(module, handle);
    if (tableSize > 0) {
      fillTo(tableBase);
      if (wasmTable.length !== tableBase) {
        throw new Error(`the function table has ${wasmTable.length} slots where a library starts at ${tableBase}`);
      }
    }
    const live = HEAP8.slice(memoryBase, memoryBase + memorySize);
    // Instantiated here from the compiled module; dlopen then finds it among the preloaded ones
    // and only does its bookkeeping (the handle's flags say global or local, as when first loaded).
    const path = described.paths[index];
    // allowUndefined: emscripten would otherwise walk all ~10,000 GOT entries after each library
    // (reportUndefinedSymbols, ~70 ms for 13 libraries); once, after the last, gives the same
    // GOT, which the check below compares with the recorded one.
    const flags = {
      global: Boolean(HEAP32[(handle + FLAGS) >>> 2] & RTLD_GLOBAL),
      nodelete: true,
      loadAsync: false,
      allowUndefined: true,
    };
    preloadedWasm[path] = loadWebAssemblyModule(await compiled[index], flags, path, {}, handle);
    const loaded = dlopenInternal(handle, { loadAsync: false });
    delete preloadedWasm[path];
    if (!loaded) throw new Error(`relinking ${path} failed`);
    HEAP8.set(live, memoryBase);
  }
  fillTo(described.tableLength);
  module.reportUndefinedSymbols();
  const moved = Object.entries(described.got).filter(([symbol, value]) => GOT[symbol]?.value !== value);
  const wrong = described.slots.filter((record) => wasmTable.get(record[0]) !== expected(record));
  if (wasmTable.length !== described.tableLength || moved.length > 0 || wrong.length > 0) {
    throw new Error(
      `relinked table differs: ${wasmTable.length} slots (was ${described.tableLength}), ` +
        `${wrong.length} slots hold other functions, ${moved.length} symbols moved`,
    );
  }
}
