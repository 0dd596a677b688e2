// The embed-on-add queue of transfer mode: each sample is embedded once by the pretrained
// backbone in the engine's worker (web/py/gesture_transfer.py embed: the sample and its seeded
// augmented views), when it is added, and the embeddings are kept with it in IndexedDB under the
// backbone's sha256 (storage.js "embeddings"), so a changed backbone embeds again. Training the
// head then reads the cached embeddings only.
//
// Jobs run one at a time behind the page: adding a sample only queues its bitmap (the best pixels
// there were: the frame's or image's centre square at the backbone's input size), so recording
// at 30 frames a second never waits for the backbone. A sample without an embedding at training
// time (restored from an earlier session, added in from-scratch mode, or whose job failed) is
// embedded then from its stored pixels.
import { embeddingRange } from "./storage.js";

// A 32-bit seed per sample, from its stored pixels (FNV-1a of the SAMPLE_SIZE² RGBA bytes): its
// augmented views are the same whenever, wherever and in whichever class it is embedded.
export function seedOf(rgba) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < rgba.length; i += 1) {
    hash ^= rgba[i];
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

const keyOf = (classId, seq) => `${classId}/${seq}`;

export class EmbeddingQueue {
  // engine: a TrainerEngine; storage: an open Storage or null (memory only); onProgress(queue):
  // called as jobs are added and done.
  constructor(engine, storage, onProgress) {
    this.engine = engine;
    this.storage = storage;
    this.onProgress = onProgress;
    this.backbone = null; // {name, version, sha256, output, input_shape, copies} once asked
    this.done = new Set(); // "classId/seq" embedded under this backbone
    this.memory = new Map(); // "classId/seq" -> Float32Array, where nothing is stored
    this.jobs = []; // [{classId, seq, bitmap: Promise<ImageBitmap>, mirror}]
    this.queued = new Set(); // "classId/seq" of the jobs
    this.added = 0; // jobs since the queue was last empty (the progress bar's total)
    this.failures = [];
    this.ms = []; // the worker's time for each embedded sample (with its views), in order
    this.running = null;
    this.idleWaiters = [];
  }

  // Which samples already have embeddings of this backbone (keys only).
  async restore() {
    this.backbone = await this.engine.backboneInfo();
    if (this.storage === null) return;
    for (const [, classId, seq] of await this.storage.keys("embeddings", embeddingRange(this.backbone.sha256))) {
      this.done.add(keyOf(classId, seq));
    }
  }

  get pending() {
    return this.jobs.length + (this.running ? 1 : 0);
  }

  // Seconds the queued jobs will take at the pace of the last few, or null before the first.
  get secondsLeft() {
    const recent = this.ms.slice(-8);
    if (!recent.length) return null;
    return (this.pending * recent.reduce((sum, ms) => sum + ms, 0)) / recent.length / 1000;
  }

  has(classId, seq) {
    return this.done.has(keyOf(classId, seq));
  }

  // Queues sample (classId, seq) for embedding from `bitmap` (a Promise of an ImageBitmap;
  // `mirror`: flip it first, as a camera frame is shown), its views drawn from `seed` (seedOf).
  add(classId, seq, bitmap, mirror, seed) {
    const key = keyOf(classId, seq);
    if (this.done.has(key) || this.queued.has(key)) {
      bitmap.then((b) => b.close(), () => {});
      return;
    }
    this.queued.add(key);
    this.jobs.push({ classId, seq, bitmap, mirror, seed });
    this.added += 1;
    this.onProgress(this);
    this.running ??= this.run();
  }

  async run() {
    // Yields first: a burst of adds (an upload, a recording) queues before the worker is asked.
    await new Promise((resolve) => setTimeout(resolve));
    while (this.jobs.length) {
      const job = this.jobs.shift();
      const key = keyOf(job.classId, job.seq);
      try {
        const bitmap = await job.bitmap;
        if (!this.queued.has(key)) {
          bitmap.close(); // removed while it waited
          continue;
        }
        const { embedding, rows, ms } = await this.engine.embed(bitmap, job.mirror, job.seed);
        this.ms.push(ms);
        if (this.queued.has(key)) await this.keep(job.classId, job.seq, embedding, rows);
      } catch (error) {
        this.failures.push(`${key}: ${error.message ?? error}`);
        console.warn(`sample ${key} not embedded: ${error.message ?? error}`);
      } finally {
        this.queued.delete(key);
      }
      this.onProgress(this);
    }
    this.running = null;
    this.added = 0;
    this.onProgress(this);
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }

  async keep(classId, seq, embedding, rows) {
    const key = keyOf(classId, seq);
    if (this.storage !== null) {
      try {
        await this.storage.put("embeddings", { backbone: this.backbone.sha256, classId, seq, rows, embedding });
      } catch {
        this.memory.set(key, embedding); // storage full: kept for this tab
      }
    } else {
      this.memory.set(key, embedding);
    }
    this.done.add(key);
  }

  // Resolves once no job is queued or running.
  idle() {
    if (!this.running && !this.jobs.length) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  // The embeddings of `refs` ([classId, seq] each, in order) as one Float32Array (refs.length x
  // rows x features), read from IndexedDB (or memory).
  async read(refs) {
    const parts = new Array(refs.length);
    const missing = [];
    refs.forEach(([classId, seq], i) => {
      const kept = this.memory.get(keyOf(classId, seq));
      if (kept) parts[i] = kept;
      else missing.push(i);
    });
    if (missing.length) {
      const sha = this.backbone.sha256;
      const rows = await this.storage.getMany("embeddings", missing.map((i) => [sha, ...refs[i]]));
      missing.forEach((i, j) => {
        if (!rows[j]) throw new Error(`sample ${keyOf(...refs[i])} has no embedding`);
        parts[i] = rows[j].embedding;
      });
    }
    const out = new Float32Array(parts.reduce((sum, part) => sum + part.length, 0));
    let offset = 0;
    for (const part of parts) {
      out.set(part, offset);
      offset += part.length;
    }
    return out;
  }

  async remove(classId, seq) {
    const key = keyOf(classId, seq);
    this.queued.delete(key);
    this.done.delete(key);
    this.memory.delete(key);
    await this.storage?.delete("embeddings", [this.backbone?.sha256 ?? "", classId, seq]).catch(() => {});
  }

  async removeClass(classId) {
    for (const key of [...this.done, ...this.queued, ...this.memory.keys()]) {
      if (key.startsWith(`${classId}/`)) {
        this.done.delete(key);
        this.queued.delete(key);
        this.memory.delete(key);
      }
    }
    if (this.backbone) await this.storage?.delete("embeddings", embeddingRange(this.backbone.sha256, classId)).catch(() => {});
  }

  clear() {
    this.done.clear();
    this.queued.clear();
    this.memory.clear();
  }
}
