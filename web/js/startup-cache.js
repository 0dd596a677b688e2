// Entries the engine's workers keep between visits (Python bytecode, the runtime's memory snapshot):
// a header recording the versions an entry was made from, then its bytes (framed.js). An entry made
// from other versions is "stale" and replaced by the next write.
//
// Entries are files in the origin-private file system, read and written through synchronous access
// handles, which only workers have: the ~37 MB snapshot reads in tens of milliseconds that way,
// where the Cache API took ~400 ms. Where that file system is missing or refuses to open (WebKitGTK
// ships it switched off, and its automation sessions reject getDirectory() with UnknownError even
// when it is on) the entries are kept in IndexedDB instead, which every engine has.
import { frame, unframe } from "./framed.js";

const DIRECTORY = "pib-startup";

// Where entries live here (store()): the file system, IndexedDB, or null (neither).
let chosen = null;

function hasSyncAccessHandles() {
  return (
    typeof navigator !== "undefined" &&
    navigator.storage?.getDirectory !== undefined &&
    typeof FileSystemFileHandle !== "undefined" &&
    "createSyncAccessHandle" in FileSystemFileHandle.prototype
  );
}

const opfs = {
  folder: () => navigator.storage.getDirectory().then((root) => root.getDirectoryHandle(DIRECTORY, { create: true })),
  // The entry's bytes, or null (none, or another tab's worker holds it).
  async read(name) {
    let access;
    try {
      access = await (await (await opfs.folder()).getFileHandle(name)).createSyncAccessHandle();
    } catch {
      return null;
    }
    try {
      // A buffer of its own, so the body keeps framed.js's 8-byte alignment.
      const bytes = new Uint8Array(access.getSize());
      return access.read(bytes, { at: 0 }) === bytes.length ? bytes : null;
    } finally {
      access.close();
    }
  },
  async write(name, blob) {
    const bytes = new Uint8Array(await blob.arrayBuffer());
    const access = await (await (await opfs.folder()).getFileHandle(name, { create: true })).createSyncAccessHandle();
    try {
      access.truncate(0);
      access.write(bytes, { at: 0 });
      access.flush();
    } finally {
      access.close();
    }
  },
};

// Entries as ArrayBuffers in IndexedDB. Not the Cache API: in WebKitGTK's automation sessions a
// response put there is gone after the next navigation (and stops answering in that page), and not
// Blobs: its ephemeral sessions fail to store those.
const DATABASE = "pib-startup";
const ENTRIES = "entries";

function settled(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

function openDatabase() {
  const request = indexedDB.open(DATABASE, 1);
  request.onupgradeneeded = () => request.result.createObjectStore(ENTRIES);
  return settled(request);
}

const indexedStore = {
  database: null, // opened once, when the store is chosen
  async read(name) {
    const buffer = await settled(indexedStore.database.transaction(ENTRIES).objectStore(ENTRIES).get(name));
    return buffer instanceof ArrayBuffer ? new Uint8Array(buffer) : null;
  },
  async write(name, blob) {
    const buffer = await blob.arrayBuffer();
    const transaction = indexedStore.database.transaction(ENTRIES, "readwrite");
    transaction.objectStore(ENTRIES).put(buffer, name);
    await new Promise((resolve, reject) => {
      transaction.oncomplete = resolve;
      transaction.onerror = () => reject(transaction.error);
      transaction.onabort = () => reject(transaction.error ?? new Error("the write was aborted"));
    });
  },
};

// The store entries use here, found once per worker: the file system when it opens, else
// IndexedDB, else null.
function store() {
  chosen ??= (async () => {
    if (hasSyncAccessHandles()) {
      try {
        await opfs.folder();
        return opfs;
      } catch {
        // refused (WebKitGTK's automation sessions): IndexedDB below
      }
    }
    if (typeof indexedDB !== "undefined") {
      try {
        indexedStore.database = await openDatabase();
        return indexedStore;
      } catch {
        return null; // a private window that refuses storage, say
      }
    }
    return null;
  })();
  return chosen;
}

// Whether this context can keep entries.
export async function canKeepEntries() {
  return (await store()) !== null;
}

// The entry whatever versions it was made from, so reading can start before they are known:
// {state: "found", header, body}, or {state} "absent" (none, unreadable, or another tab's worker
// holds it) or "unavailable" (nowhere to keep entries here).
export async function openEntry(name) {
  const where = await store();
  if (where === null) return { state: "unavailable" };
  try {
    const bytes = await where.read(name);
    return bytes === null ? { state: "absent" } : { state: "found", ...unframe(bytes) };
  } catch {
    return { state: "absent" }; // cut short by a crash while it was written
  }
}

// An opened entry checked against `version`: {state: "loaded", header, body}, or {state} "stale"
// (made from other versions), "absent" or "unavailable".
export function checkEntry(entry, version) {
  if (entry.state !== "found") return entry;
  return entry.header.version === version ? { ...entry, state: "loaded" } : { state: "stale" };
}

// The entry, checked against `version` (checkEntry's states).
export async function readEntry(name, version) {
  return checkEntry(await openEntry(name), version);
}

// Stores `parts` (typed arrays) under `header` ({version, ...}), replacing any older entry.
export async function writeEntry(name, header, parts) {
  const where = await store();
  if (where !== null) await where.write(name, frame(header, parts));
}
