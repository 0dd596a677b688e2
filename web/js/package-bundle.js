// Installs a package bundle (server/package_bundle.py) into Pyodide's file system.
//
// Pyodide's loadPackage unpacks a wheel in Python, member by member, and loads every shared library
// in it up front (all 19 of numpy's, linalg and fft included, which the engine never imports).
// Writing a bundle's files from JS takes a few milliseconds, and Python's import loads each
// library when a module needs it (synchronous compilation is allowed in a worker).
import { unframe } from "./framed.js";
import { noteResponse } from "./http-cache.js";

// Every .py file gets this mtime on every visit: bytecode compiled on an earlier visit
// (bytecode-cache.js) is accepted only when its recorded source mtime matches.
const SOURCE_MTIME_MS = Date.UTC(2000, 0, 1);
// A regular file, readable and writable by all (what FS.writeFile makes).
const FILE_MODE = 0o100666;

// The bundle at `url` as a Uint8Array; the server sends it gzip-encoded, the browser inflates it.
export async function fetchBundle(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${await response.text()}`);
  noteResponse(response);
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

// Writes the bundle's files under `folder` (site-packages). Every visit does this for ~480 files,
// so each file is made as a node of Pyodide's in-memory file system (emscripten 3.1.58's MEMFS,
// pinned with Pyodide) that owns its slice of the bundle: FS.writeFile would look its path up,
// copy the bytes, and FS.utime look it up again, which took ~150 ms a visit under load. A file
// that exists already is overwritten the ordinary way.
export function installBundle(pyodide, bytes, folder) {
  const { FS } = pyodide;
  const folders = new Map();
  const folderNode = (path) => {
    if (!folders.has(path)) {
      FS.mkdirTree(path);
      folders.set(path, FS.lookupPath(path).node);
    }
    return folders.get(path);
  };
  for (const [name, contents] of bundleFiles(bytes)) {
    const slash = name.lastIndexOf("/");
    const parent = folderNode(`${folder}/${name.slice(0, slash)}`);
    const base = name.slice(slash + 1);
    const source = name.endsWith(".py");
    if (base in parent.contents) {
      FS.writeFile(`${folder}/${name}`, contents);
      if (source) FS.utime(`${folder}/${name}`, SOURCE_MTIME_MS, SOURCE_MTIME_MS);
      continue;
    }
    const node = parent.node_ops.mknod(parent, base, FILE_MODE, 0);
    node.contents = contents;
    node.usedBytes = contents.length;
    if (source) node.timestamp = SOURCE_MTIME_MS;
  }
}
