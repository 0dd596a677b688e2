// The trainer's local memory in IndexedDB: classes, samples (RGBA bytes), the samples' embeddings
// by a pretrained backbone (web/js/trainer/embeddings.js) and the last saved model.
// Nothing here ever leaves the browser.
//
// A sample is keyed [classId, seq] (seq: its number within the class, ascending as it was added),
// so a class's samples are one key range: a page of thumbnails is one getAll, a class is deleted
// with one delete, and a reload reads only the keys (getAllKeys), not the pixels.

const DB_NAME = "pib-gesture-trainer";
// Version 3 adds "embeddings", keyed [backbone sha256, classId, seq]; version 2 keys samples by
// [classId, seq] in "frames"; version 1 kept them by id in "samples".
const VERSION = 3;
const STORES = ["classes", "frames", "models", "embeddings"];

function request(operation) {
  return new Promise((resolve, reject) => {
    operation.onsuccess = () => resolve(operation.result);
    operation.onerror = () => reject(operation.error);
  });
}

// The key range of one class's samples (seq from `low` to `high`, both included).
export function classRange(classId, low = 0, high = Number.MAX_SAFE_INTEGER) {
  return IDBKeyRange.bound([classId, low], [classId, high]);
}

// The key range of one backbone's embeddings: of one class (seq from `low` to `high`), or all.
export function embeddingRange(backbone, classId = null, low = 0, high = Number.MAX_SAFE_INTEGER) {
  return classId === null
    ? IDBKeyRange.bound([backbone], [backbone, []]) // [] sorts after every string class id
    : IDBKeyRange.bound([backbone, classId, low], [backbone, classId, high]);
}

// Version 1's samples ({id, classId, rgba}, in no particular order) move to "frames", numbered
// per class in the order they are read.
function migrateSamples(db, tx) {
  const next = new Map();
  const frames = tx.objectStore("frames");
  tx.objectStore("samples").openCursor().onsuccess = (event) => {
    const cursor = event.target.result;
    if (!cursor) {
      db.deleteObjectStore("samples");
      return;
    }
    const { classId, rgba } = cursor.value;
    const seq = next.get(classId) ?? 0;
    next.set(classId, seq + 1);
    frames.put({ classId, seq, rgba });
    cursor.continue();
  };
}

export class Storage {
  constructor() {
    this.db = null;
  }

  // Rejects where the browser offers no IndexedDB (some private windows) or refuses to open it.
  async open() {
    if (typeof indexedDB === "undefined" || indexedDB === null) {
      throw new Error("this browser offers no IndexedDB here (a private window?)");
    }
    const opening = indexedDB.open(DB_NAME, VERSION);
    opening.onupgradeneeded = (event) => {
      const db = opening.result;
      if (event.oldVersion < 1) {
        db.createObjectStore("classes", { keyPath: "id" });
        db.createObjectStore("models", { keyPath: "id" });
      }
      if (event.oldVersion < 2) db.createObjectStore("frames", { keyPath: ["classId", "seq"] });
      if (event.oldVersion === 1) migrateSamples(db, opening.transaction);
      if (event.oldVersion < 3) db.createObjectStore("embeddings", { keyPath: ["backbone", "classId", "seq"] });
    };
    this.db = await request(opening);
    return this;
  }

  async transaction(store, mode, work) {
    const tx = this.db.transaction(store, mode);
    const done = new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    });
    let result;
    try {
      result = await work(tx.objectStore(store));
    } catch (error) {
      tx.abort(); // a request that threw (e.g. over the quota): none of this transaction lands
      done.catch(() => {});
      throw error;
    }
    await done;
    return result;
  }

  all(store) {
    return this.transaction(store, "readonly", (s) => request(s.getAll()));
  }

  // The keys under `query` (a key range; all when omitted), in order, at most `count`.
  keys(store, query, count) {
    return this.transaction(store, "readonly", (s) => request(s.getAllKeys(query, count)));
  }

  get(store, id) {
    return this.transaction(store, "readonly", (s) => request(s.get(id)));
  }

  // The values under `query` (a key range or one key), in key order.
  getAll(store, query) {
    return this.transaction(store, "readonly", (s) => request(s.getAll(query)));
  }

  // The values of `keys`, in their order (undefined where a key holds nothing), in one transaction.
  getMany(store, keys) {
    return this.transaction(store, "readonly", (s) => Promise.all(keys.map((key) => request(s.get(key)))));
  }

  put(store, value) {
    return this.transaction(store, "readwrite", (s) => request(s.put(value)));
  }

  // Writes `values` in one transaction: all of them are stored, or (quota, an abort) none.
  putMany(store, values) {
    return this.transaction(store, "readwrite", (s) => {
      for (const value of values) s.put(value);
    });
  }

  // `query`: one key or a key range.
  delete(store, query) {
    return this.transaction(store, "readwrite", (s) => request(s.delete(query)));
  }

  async clear() {
    for (const store of STORES) await this.transaction(store, "readwrite", (s) => request(s.clear()));
  }
}
