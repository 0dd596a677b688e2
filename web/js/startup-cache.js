// Entries the engine worker keeps between visits in the Cache API (Python bytecode, the runtime's
// memory snapshot): a header recording the versions an entry was made from, then its bytes
// (framed.js). An entry made from other versions is "stale" and replaced by the next write.
import { frame, unframe } from "./framed.js";

const ENTRY = "/current"; // one entry per cache: a newer build replaces the old one

// {state: "loaded", header, body} with the entry's bytes, or {state} "absent", "stale" or
// "unavailable" (no Cache API here: not a secure context).
export async function readEntry(cacheName, version) {
  if (typeof caches === "undefined") return { state: "unavailable" };
  const response = await (await caches.open(cacheName)).match(ENTRY);
  if (response === undefined) return { state: "absent" };
  const { header, body } = unframe(new Uint8Array(await response.arrayBuffer()));
  if (header.version !== version) return { state: "stale" };
  return { state: "loaded", header, body };
}

// Stores `parts` (typed arrays) under `header` ({version, ...}), replacing any older entry.
export async function writeEntry(cacheName, header, parts) {
  if (typeof caches === "undefined") return;
  await (await caches.open(cacheName)).put(ENTRY, new Response(frame(header, parts)));
}
