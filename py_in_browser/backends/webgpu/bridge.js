// WebGPU bridge of py_in_browser (self-contained: imported from a blob: URL, no relative imports).
// Python sends command lists (Int32Array words + a byte blob, see commands.py); each flush becomes
// one command encoder, one compute pass and one submit. Recorded steps are replayed from here.
// The command stream's layout and the limits to request come from Python at start-up.

const STORAGE = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
const QUERY_CHUNK = 1024; // timed passes per query set while profiling
const BIND_GROUP_CACHE_SIZE = 2048; // eager steps reuse pooled buffers, so combinations repeat
// While a read waits for its buffer to map, an empty submit this often (see mapForRead).
const MAP_POLL_MS = 1;

// `protocolJson`: backend.bridge_protocol(), {opcodes, arguments, label_shift, limits}.
export async function createEngine(onLost, protocolJson) {
  if (!globalThis.navigator?.gpu) throw new Error("WebGPU is not available here (navigator.gpu is missing)");
  const protocol = JSON.parse(protocolJson);
  const adapter = await navigator.gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) throw new Error("navigator.gpu.requestAdapter() found no GPU adapter");
  const requiredLimits = Object.fromEntries(protocol.limits.map((name) => [name, adapter.limits[name]]));
  const requiredFeatures = adapter.features.has("timestamp-query") ? ["timestamp-query"] : [];
  const device = await adapter.requestDevice({ requiredLimits, requiredFeatures });
  return new Engine(adapter, device, onLost, protocol);
}

class Engine {
  constructor(adapter, device, onLost, protocol) {
    this.limitNames = protocol.limits;
    this.op = protocol.opcodes;
    // Per opcode: {argument name: its word's offset from the opcode, ..., next: the words used}.
    this.at = {};
    for (const [name, args] of Object.entries(protocol.arguments)) {
      this.at[protocol.opcodes[name]] = { ...Object.fromEntries(args.map((arg, k) => [arg, k + 1])), next: args.length + 1 };
    }
    this.labelShift = protocol.label_shift;
    this.pipelineMask = (1 << protocol.label_shift) - 1;
    this.adapterInfo = adapter.info ?? {};
    this.device = device;
    this.queue = device.queue;
    this.timestamps = device.features.has("timestamp-query");
    this.buffers = new Map(); // id -> GPUBuffer
    this.params = new Map(); // id -> uniform GPUBuffer
    this.pipelines = new Map(); // id -> {label, module, pipeline, promise, error}
    this.warmQueue = []; // warm-up entries not compiled yet, in order
    this.warming = false;
    this.earlyParts = 0; // submits of a command list's start while kernels of its rest compiled
    this.waits = 0; // flushWhenCompiled, read and fence calls in flight: the warm-up waits for them
    this.labels = []; // label id -> op name: a DISPATCH's pipeline word is pipeline | label << shift
    this.bindGroups = new Map(); // key -> GPUBindGroup, oldest first
    this.groupsOfBuffer = new Map(); // buffer id -> Set of bind-group keys binding it
    this.recordings = new Map(); // id -> {words, dispatches: [{pipeline, bindGroup, x, y, z, label}]}
    this.staging = new Map(); // byte size -> [MAP_READ buffers]
    this.submitted = 0;
    this.completed = 0;
    this.errors = [];
    this.profileRows = []; // [label, ms]
    this.profileReads = [];
    this.lost = null;
    this.replayFault = null; // set by destroyDeviceInReplay
    this.releaseAdapters = null; // set by withholdAdapters
    this.lostSignal = device.lost.then((info) => {
      this.lost = `the WebGPU device was lost (${info.reason}): ${info.message || "no message"}`;
      onLost(this.lost);
      throw new Error(this.lost);
    });
    this.lostSignal.catch(() => {}); // observed through race()
    device.addEventListener("uncapturederror", (event) => this.errors.push(event.error.message));
  }

  info() {
    const limits = Object.fromEntries(this.limitNames.map((name) => [name, this.device.limits[name]]));
    const { vendor, architecture, description } = this.adapterInfo;
    // A fallback (software) adapter runs workgroups on this many CPU threads at most.
    const software = { fallback: Boolean(this.adapterInfo.isFallbackAdapter), threads: navigator.hardwareConcurrency || 1 };
    return JSON.stringify({ limits, timestamps: this.timestamps, adapter: { vendor, architecture, description }, software });
  }

  stats() {
    let staging = 0;
    for (const list of this.staging.values()) staging += list.length;
    return JSON.stringify({
      js_buffers: this.buffers.size,
      js_param_buffers: this.params.size,
      js_bind_groups: this.bindGroups.size,
      js_buffers_with_groups: this.groupsOfBuffer.size,
      js_pipelines: this.pipelines.size,
      js_recordings: this.recordings.size,
      js_staging_buffers: staging,
      submitted: this.submitted,
      completed: this.completed,
      early_parts: this.earlyParts,
    });
  }

  // A promise that rejects with a clear message instead of hanging when the device goes away.
  race(promise) {
    return Promise.race([promise, this.lostSignal]);
  }

  checkUsable() {
    if (this.lost) throw new Error(this.lost);
    if (this.errors.length) throw new Error(`WebGPU validation error: ${this.errors.splice(0).join("; ")}`);
  }

  // A kernel to compile with createComputePipelineAsync: now, or (background: the warm-up) one
  // at a time while nothing asks for it, so that kernels a step needs never queue behind it.
  definePipeline(id, label, wgsl, background) {
    const entry = { label, wgsl, module: null, pipeline: null, promise: null, error: null };
    this.pipelines.set(id, entry);
    if (background) {
      this.warmQueue.push(entry);
      this.pumpWarmUp();
    } else {
      this.compile(entry);
    }
  }

  // A warm-up kernel a step now uses: compile it now if the warm-up has not reached it yet.
  usePipeline(id) {
    this.compile(this.pipelines.get(id));
  }

  compile(entry) {
    if (entry.promise) return entry.promise;
    entry.module = this.device.createShaderModule({ code: entry.wgsl, label: entry.label });
    entry.promise = this.device
      .createComputePipelineAsync({ label: entry.label, layout: "auto", compute: { module: entry.module, entryPoint: "main" } })
      .then(
        (pipeline) => (entry.pipeline = pipeline),
        (error) => (entry.error = `kernel ${entry.label} failed to compile: ${error.message}`),
      );
    return entry.promise;
  }

  // One warm-up compile at a time, and none while Python waits for the GPU: the GPU process
  // then runs (or compiles) what that wait is for, and on a software adapter every compile
  // takes CPU from it.
  pumpWarmUp() {
    if (this.warming || this.waits) return;
    const entry = this.warmQueue.find((e) => !e.promise);
    this.warmQueue = this.warmQueue.filter((e) => !e.promise && e !== entry);
    if (!entry) return;
    this.warming = true;
    this.compile(entry).finally(() => {
      this.warming = false;
      this.pumpWarmUp();
    });
  }

  defineLabel(id, name) {
    this.labels[id] = name;
  }

  // race(promise), with the warm-up paused until it settles (see pumpWarmUp).
  async waitFor(promise) {
    this.waits++;
    try {
      return await this.race(promise);
    } finally {
      this.waits--;
      this.pumpWarmUp();
    }
  }

  pipeline(id) {
    const entry = this.pipelines.get(id);
    if (entry.error) throw new Error(entry.error);
    // Only reached when a long command list flushes before its kernels compiled: compile now.
    entry.module ??= this.device.createShaderModule({ code: entry.wgsl, label: entry.label });
    entry.pipeline ??= this.device.createComputePipeline({
      label: entry.label,
      layout: "auto",
      compute: { module: entry.module, entryPoint: "main" },
    });
    return entry.pipeline;
  }

  bindGroup(pipelineId, paramsId, words, at, count, cache) {
    let key = `${pipelineId}/${paramsId}`;
    for (let k = 0; k < count; k++) key += `/${words[at + 2 * k]}:${words[at + 2 * k + 1]}`;
    let group = cache ? this.bindGroups.get(key) : undefined;
    if (group) {
      this.bindGroups.delete(key); // refresh its place in the LRU order
    } else {
      const entries = [];
      for (let k = 0; k < count; k++) {
        entries.push({ binding: k, resource: { buffer: this.buffers.get(words[at + 2 * k]), size: words[at + 2 * k + 1] } });
      }
      if (paramsId >= 0) entries.push({ binding: count, resource: { buffer: this.params.get(paramsId) } });
      const layout = this.pipeline(pipelineId).getBindGroupLayout(0);
      group = this.device.createBindGroup({ layout, entries });
      if (cache) {
        for (let k = 0; k < count; k++) {
          const id = words[at + 2 * k];
          if (!this.groupsOfBuffer.has(id)) this.groupsOfBuffer.set(id, new Set());
          this.groupsOfBuffer.get(id).add(key);
        }
      }
    }
    if (cache) {
      this.bindGroups.set(key, group);
      if (this.bindGroups.size > BIND_GROUP_CACHE_SIZE) this.forgetGroup(this.bindGroups.keys().next().value);
    }
    return group;
  }

  // Drops a cached bind group and its entries in groupsOfBuffer (the key names its buffers).
  forgetGroup(key) {
    this.bindGroups.delete(key);
    for (const part of key.split("/").slice(2)) {
      const id = Number(part.split(":")[0]);
      const keys = this.groupsOfBuffer.get(id);
      keys?.delete(key);
      if (keys?.size === 0) this.groupsOfBuffer.delete(id);
    }
  }

  // A pooled buffer Python will never use again: free its memory and the bind groups naming it.
  destroyBuffer(id) {
    for (const key of this.groupsOfBuffer.get(id) ?? []) this.forgetGroup(key);
    this.groupsOfBuffer.delete(id);
    this.buffers.get(id)?.destroy();
    this.buffers.delete(id);
  }

  // A DISPATCH record at words[i] resolved to what encoding needs; returns [dispatch, next index].
  resolveDispatch(words, i, cache) {
    const at = this.at[this.op.DISPATCH];
    const pipelineWord = words[i + at.pipeline], count = words[i + at.bindings];
    const pipelineId = pipelineWord & this.pipelineMask, paramsId = words[i + at.params];
    const dispatch = {
      pipeline: this.pipeline(pipelineId),
      bindGroup: this.bindGroup(pipelineId, paramsId, words, i + at.next, count, cache),
      x: words[i + at.x],
      y: words[i + at.y],
      z: words[i + at.z],
      label: this.labels[pipelineWord >>> this.labelShift] ?? this.pipelines.get(pipelineId).label,
    };
    return [dispatch, i + at.next + 2 * count];
  }

  // Runs one command list: buffer creation and writes now, GPU work in one encoder and one submit.
  // Returns the serial of the last submit known to have completed (Python reuses buffers by it).
  flush(wordsProxy, blobProxy, profiling) {
    this.checkUsable();
    const wordsView = wordsProxy.getBuffer("i32");
    const blobView = blobProxy.getBuffer("u8");
    try {
      const words = wordsView.data;
      for (let i = 0; i < words.length; ) i = this.encode(words, blobView.data, profiling && this.timestamps, i);
    } finally {
      wordsView.release();
      blobView.release();
    }
    return this.completed;
  }

  // flush(), for a command list whose kernels may still be compiling: the commands up to the
  // first dispatch of an uncompiled kernel go out as one submit, then the rest once it compiled,
  // and so on, so the GPU runs the start of a first step while the kernels of its end compile
  // (a step's kernels compile together, the longest first: warmup.py).
  async flushWhenCompiled(wordsProxy, blobProxy, profiling) {
    this.checkUsable();
    // Copies: Python's memory may move while this waits.
    const words = wordsProxy.getBuffer("i32"), blob = blobProxy.getBuffer("u8");
    const [ownWords, ownBlob] = [words.data.slice(), blob.data.slice()];
    words.release();
    blob.release();
    await this.waitFor(this.encodeInParts(ownWords, ownBlob, profiling && this.timestamps));
    return this.completed;
  }

  async encodeInParts(words, blob, timed) {
    for (let i = 0; i < words.length; ) {
      const uncompiled = this.uncompiledAt(words, i);
      if (uncompiled !== undefined) await this.race(this.compile(this.pipelines.get(uncompiled)));
      this.checkUsable();
      i = this.encode(words, blob, timed, i, true);
    }
  }

  // The kernel of the DISPATCH at words[i] when it has not compiled yet, else undefined.
  uncompiledAt(words, i) {
    if (words[i] !== this.op.DISPATCH) return undefined;
    const id = words[i + this.at[this.op.DISPATCH].pipeline] & this.pipelineMask;
    const entry = this.pipelines.get(id);
    return entry.pipeline || entry.error ? undefined : id;
  }

  // Encodes and submits the commands from words[start]; with `untilUncompiled`, stops before a
  // dispatch of a kernel still compiling. Stops, too, before a WRITE that follows GPU work: a
  // queue.writeBuffer takes effect when it is called, ahead of everything in the encoder not yet
  // submitted, so the work encoded before it goes out first (a buffer written, read, then written
  // again in one list: a replay's inputs). Returns where it stopped.
  encode(words, blob, timed, start = 0, untilUncompiled = false) {
    const encoder = this.device.createCommandEncoder();
    const run = new Pass(encoder, timed ? this.device : null);
    const { CREATE, WRITE, PARAMS, DISPATCH, COPY, REPLAY, DESTROY } = this.op;
    let i = start;
    let encoded = false; // GPU work in this encoder
    while (i < words.length) {
      const at = this.at[words[i]];
      if (!at) throw new Error(`bad command ${words[i]} at word ${i}`);
      if (untilUncompiled && i > start && this.uncompiledAt(words, i) !== undefined) break;
      if (encoded && words[i] === WRITE) break;
      encoded ||= words[i] === DISPATCH || words[i] === COPY || words[i] === REPLAY;
      switch (words[i]) {
        case CREATE:
          this.buffers.set(words[i + at.buffer], this.device.createBuffer({ size: words[i + at.capacity], usage: STORAGE }));
          break;
        case WRITE:
          this.queue.writeBuffer(this.buffers.get(words[i + at.buffer]), 0, blob, words[i + at.offset], words[i + at.size]);
          break;
        case PARAMS: {
          const usage = GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST;
          const buffer = this.device.createBuffer({ size: Math.max(16, words[i + at.size]), usage });
          this.queue.writeBuffer(buffer, 0, blob, words[i + at.offset], words[i + at.size]);
          this.params.set(words[i + at.params], buffer);
          break;
        }
        case DISPATCH: {
          const [dispatch, next] = this.resolveDispatch(words, i, true);
          run.dispatch(dispatch);
          i = next;
          continue;
        }
        case COPY:
          run.end();
          encoder.copyBufferToBuffer(this.buffers.get(words[i + at.source]), 0, this.buffers.get(words[i + at.target]), 0, words[i + at.size]);
          break;
        case DESTROY:
          this.destroyBuffer(words[i + at.buffer]);
          break;
        case REPLAY:
          for (const dispatch of this.replayed(words[i + at.recording])) {
            run.dispatch(dispatch);
            this.replayFault?.();
          }
          break;
      }
      i += at.next;
    }
    run.end();
    this.submit(encoder, i >= words.length);
    for (const chunk of run.chunks) this.profileReads.push(this.readTimestamps(chunk));
    return i;
  }

  // `counted`: the last submit of a command list, which takes its serial (a list sent in parts
  // has one serial, which Python counts on; the queue finishes the parts in order).
  submit(encoder, counted = true) {
    this.queue.submit([encoder.finish()]);
    if (!counted) {
      this.earlyParts++;
      return;
    }
    const serial = ++this.submitted;
    this.queue.onSubmittedWorkDone().then(() => (this.completed = Math.max(this.completed, serial)));
  }

  // An ImageBitmap (a camera frame the page transferred) into buffer `id` as float32 RGB, (H, W, 3)
  // row-major: the browser copies it into a texture (no flip, no premultiplication), then one
  // compute pass of `wgsl` (wgsl/image_rgb.wgsl, from Python) converts it. Its own submit, after
  // everything Python flushed before and before anything it flushes next.
  imageToBuffer(bitmap, id, wgsl) {
    this.checkUsable();
    const { width, height } = bitmap;
    const usage = GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.COPY_DST | GPUTextureUsage.RENDER_ATTACHMENT;
    const texture = this.device.createTexture({ size: [width, height], format: "rgba8unorm", usage });
    this.queue.copyExternalImageToTexture({ source: bitmap }, { texture }, [width, height]);
    bitmap.close();
    if (this.framePipeline?.wgsl !== wgsl) {
      const module = this.device.createShaderModule({ code: wgsl, label: "image_rgb" });
      const pipeline = this.device.createComputePipeline({ label: "image_rgb", layout: "auto", compute: { module, entryPoint: "main" } });
      this.framePipeline = { wgsl, pipeline };
    }
    const { pipeline } = this.framePipeline;
    const entries = [
      { binding: 0, resource: texture.createView() },
      { binding: 1, resource: { buffer: this.buffers.get(id), size: width * height * 12 } },
    ];
    const bindGroup = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
    const groups = Math.ceil((width * height) / 64);
    const x = Math.min(groups, this.device.limits.maxComputeWorkgroupsPerDimension);
    const encoder = this.device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(x, Math.ceil(groups / x));
    pass.end();
    this.submit(encoder);
    texture.destroy(); // after the submitted work that reads it
  }

  // Keeps the dispatches of a step (DISPATCH records only); their buffers may not exist until the
  // step's own flush, so pipelines and bind groups are resolved at the first replay.
  record(id, wordsProxy) {
    const view = wordsProxy.getBuffer("i32");
    try {
      this.recordings.set(id, { words: view.data.slice(), dispatches: null });
    } finally {
      view.release();
    }
  }

  replayed(id) {
    const recording = this.recordings.get(id);
    if (!recording.dispatches) {
      const { words } = recording;
      recording.dispatches = [];
      for (let i = 0; i < words.length; ) {
        const [dispatch, next] = this.resolveDispatch(words, i, false);
        recording.dispatches.push(dispatch);
        i = next;
      }
    }
    return recording.dispatches;
  }

  dropRecording(id) {
    this.recordings.delete(id);
  }

  // Back-pressure without reading data: resolves once everything submitted so far has run.
  // Waits until everything submitted so far has run. A 4-byte buffer is cleared by a last submit
  // and mapped: Chromium resolves a mapAsync as soon as the queue drains, while a bare
  // onSubmittedWorkDone was seen to take tens of ms more (W1 unsynced steps: 25 ms vs 7 ms synced).
  async fence() {
    this.checkUsable();
    // One buffer per fence in flight (tasks may overlap); they are reused, not re-created.
    this.fenceBuffers ??= [];
    const buffer = this.fenceBuffers.pop() ?? this.device.createBuffer({ size: 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.device.createCommandEncoder();
    encoder.clearBuffer(buffer);
    this.submit(encoder);
    const serial = this.submitted;
    await this.waitFor(this.mapForRead(buffer));
    buffer.unmap();
    this.fenceBuffers.push(buffer);
    this.completed = Math.max(this.completed, serial);
    return this.completed;
  }

  // buffer.mapAsync(READ) of its first `nbytes` (all if undefined), with an empty submit every
  // MAP_POLL_MS until it settles. Firefox resolves a map only when its GPU process next polls the
  // device, on a 100 ms timer unless a submit polls it sooner: every read and fence took 100 ms
  // there (measured, a cleared 16-byte buffer: 100 ms, 0-1 ms with these submits). Chromium
  // resolves a map as its queue drains; an empty submit costs it one message.
  mapForRead(buffer, nbytes) {
    const mapped = nbytes === undefined ? buffer.mapAsync(GPUMapMode.READ) : buffer.mapAsync(GPUMapMode.READ, 0, nbytes);
    let settled = false;
    const poll = () => {
      if (settled || this.lost) return;
      this.queue.submit([]);
      setTimeout(poll, MAP_POLL_MS);
    };
    mapped.finally(() => (settled = true)).catch(() => {});
    setTimeout(poll, MAP_POLL_MS);
    return mapped;
  }

  // Copies buffer `id` into a pooled MAP_READ staging buffer and returns its first `nbytes` bytes.
  async read(id, nbytes) {
    this.checkUsable();
    const size = Math.max(16, 2 ** Math.ceil(Math.log2(nbytes)));
    const free = this.staging.get(size) ?? [];
    const staging = free.pop() ?? this.device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.device.createCommandEncoder();
    encoder.copyBufferToBuffer(this.buffers.get(id), 0, staging, 0, nbytes);
    this.submit(encoder);
    await this.waitFor(this.mapForRead(staging, nbytes));
    const bytes = new Uint8Array(staging.getMappedRange(0, nbytes).slice(0));
    staging.unmap();
    this.staging.set(size, free);
    free.push(staging);
    this.checkUsable();
    return bytes;
  }

  readTimestamps({ querySet, labels }) {
    const nbytes = labels.length * 16;
    const usage = GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC;
    const resolved = this.device.createBuffer({ size: nbytes, usage });
    const host = this.device.createBuffer({ size: nbytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const encoder = this.device.createCommandEncoder();
    encoder.resolveQuerySet(querySet, 0, labels.length * 2, resolved, 0);
    encoder.copyBufferToBuffer(resolved, 0, host, 0, nbytes);
    this.submit(encoder);
    return this.race(this.mapForRead(host)).then(() => {
      const ns = new BigUint64Array(host.getMappedRange());
      labels.forEach((label, k) => this.profileRows.push([label, Number(ns[2 * k + 1] - ns[2 * k]) / 1e6]));
      for (const buffer of [host, resolved, querySet]) buffer.destroy();
    });
  }

  // Per-kernel GPU times gathered while profiling, as JSON [[label, ms], ...]; clears them.
  async takeProfile() {
    await Promise.all(this.profileReads.splice(0));
    return JSON.stringify(this.profileRows.splice(0));
  }

  destroyDevice() {
    this.device.destroy();
  }

  // Fault injection (pib.debug.lose_device): destroys the device right after the `after`-th
  // dispatch the next replay encodes, in the middle of that replay's one synchronous call.
  destroyDeviceInReplay(after) {
    let left = after;
    this.replayFault = () => {
      if (--left > 0) return;
      this.replayFault = null;
      this.device.destroy();
    };
  }

  // Fault injection: the device does not come back. navigator.gpu.requestAdapter() in this
  // worker goes unanswered until releaseAdapters(), which answers the waiting requests with no
  // adapter (null, as a browser that has blocked the GPU does) and lets later requests through.
  withholdAdapters() {
    const gpu = navigator.gpu;
    const waiting = [];
    gpu.requestAdapter = () => new Promise((resolve) => waiting.push(resolve));
    this.releaseAdapters = () => {
      delete gpu.requestAdapter; // the prototype's own method again
      for (const resolve of waiting) resolve(null);
      this.releaseAdapters = null;
    };
  }
}

// One compute pass for a whole command list; while profiling, one timed pass per dispatch instead.
class Pass {
  constructor(encoder, timingDevice) {
    this.encoder = encoder;
    this.timingDevice = timingDevice;
    this.pass = null;
    this.chunks = []; // [{querySet, labels}], each query set holds QUERY_CHUNK passes
  }

  dispatch({ pipeline, bindGroup, x, y, z, label }) {
    if (this.timingDevice) {
      this.end();
      this.pass = this.beginTimedPass(label);
    }
    this.pass ??= this.encoder.beginComputePass();
    this.pass.setPipeline(pipeline);
    this.pass.setBindGroup(0, bindGroup);
    this.pass.dispatchWorkgroups(x, y, z);
    if (this.timingDevice) this.end();
  }

  beginTimedPass(label) {
    let chunk = this.chunks.at(-1);
    if (!chunk || chunk.labels.length === QUERY_CHUNK) {
      chunk = { querySet: this.timingDevice.createQuerySet({ type: "timestamp", count: 2 * QUERY_CHUNK }), labels: [] };
      this.chunks.push(chunk);
    }
    const k = chunk.labels.push(label) - 1;
    const timestampWrites = { querySet: chunk.querySet, beginningOfPassWriteIndex: 2 * k, endOfPassWriteIndex: 2 * k + 1 };
    return this.encoder.beginComputePass({ timestampWrites });
  }

  end() {
    this.pass?.end();
    this.pass = null;
  }
}
