// The samples of every class: which there are (per class, the ascending seq numbers: a few bytes
// each) and their pixels, which live in IndexedDB (web/js/trainer/storage.js) and are read back
// only when shown or trained on, so the page's memory does not grow with the collection.
//
// Adding a sample costs the same at the 5,000th as at the first: it is appended to its class's
// list and queued, and the queue goes to IndexedDB in one transaction per batch (at most every
// FLUSH_MS, or once BATCH samples wait). Without IndexedDB (a private window, a refused open) or
// once a write fails (the quota), samples stay in this page's memory: what was stored stays
// stored, the newer ones are kept until the tab closes, and `onFallback` says so once.
import { classRange } from "./storage.js";

const BATCH = 64;
const FLUSH_MS = 250;
const RESTORE_CHUNK = 1000;

export class SampleStore {
  // storage: an open Storage or null (memory only); onFallback(reason): called once when samples
  // start to be kept in memory only.
  constructor(storage, onFallback) {
    this.storage = storage;
    this.onFallback = onFallback;
    this.fallback = storage === null ? "no storage" : null;
    this.seqs = new Map(); // class id -> ascending seq numbers of its samples
    this.next = new Map(); // class id -> the seq its next sample takes
    this.memory = new Map(); // "classId/seq" -> rgba: queued for IndexedDB, or kept in memory only
    this.queue = []; // [{classId, seq, rgba}] not yet written
    this.timer = null;
    this.writing = Promise.resolve();
  }

  // Reads which samples each stored class holds: keys only (no pixels), RESTORE_CHUNK at a time
  // in seq order, so no one task on the page reads (and deserializes) thousands of them.
  async restore(classIds) {
    for (const id of classIds) this.addClass(id);
    if (this.storage === null) return;
    for (const id of classIds) {
      const list = this.seqs.get(id);
      for (let low = 0; ; ) {
        const keys = await this.storage.keys("frames", classRange(id, low), RESTORE_CHUNK);
        for (const key of keys) list.push(key[1]);
        if (keys.length < RESTORE_CHUNK) break;
        low = keys[keys.length - 1][1] + 1;
      }
      this.next.set(id, list.length ? list[list.length - 1] + 1 : 0);
    }
  }

  addClass(classId) {
    if (!this.seqs.has(classId)) {
      this.seqs.set(classId, []);
      this.next.set(classId, 0);
    }
  }

  count(classId) {
    return this.seqs.get(classId)?.length ?? 0;
  }

  total() {
    let sum = 0;
    for (const list of this.seqs.values()) sum += list.length;
    return sum;
  }

  // Appends a sample; returns its seq. Constant time: the write goes out with the next batch.
  add(classId, rgba) {
    const seq = this.next.get(classId);
    this.next.set(classId, seq + 1);
    this.seqs.get(classId).push(seq);
    this.memory.set(`${classId}/${seq}`, rgba);
    if (this.fallback === null) {
      this.queue.push({ classId, seq, rgba });
      if (this.queue.length >= BATCH) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), FLUSH_MS);
    }
    return seq;
  }

  // Writes the queued samples in one transaction; resolves once every write so far is done.
  flush() {
    clearTimeout(this.timer);
    this.timer = null;
    const batch = this.queue.splice(0);
    if (batch.length && this.fallback === null) {
      this.writing = this.writing.then(() => this.write(batch));
    }
    return this.writing;
  }

  async write(batch) {
    if (this.fallback !== null) return; // an earlier batch failed: these stay in memory
    try {
      await this.storage.putMany("frames", batch);
      for (const { classId, seq } of batch) this.memory.delete(`${classId}/${seq}`);
    } catch (error) {
      this.useMemory(error.name === "QuotaExceededError" ? "quota" : error.message);
    }
  }

  useMemory(reason) {
    if (this.fallback !== null) return;
    this.fallback = reason;
    this.queue.length = 0;
    this.onFallback(reason);
  }

  // `seqs` of a class (any order) as rgba arrays in that order, read from memory or IndexedDB.
  async read(classId, seqs) {
    const out = new Array(seqs.length);
    const missing = [];
    seqs.forEach((seq, i) => {
      const kept = this.memory.get(`${classId}/${seq}`);
      if (kept) out[i] = kept;
      else missing.push(i);
    });
    if (missing.length && this.storage !== null) {
      const rows = await this.storage.getMany("frames", missing.map((i) => [classId, seqs[i]]));
      missing.forEach((i, j) => {
        out[i] = rows[j]?.rgba ?? null;
      });
    }
    return out;
  }

  // The samples at positions [start, end) of a class's list (oldest first), as {seq, rgba}.
  async slice(classId, start, end) {
    const seqs = this.seqs.get(classId).slice(start, end);
    if (!seqs.length) return [];
    let rows;
    if (this.storage === null || seqs.every((seq) => this.memory.has(`${classId}/${seq}`))) {
      rows = await this.read(classId, seqs);
    } else {
      // One range read; samples still queued (or kept in memory) fill in from memory.
      const stored = await this.storage.getAll("frames", classRange(classId, seqs[0], seqs[seqs.length - 1]));
      const bySeq = new Map(stored.map((row) => [row.seq, row.rgba]));
      rows = seqs.map((seq) => this.memory.get(`${classId}/${seq}`) ?? bySeq.get(seq) ?? null);
    }
    return seqs.map((seq, i) => ({ seq, rgba: rows[i] }));
  }

  async remove(classId, seq) {
    const list = this.seqs.get(classId);
    const at = lowerBound(list, seq);
    if (list[at] !== seq) return;
    list.splice(at, 1);
    this.memory.delete(`${classId}/${seq}`);
    await this.flush(); // a queued write of this sample must not land after the delete
    await this.storage?.delete("frames", [classId, seq]).catch(() => {});
  }

  async removeClass(classId) {
    for (const seq of this.seqs.get(classId) ?? []) this.memory.delete(`${classId}/${seq}`);
    this.seqs.delete(classId);
    this.next.delete(classId);
    await this.flush();
    await this.storage?.delete("frames", classRange(classId)).catch(() => {});
  }

  clear() {
    this.seqs.clear();
    this.next.clear();
    this.memory.clear();
    this.queue.length = 0;
  }
}

// The first index of the ascending `list` whose value is >= `value`.
function lowerBound(list, value) {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (list[middle] < value) low = middle + 1;
    else high = middle;
  }
  return low;
}
