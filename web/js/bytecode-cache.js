// Python bytecode of numpy's and the engine's modules, kept between visits (startup-cache.js).
//
// Neither package ships .pyc files, so every visit compiled some 160 modules from source (about a
// third of the numpy and engine stages). The first visit lets Python write its __pycache__ as it
// imports, and the worker stores those files after ready; later visits put them back before
// importing. Python accepts a .pyc only when its recorded source mtime and size match: the
// sources get the same fixed mtime on every visit (package-bundle.js).
// The entry records the versions it was built from and is replaced when any differs.
import { readEntry, writeEntry } from "./startup-cache.js";

const CACHE_NAME = "pib-bytecode";
function pycFiles(FS, root) {
  const found = [];
  const walk = (folder) => {
    for (const name of FS.readdir(folder)) {
      if (name === "." || name === "..") continue;
      const path = `${folder}/${name}`;
      if (FS.isDir(FS.stat(path).mode)) walk(path);
      else if (name.endsWith(".pyc")) found.push(path);
    }
  };
  walk(root);
  return found;
}

// Writes the stored .pyc files into place: "loaded", or why not: "absent", "stale" (stored for
// other versions; ignored) or "unavailable" (nowhere to keep it here).
export async function restoreBytecode(pyodide, version) {
  const { state, header, body } = await readEntry(CACHE_NAME, version);
  if (state !== "loaded") return state;
  let offset = 0;
  for (const [path, size] of header.files) {
    pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    pyodide.FS.writeFile(path, body.subarray(offset, offset + size));
    offset += size;
  }
  return "loaded";
}

// Stores the .pyc files Python wrote under `roots` for `version`, replacing any older entry.
export async function saveBytecode(pyodide, roots, version) {
  const paths = roots.flatMap((root) => pycFiles(pyodide.FS, root));
  const contents = paths.map((path) => pyodide.FS.readFile(path));
  const files = paths.map((path, i) => [path, contents[i].length]);
  await writeEntry(CACHE_NAME, { version, files }, contents);
}
