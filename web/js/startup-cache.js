// Entries the engine's workers keep between visits (Python bytecode, the runtime's memory snapshot):
// a header recording the versions an entry was made from, then its bytes (framed.js), one file per
// entry in the origin-private file system. An entry made from other versions is "stale" and
// replaced by the next write.
//
// Files are read and written through synchronous access handles, which only workers have: the
// ~37 MB snapshot reads in tens of milliseconds that way, where the Cache API took ~400 ms.
import { frame, unframe } from "./framed.js";

const DIRECTORY = "pib-startup";

// Whether this context can keep entries (a worker in a secure context).
export function canKeepEntries() {
  return (
    typeof navigator !== "undefined" &&
    navigator.storage?.getDirectory !== undefined &&
    typeof FileSystemFileHandle !== "undefined" &&
    "createSyncAccessHandle" in FileSystemFileHandle.prototype
  );
}

async function folder() {
  return (await navigator.storage.getDirectory()).getDirectoryHandle(DIRECTORY, { create: true });
}

// The entry whatever versions it was made from, so reading can start before they are known:
// {state: "found", header, body}, or {state} "absent" (none, unreadable, or another tab's worker
// holds it) or "unavailable" (no origin-private file system here: not a secure context).
export async function openEntry(name) {
  if (!canKeepEntries()) return { state: "unavailable" };
  let access;
  try {
    access = await (await (await folder()).getFileHandle(name)).createSyncAccessHandle();
  } catch {
    return { state: "absent" };
  }
  try {
    // A buffer of its own, so the body keeps framed.js's 8-byte alignment.
    const bytes = new Uint8Array(access.getSize());
    if (access.read(bytes, { at: 0 }) !== bytes.length) return { state: "absent" };
    return { state: "found", ...unframe(bytes) };
  } catch {
    return { state: "absent" }; // cut short by a crash while it was written
  } finally {
    access.close();
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
  if (!canKeepEntries()) return;
  const bytes = new Uint8Array(await frame(header, parts).arrayBuffer());
  const access = await (await (await folder()).getFileHandle(name, { create: true })).createSyncAccessHandle();
  try {
    access.truncate(0);
    access.write(bytes, { at: 0 });
    access.flush();
  } finally {
    access.close();
  }
}
