// Compiles a snapshot's record of the cpu SIMD kernels the way a restore does (compileLibraries
// in web/js/shared-libraries.js), in whatever WebAssembly node runs: node 20 validates relaxed
// SIMD only with --experimental-wasm-relaxed-simd, so it stands for a browser with and without it.
// Usage: node [--experimental-wasm-relaxed-simd] relaxed_kernels.mjs <shared-libraries.js>
//   <kernels.wasm or -> <kernels-relaxed.wasm>
// Prints {compiled: true} or {compiled: false, error} for the relaxed build's recorded path.
import { readFile } from "node:fs/promises";
import { pathToFileURL } from "node:url";

const [modulePath, plainPath, relaxedPath] = process.argv.slice(2);
const { compileLibraries } = await import(pathToFileURL(modulePath).href);
const sitePackages = "/lib/python3.12/site-packages";
const folder = "py_in_browser/backends/cpu_simd";
const files = new Map([[`${folder}/kernels-relaxed.wasm`, await readFile(relaxedPath)]]);
if (plainPath !== "-") files.set(`${folder}/kernels.wasm`, await readFile(plainPath));
const described = { sitePackages, paths: [`${sitePackages}/${folder}/kernels-relaxed.wasm`] };
try {
  await Promise.all(compileLibraries(described, files));
  console.log(JSON.stringify({ compiled: true }));
} catch (error) {
  console.log(JSON.stringify({ compiled: false, error: String(error) }));
}
