// What backend selection learned (py_in_browser/backends/verdicts.py: self-tests passed, measured
// choices), kept between visits. It holds only for the browser, the GPU and driver, and the engine
// build it was learned on, so it is stored with a fingerprint of exactly those: the user agent
// (browser and its version), the GPU probe (renderer, adapter, features and limits) and the
// build's digest. Any change starts selection afresh.
//
// Kept in IndexedDB, not beside the snapshot in the origin-private file system
// (startup-cache.js): opening a second entry there right after the snapshot's sometimes never
// answered in Chromium 156 (about one second visit in 20), which left the engine unready.

const DATABASE = "pib-backend-verdicts";
const STORE = "verdicts";
const KEY = "kept";

function settled(request) {
  return new Promise((resolve, reject) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function inStore(mode, work) {
  const opening = indexedDB.open(DATABASE, 1);
  opening.onupgradeneeded = () => opening.result.createObjectStore(STORE);
  const database = await settled(opening);
  try {
    return await settled(work(database.transaction(STORE, mode).objectStore(STORE)));
  } finally {
    database.close();
  }
}

// The stored record ({version, verdicts}), null when none, or undefined where IndexedDB cannot be
// used; read while the runtime starts (checked once the fingerprint is known).
export async function openVerdicts() {
  try {
    return (await inStore("readonly", (store) => store.get(KEY))) ?? null;
  } catch {
    return undefined;
  }
}

export function verdictsVersion(build, environment) {
  return JSON.stringify({ build, userAgent: navigator.userAgent, environment });
}

// What to hand Python (_worker.boot): the kept verdicts for `version`, "" when none hold for it,
// or null where nothing can be kept (Python then neither uses nor records verdicts).
export async function keptVerdicts(opened, version) {
  const record = await opened;
  if (record === undefined) return null;
  return record?.version === version ? record.verdicts : "";
}

export function storeVerdicts(version, verdicts) {
  return inStore("readwrite", (store) => store.put({ version, verdicts }, KEY));
}
