// Entries the engine worker keeps between visits in the Cache API (Python bytecode, the runtime's
// memory snapshot): a header recording the versions an entry was made from, then its bytes
// (framed.js). An entry made from other versions is "stale" and replaced by the next write.
import { frame, unframe } from "./framed.js";

const ENTRY = "/current"; // one entry per cache: a newer build replaces the old one

// The entry whatever versions it was made from, so reading can start before they are known:
// {state: "found", header, body}, or {state} "absent" or "unavailable" (no Cache API here: not a
// secure context).
export async function openEntry(cacheName) {
  if (typeof caches === "undefined") return { state: "unavailable" };
  const response = await (await caches.open(cacheName)).match(ENTRY);
  if (response === undefined) return { state: "absent" };
  return { state: "found", ...unframe(new Uint8Array(await response.arrayBuffer())) };
}

// An opened entry checked against `version`: {state: "loaded", header, body}, or {state} "stale"
// (made from other versions), "absent" or "unavailable".
export function checkEntry(entry, version) {
  if (entry.state !== "found") return entry;
  return entry.header.version === version ? { ...entry, state: "loaded" } : { state: "stale" };
}

// The entry, checked against `version` (checkEntry's states).
export async function readEntry(cacheName, version) {
  return checkEntry(await openEntry(cacheName), version);
}

// Stores `parts` (typed arrays) under `header` ({version, ...}), replacing any older entry.
export async function writeEntry(cacheName, header, parts) {
  if (typeof caches === "undefined") return;
  await (await caches.open(cacheName)).put(ENTRY, new Response(frame(header, parts)));
}

// Removes the entry, whatever versions it was made from.
export async function dropEntry(cacheName) {
  if (typeof caches !== "undefined") await (await caches.open(cacheName)).delete(ENTRY);
}
