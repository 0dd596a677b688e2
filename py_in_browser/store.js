// IndexedDB of the engine's worker: checkpoints that outlive a page reload (persist.py).
const DB = "py_in_browser";
const STORE = "checkpoints";

function open() {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(STORE);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function transact(mode, work) {
  const db = await open();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const request = work(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

// `data`: a Python bytes object (a borrowed proxy: copied before this call returns).
export function put(key, data) {
  const buffer = data.getBuffer("u8");
  const copy = buffer.data.slice();
  buffer.release();
  return transact("readwrite", (store) => store.put(copy, key));
}

// The stored Uint8Array, or undefined.
export function get(key) {
  return transact("readonly", (store) => store.get(key));
}

export function remove(key) {
  return transact("readwrite", (store) => store.delete(key));
}
