// Installs a package bundle (server/package_bundle.py) into Pyodide's file system.
//
// Pyodide's loadPackage unpacks a wheel in Python, member by member, and loads every shared library
// in it up front (all 19 of numpy's, linalg and fft included, which the engine never imports).
// Writing a bundle's files from JS takes a few milliseconds, and Python's import loads each
// library when a module needs it (synchronous compilation is allowed in a worker).
import { unframe } from "./framed.js";

// Every .py file gets this mtime on every visit: bytecode compiled on an earlier visit
// (bytecode-cache.js) is accepted only when its recorded source mtime matches.
const SOURCE_MTIME_MS = Date.UTC(2000, 0, 1);

// The bundle at `url` as a Uint8Array; the server sends it gzip-encoded, the browser inflates it.
export async function fetchBundle(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${await response.text()}`);
  return new Uint8Array(await response.arrayBuffer());
}

// The bundle's files: a Map from path (relative to site-packages) to bytes.
export function bundleFiles(bytes) {
  const { header, body } = unframe(bytes);
  const files = new Map();
  let offset = 0;
  for (const [name, size] of header.files) {
    files.set(name, body.subarray(offset, offset + size));
    offset += size;
  }
  return files;
}

// Writes the bundle's files under `folder` (site-packages).
export function installBundle(pyodide, bytes, folder) {
  const { FS } = pyodide;
  const made = new Set();
  for (const [name, contents] of bundleFiles(bytes)) {
    const path = `${folder}/${name}`;
    const parent = path.slice(0, path.lastIndexOf("/"));
    if (!made.has(parent)) {
      FS.mkdirTree(parent);
      made.add(parent);
    }
    FS.writeFile(path, contents);
    if (name.endsWith(".py")) FS.utime(path, SOURCE_MTIME_MS, SOURCE_MTIME_MS);
  }
}
