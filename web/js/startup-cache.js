// Entries the engine worker keeps between visits in the Cache API (Python bytecode, the runtime's
// memory snapshot): a header recording the versions an entry was made from, then its bytes. An
// entry made from other versions is "stale" and replaced by the next write.

const ENTRY = "/current"; // one entry per cache: a newer build replaces the old one

// {state: "loaded", header, body} with the entry's bytes, or {state} "absent", "stale" or
// "unavailable" (no Cache API here: not a secure context).
export async function readEntry(cacheName, version) {
  if (typeof caches === "undefined") return { state: "unavailable" };
  const response = await (await caches.open(cacheName)).match(ENTRY);
  if (response === undefined) return { state: "absent" };
  const bytes = new Uint8Array(await response.arrayBuffer());
  const headerLength = new DataView(bytes.buffer).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + headerLength)));
  if (header.version !== version) return { state: "stale" };
  return { state: "loaded", header, body: bytes.subarray(4 + headerLength) };
}

// Stores `parts` (typed arrays) under `header` ({version, ...}), replacing any older entry.
export async function writeEntry(cacheName, header, parts) {
  if (typeof caches === "undefined") return;
  const encoded = new TextEncoder().encode(JSON.stringify(header));
  const length = new Uint8Array(4);
  new DataView(length.buffer).setUint32(0, encoded.length, true);
  const body = new Blob([length, encoded, ...parts], { type: "application/octet-stream" });
  await (await caches.open(cacheName)).put(ENTRY, new Response(body));
}
