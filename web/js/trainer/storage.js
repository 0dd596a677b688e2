// The trainer's local memory in IndexedDB: classes, samples (RGBA bytes) and the last saved model.
// Nothing here ever leaves the browser.

const DB_NAME = "pib-gesture-trainer";
const VERSION = 1;
const STORES = ["classes", "samples", "models"];

function request(operation) {
  return new Promise((resolve, reject) => {
    operation.onsuccess = () => resolve(operation.result);
    operation.onerror = () => reject(operation.error);
  });
}

export class Storage {
  constructor() {
    this.db = null;
  }

  async open() {
    const opening = indexedDB.open(DB_NAME, VERSION);
    opening.onupgradeneeded = () => {
      for (const name of STORES) opening.result.createObjectStore(name, { keyPath: "id" });
    };
    this.db = await request(opening);
    return this;
  }

  async transaction(store, mode, work) {
    const tx = this.db.transaction(store, mode);
    const result = await work(tx.objectStore(store));
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    });
    return result;
  }

  all(store) {
    return this.transaction(store, "readonly", (s) => request(s.getAll()));
  }

  get(store, id) {
    return this.transaction(store, "readonly", (s) => request(s.get(id)));
  }

  put(store, value) {
    return this.transaction(store, "readwrite", (s) => request(s.put(value)));
  }

  delete(store, id) {
    return this.transaction(store, "readwrite", (s) => request(s.delete(id)));
  }

  async clear() {
    for (const store of STORES) await this.transaction(store, "readwrite", (s) => request(s.clear()));
  }
}
