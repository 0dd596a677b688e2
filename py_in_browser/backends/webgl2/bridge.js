// WebGL2 executor for py_in_browser: Python records command lists; this file runs them on a
// WebGL2 context on an OffscreenCanvas in the engine's worker. Self-contained (imported via blob:).
// Opcodes, command fields, limits and uniform names come from Python at start-up (wire.py).

const VERTEX_SHADER = `#version 300 es
in vec2 position;
void main() { gl_Position = vec4(position, 0.0, 1.0); }`;

const POLL_MS = 1;
// The warm-up links one program at a time (~3 ms on SwiftShader, ~4.5 ms under load) once the
// engine has run no command list (and waits for no read) for WARM_UP_IDLE_MS, and looks every
// WARM_UP_POLL_MS whether the GPU finished the last one. Why that long an idle moment: a step
// queued behind a link waits for it, and someone who is training comes back within ~100 ms
// (the benchmark's other side, a UI frame); one who is not leaves far longer gaps.
const WARM_UP_IDLE_MS = 100;
const WARM_UP_POLL_MS = 4;

// A profile's timer queries that are not available after this long are discarded, not awaited.
const QUERY_DEADLINE_MS = 10000;

// Reads of at most this many texels block on readPixels instead of polling a fence (read()).
const SMALL_READ_TEXELS = 4096;

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// A pause between two looks at a fence. A sync object's status only changes between tasks, and
// nested setTimeout calls are clamped to 4 ms after the fifth: a predict waiting ~10 ms on
// the GPU was noticed up to 4 ms late. Where SharedArrayBuffer exists (cross-origin isolated),
// Atomics.wait sleeps PAUSE_MS without using the CPU (a software GPU needs every core), then a
// MessageChannel message ends the task, which no clamp delays.
const PAUSE_MS = 0.5;

class Pauser {
  constructor() {
    this.cell = typeof SharedArrayBuffer === "function" && globalThis.crossOriginIsolated
      ? new Int32Array(new SharedArrayBuffer(4)) : null;
    this.waiting = [];
    this.channel = new MessageChannel();
    this.channel.port1.onmessage = () => this.waiting.shift()?.();
  }

  pause() {
    if (!this.cell) return sleep(POLL_MS);
    Atomics.wait(this.cell, 0, 0, PAUSE_MS);
    return this.nextTask();
  }

  // Resolves in a new task, at once (no timer clamp).
  nextTask() {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.channel.port2.postMessage(0);
    });
  }
}

// Per-draw times while Python profiles. GPU time from EXT_disjoint_timer_query_webgl2 when the
// context has it; otherwise the wall time from issuing the draw to a 1-texel readPixels of its
// output returning (which waits for the draw). Rows are [label, ms].
export class DrawTimer {
  constructor(gl, ext) {
    this.gl = gl;
    this.ext = ext;
    this.source = ext ? "gpu-timer-query" : "wall";
    this.active = false;
    this.rows = [];
    this.pending = []; // [label, query]: timer queries not read yet
    this.discarded = 0; // timer results dropped because the GPU reported a disjoint event
    this.pixel = new Float32Array(4);
  }

  start() {
    if (this.active) return;
    for (const [, query] of this.pending) this.gl.deleteQuery(query); // left by a failed profile
    this.pending = [];
    this.rows = [];
    this.discarded = 0;
    this.active = true;
    // Reading GPU_DISJOINT_EXT clears it: a disjoint event before the profile must not void it.
    if (this.ext) this.gl.getParameter(this.ext.GPU_DISJOINT_EXT);
  }

  // `calls`: primitive calls the draw runs (a merged draw runs several in one pass): as many
  // rows, each with its share of the time.
  time(label, draw, calls = 1) {
    const gl = this.gl;
    if (this.ext) {
      const query = gl.createQuery();
      gl.beginQuery(this.ext.TIME_ELAPSED_EXT, query);
      draw();
      gl.endQuery(this.ext.TIME_ELAPSED_EXT);
      this.pending.push([label, query, calls]);
    } else {
      // gl.finish() returns before the GPU is done under Chromium's ANGLE (a 1024^2 matmul
      // "took" 0.5 ms): reading one texel of the output back is what really waits for the draw.
      // The previous timed draw was drained the same way, so a row holds its own draw only.
      const started = performance.now();
      draw();
      gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, this.pixel);
      this.share(label, performance.now() - started, calls);
    }
  }

  share(label, ms, calls) {
    for (let k = 0; k < calls; k++) this.rows.push([label, ms / calls]);
  }

  // Waits (polling, never blocking) for the queries, then hands over every row and stops.
  // If the GPU was disjoint meanwhile (power state change, context switch), all timer results of
  // this profile are meaningless: they are discarded and counted, never reported.
  async take(isLost) {
    const gl = this.gl;
    const deadline = performance.now() + QUERY_DEADLINE_MS;
    const ready = () => this.pending.every(([, q]) => gl.getQueryParameter(q, gl.QUERY_RESULT_AVAILABLE));
    if (this.pending.length) gl.flush();
    while (this.pending.length && !isLost() && performance.now() < deadline && !ready()) await sleep(POLL_MS);
    if (this.pending.length) {
      const usable = !isLost() && ready() && !gl.getParameter(this.ext.GPU_DISJOINT_EXT);
      for (const [label, query, calls] of this.pending) {
        if (usable) this.share(label, gl.getQueryParameter(query, gl.QUERY_RESULT) / 1e6, calls);
        gl.deleteQuery(query);
      }
      if (!usable) this.discarded += this.pending.length;
      this.pending = [];
    }
    const result = { timing: this.source, rows: this.rows, discarded: this.discarded };
    this.rows = [];
    this.discarded = 0;
    this.active = false;
    return JSON.stringify(result);
  }
}

// `protocolJson`: wire.protocol(), the constants Python and this file share. `canvas`: the
// OffscreenCanvas of an engine whose context was lost and then restored (recovery rebuilds every
// resource on it), or undefined for a new one.
export function createEngine(protocolJson, canvas) {
  return new Engine(JSON.parse(protocolJson), canvas ?? takeProbedCanvas());
}

const CONTEXT_ATTRIBUTES = {
  alpha: true, antialias: false, depth: false, stencil: false,
  premultipliedAlpha: false, preserveDrawingBuffer: false, powerPreference: "high-performance",
};

// The OffscreenCanvas whose context the engine's worker made to probe WebGL2 (web/js/gpu-probe.js),
// if it is there, alive and on the GPU CONTEXT_ATTRIBUTES asks for: taking it over spares making a
// context (10-40 ms of init). Its other attributes concern its own drawing buffer, which the
// engine never draws into (every draw targets a texture). Undefined otherwise (Node tests, page
// code's second init).
function takeProbedCanvas() {
  const canvas = globalThis.pibProbedWebGL2;
  globalThis.pibProbedWebGL2 = undefined;
  const made = canvas?.getContext("webgl2");
  if (!made || made.isContextLost()) return undefined;
  return made.getContextAttributes().powerPreference === CONTEXT_ATTRIBUTES.powerPreference ? canvas : undefined;
}

// {name: position} for a list of field names.
function positions(names) {
  return Object.fromEntries(names.map((name, k) => [name, k]));
}

class Engine {
  constructor(protocol, canvas) {
    if (protocol.read_channels !== 4) throw new Error("readPixels of float textures reads RGBA: read_channels must be 4");
    this.protocol = protocol;
    this.op = protocol.opcodes;
    this.pauser = new Pauser();
    // Where each command keeps each field: this.at.draw.key, this.at.input.repeat, ...
    this.at = Object.fromEntries(Object.entries(protocol.fields).map(([kind, names]) => [kind, positions(names)]));
    this.canvas = canvas ?? new OffscreenCanvas(1, 1);
    const gl = this.canvas.getContext("webgl2", CONTEXT_ATTRIBUTES);
    if (!gl) throw new Error("WebGL2 is not available on an OffscreenCanvas in this worker");
    this.gl = gl;
    this.lostEvent = false;
    this.onLost = null; // set by Python: records the runtime event as soon as the browser says so
    this.pendingReads = new Set();
    this.restored = false;
    this.whenRestoredResolve = null;
    this.replayFault = null; // set by loseContextInReplay
    // preventDefault tells the browser this page handles the loss, so it may restore the context.
    this.lostListener = (event) => {
      event.preventDefault();
      this.lostEvent = true;
      this.rejectPendingReads();
      if (this.onLost) this.onLost();
    };
    this.restoredListener = () => {
      this.restored = true;
      if (this.whenRestoredResolve) this.whenRestoredResolve(true);
    };
    this.canvas.addEventListener("webglcontextlost", this.lostListener);
    this.canvas.addEventListener("webglcontextrestored", this.restoredListener);
    this.ext = {
      colorBufferFloat: gl.getExtension("EXT_color_buffer_float"),
      colorBufferHalf: gl.getExtension("EXT_color_buffer_half_float"),
      parallelCompile: gl.getExtension("KHR_parallel_shader_compile"),
      timer: gl.getExtension("EXT_disjoint_timer_query_webgl2"),
      loseContext: gl.getExtension("WEBGL_lose_context"),
    };
    this.timer = new DrawTimer(gl, this.ext.timer);
    this.textures = new Map(); // id -> {texture, width, height, channels, half}
    this.programs = new Map(); // key -> {program, uniforms: Map(name -> {location, type})}
    this.warmUp = new Map(); // key -> source: warm-up programs not compiled yet, in order
    this.warmUpTimer = null;
    this.linking = new Map(); // key -> a warm-up program compiled and linked, not yet finished
    this.warmFramebuffers = new Map(); // `${channels}:${targets}:${half}` -> warmDraw's target
    this.toDrawWarm = []; // warmDraws' programs drawWarm has not drawn yet
    this.warmFence = null; // after drawWarm's draws or a warm-up link, until the GPU passed it
    this.lastRun = 0; // performance.now() of the last command list: the warm-up links while idle
    this.fences = [];
    this.recordings = new Map(); // id -> {commands, constants}: recorded train steps
    this.flushes = 0;
    this.frames = 0; // ImageBitmaps taken by imageTexture: their texture ids are -2, -3, ...
    this.framebuffer = gl.createFramebuffer(); // multi-target draws, reads, probes
    // A framebuffer per texture a single-target draw wrote: binding one is cheaper than
    // re-attaching a texture to a shared one (ANGLE revalidates it: ~15% of a small draw's cost
    // on SwiftShader).
    this.targetFramebuffers = new Map(); // WebGLTexture -> WebGLFramebuffer
    // Render targets one draw can write (block kernels use up to max_render_targets; WebGL2
    // guarantees 4).
    this.maxTargets = Math.min(
      gl.getParameter(gl.MAX_DRAW_BUFFERS),
      gl.getParameter(gl.MAX_COLOR_ATTACHMENTS),
      protocol.max_render_targets,
    );
    this.vertexShader = this.compileShader(gl.VERTEX_SHADER, VERTEX_SHADER);
    // One triangle covering the viewport: every output texel gets exactly one fragment.
    this.vao = gl.createVertexArray();
    gl.bindVertexArray(this.vao);
    gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
    gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 3, -1, -1, 3]), gl.STATIC_DRAW);
    gl.enableVertexAttribArray(0);
    gl.vertexAttribPointer(0, 2, gl.FLOAT, false, 0, 0);
    gl.disable(gl.DITHER);
    gl.disable(gl.BLEND);
    this.resetState();
  }

  // True from the moment the context is gone (isContextLost() is, before the event is dispatched).
  get lost() {
    return this.lostEvent || this.gl.isContextLost();
  }

  rejectPendingReads() {
    for (const reject of this.pendingReads) reject(new Error("WebGL context lost while a read was pending"));
    this.pendingReads.clear();
  }

  // ---- capabilities ----

  framebufferComplete(internalFormat) {
    const gl = this.gl;
    const texture = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, texture);
    gl.texStorage2D(gl.TEXTURE_2D, 1, internalFormat, 1, 1);
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.framebuffer);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
    const complete = gl.checkFramebufferStatus(gl.FRAMEBUFFER) === gl.FRAMEBUFFER_COMPLETE;
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, null, 0);
    gl.deleteTexture(texture);
    this.resetState();
    return complete;
  }

  capabilities() {
    const gl = this.gl;
    const high = gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, gl.HIGH_FLOAT);
    const highInt = gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, gl.HIGH_INT);
    const debugInfo = gl.getExtension("WEBGL_debug_renderer_info");
    return JSON.stringify({
      max_texture_size: gl.getParameter(gl.MAX_TEXTURE_SIZE),
      max_texture_units: gl.getParameter(gl.MAX_TEXTURE_IMAGE_UNITS),
      max_draw_buffers: this.maxTargets,
      float32_render: Boolean(this.ext.colorBufferFloat) && this.framebufferComplete(gl.RGBA32F),
      float16_render: Boolean(this.ext.colorBufferFloat || this.ext.colorBufferHalf) && this.framebufferComplete(gl.RGBA16F),
      // 24-bit float mantissas; ints that index any texel of a 16384^2 texture (2^28) at least.
      highp: high.precision >= 23 && highInt.rangeMax >= 24,
      highp_float_bits: high.precision,
      highp_int_bits: highInt.rangeMax,
      parallel_compile: Boolean(this.ext.parallelCompile),
      timer_query: Boolean(this.ext.timer),
      // The unmasked renderer names the driver (SwiftShader, llvmpipe) where the browser tells it.
      renderer: debugInfo ? gl.getParameter(debugInfo.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER),
    });
  }

  // ---- programs ----

  compileShader(type, source) {
    const gl = this.gl;
    const shader = gl.createShader(type);
    gl.shaderSource(shader, source);
    gl.compileShader(shader);
    return shader;
  }

  startProgram(key, source) {
    const gl = this.gl;
    const program = gl.createProgram();
    const fragment = this.compileShader(gl.FRAGMENT_SHADER, source);
    gl.attachShader(program, this.vertexShader);
    gl.attachShader(program, fragment);
    gl.bindAttribLocation(program, 0, "position");
    gl.linkProgram(program);
    return { key, program, fragment, source };
  }

  finishProgram({ key, program, fragment, source }) {
    const gl = this.gl;
    if (!gl.getProgramParameter(program, gl.LINK_STATUS)) {
      const log = gl.getShaderInfoLog(fragment) || gl.getProgramInfoLog(program);
      throw new Error(`webgl2 program ${key} failed to compile: ${log}\n${source}`);
    }
    const uniforms = new Map();
    gl.useProgram(program);
    for (let i = 0; i < gl.getProgramParameter(program, gl.ACTIVE_UNIFORMS); i++) {
      const info = gl.getActiveUniform(program, i);
      const name = info.name.replace(/\[0\]$/, "");
      uniforms.set(name, { location: gl.getUniformLocation(program, info.name), type: info.type });
    }
    // Samplers never move: input k on unit 2k, its float16 low part (if any) on unit 2k + 1; in
    // a program that samples no low part, input k on unit k (up to max_single_unit_inputs).
    const u = this.protocol.uniforms;
    const sampler = new RegExp(`^${u.input}(\\d+)(${u.low_part})?$`);
    const matches = [...uniforms].map(([name, { location }]) => [sampler.exec(name), location]);
    const unitStride = matches.some(([match]) => match && match[2]) ? 2 : 1;
    for (const [match, location] of matches) {
      if (match) gl.uniform1i(location, Number(match[1]) * unitStride + (match[2] ? 1 : 0));
    }
    // Per input k: whether the program samples a low part, and its uniforms' slots (looked up
    // once here, not by name on every draw). Every slot a draw may fill is looked at: a fused
    // program may leave an input unread, whose uniforms the compiler then drops, and the inputs
    // after it still need theirs.
    const inputs = [];
    const slots = unitStride === 2 ? this.protocol.max_inputs_per_draw : this.protocol.max_single_unit_inputs;
    for (let k = 0; k < slots; k++) {
      inputs.push({
        lo: uniforms.has(`${u.input}${k}${u.low_part}`),
        layout: uniforms.get(`${u.input_layout}${k}`),
        hasLo: uniforms.get(`${u.input_has_low_part}${k}`),
      });
    }
    this.current.program = null; // useProgram above
    const out = uniforms.get(u.target_layout), outSize = uniforms.get(u.target_size);
    this.programs.set(key, { program, uniforms, inputs, unitStride, out, outSize });
  }

  // Programs to compile ahead (the warm-up), linked one at a time while the engine is idle: each
  // link is GPU-process work that every later draw queues behind (WebGL runs in order), so init
  // does not wait for them, and the next is linked only once the GPU finished the warm work
  // before it (warmFence): a step that starts while the warm-up runs waits for one link at most,
  // not for a queue of them (linked 8 per 20 ms idle moment, faster than SwiftShader links, a
  // queue of them delayed the benchmark's W1 blocks 10-40 ms each). Link
  // status and uniforms are read at a program's first draw (program(key)); a draw that needs a
  // program not linked yet links it then (as any new program).
  compile(programsJson) {
    for (const [key, source] of Object.entries(JSON.parse(programsJson))) {
      if (!this.programs.has(key) && !this.linking.has(key)) this.warmUp.set(key, source);
    }
    this.pumpWarmUp();
  }

  pumpWarmUp() {
    if (this.warmUpTimer !== null || this.warmUp.size === 0) return;
    this.warmUpTimer = setTimeout(() => {
      this.warmUpTimer = null;
      if (this.lost) return;
      if (this.idle() && this.warmWorkDone()) {
        const [key, source] = this.warmUp.entries().next().value;
        this.warmUp.delete(key);
        this.linking.set(key, this.startProgram(key, source));
        this.warmFence = this.gl.fenceSync(this.gl.SYNC_GPU_COMMANDS_COMPLETE, 0);
        this.gl.flush();
      }
      this.pumpWarmUp();
    }, WARM_UP_POLL_MS);
  }

  // No command list for WARM_UP_IDLE_MS and no read waiting: the user is not stepping.
  idle() {
    return performance.now() - this.lastRun >= WARM_UP_IDLE_MS && this.pendingReads.size === 0;
  }

  // Programs a typical first training step draws ([key, source, channels, targets, half] each,
  // first_step.py): linked now, drawn by drawWarm.
  warmDraws(programsJson) {
    this.toDrawWarm = JSON.parse(programsJson).filter(([key]) => !this.programs.has(key));
    for (const [key, source] of this.toDrawWarm) {
      this.warmUp.delete(key);
      if (!this.linking.has(key)) this.linking.set(key, this.startProgram(key, source));
    }
    this.gl.flush();
  }

  // Draws warmDraws' programs once each into 1x1 targets of their format. On a software GPU a
  // program's first draw is its costly part (the GPU process builds its pipeline then): drawn
  // here, after ready, that runs while Python builds the first step. All links went before all
  // draws, so the one wait (for the links, when the first is finished) waits for no draw, and
  // the draws are not waited for at all.
  drawWarm() {
    const programs = this.toDrawWarm;
    this.toDrawWarm = [];
    if (this.lost || programs.length === 0) return;
    const ready = [];
    for (const [key, source, channels, targets, half] of programs) {
      try {
        ready.push([this.program(key), channels, targets, half]);
      } catch {
        this.warmUp.set(key, source); // linked again at its first draw, which reports why it fails
      }
    }
    for (const [entry, channels, targets, half] of ready) this.warmDraw(entry, channels, targets, half);
    this.resetState(); // program, framebuffer and viewport changed behind draw's back
    this.warmFence = this.gl.fenceSync(this.gl.SYNC_GPU_COMMANDS_COMPLETE, 0);
    this.gl.flush();
  }

  // Whether the GPU has done the warm work queued last (drawWarm's draws, a warm-up link): the
  // idle warm-up links nothing before, since a step's draws would queue behind those links too.
  warmWorkDone() {
    if (this.warmFence === null) return true;
    const gl = this.gl;
    if (gl.getSyncParameter(this.warmFence, gl.SYNC_STATUS) !== gl.SIGNALED) return false;
    gl.deleteSync(this.warmFence);
    this.warmFence = null;
    return true;
  }

  // One draw of `entry` into `targets` 1x1 textures of `channels` (float16 if `half`), made once
  // per format and count; nothing reads them.
  warmDraw(entry, channels, targets, half) {
    const gl = this.gl;
    const name = `${channels}:${targets}:${half}`;
    let framebuffer = this.warmFramebuffers.get(name);
    if (framebuffer === undefined) {
      framebuffer = gl.createFramebuffer();
      gl.bindFramebuffer(gl.FRAMEBUFFER, framebuffer);
      const format = channels === 4 ? (half ? gl.RGBA16F : gl.RGBA32F) : half ? gl.R16F : gl.R32F;
      for (let t = 0; t < targets; t++) {
        const texture = gl.createTexture();
        gl.bindTexture(gl.TEXTURE_2D, texture);
        gl.texStorage2D(gl.TEXTURE_2D, 1, format, 1, 1);
        gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0 + t, gl.TEXTURE_2D, texture, 0);
      }
      gl.bindTexture(gl.TEXTURE_2D, null); // a target still bound to a sampler unit: a feedback loop
      gl.drawBuffers([...Array(targets).keys()].map((t) => gl.COLOR_ATTACHMENT0 + t));
      this.warmFramebuffers.set(name, framebuffer);
    }
    gl.bindFramebuffer(gl.FRAMEBUFFER, framebuffer);
    gl.useProgram(entry.program);
    gl.viewport(0, 0, 1, 1);
    gl.drawArrays(gl.TRIANGLES, 0, 3);
  }

  // Program `key` ready to draw: linked ahead and finished now, or compiled now.
  program(key) {
    const source = this.warmUp.get(key);
    if (source !== undefined) {
      this.warmUp.delete(key);
      this.finishProgram(this.startProgram(key, source));
    }
    const linking = this.linking.get(key);
    if (linking) {
      this.linking.delete(key);
      this.finishProgram(linking);
    }
    return this.programs.get(key);
  }

  // Warm-up programs not linked yet (tests wait for none).
  warmUpLeft() {
    return this.warmUp.size;
  }

  // ---- command lists ----

  // `staging` is a numpy float32 array (a PyProxy): its buffer is read in place, during the call.
  run(payloadJson, staging) {
    if (this.lost) return "lost";
    const buffer = staging.getBuffer("f32");
    try {
      return this.runCommands(JSON.parse(payloadJson), buffer.data);
    } finally {
      buffer.release();
    }
  }

  runCommands({ programs, commands, profile }, staging) {
    this.lastRun = performance.now();
    for (const [key, source] of Object.entries(programs)) this.finishProgram(this.startProgram(key, source));
    if (profile) this.timer.start();
    else this.timer.active = false;
    const op = this.op;
    for (const command of commands) {
      if (command[0] === op.draw) this.timedDraw(command);
      else if (command[0] === op.texture) this.createTexture(command);
      else if (command[0] === op.upload) this.upload(command, staging);
      else if (command[0] === op.delete) this.deleteTexture(command[this.at.delete.id]);
      else if (command[0] === op.replay) this.replay(command);
      else if (command[0] === op.swap) this.swap(command[this.at.swap.a], command[this.at.swap.b]);
      else throw new Error(`unknown command ${command[0]}`);
    }
    if (++this.flushes % this.protocol.fence_every_flushes === 0) {
      this.fences.push(this.gl.fenceSync(this.gl.SYNC_GPU_COMMANDS_COMPLETE, 0));
    }
    this.gl.flush();
    return "ok";
  }

  timedDraw(command) {
    if (!this.timer.active) return this.draw(command);
    const at = this.at.draw;
    const merged = command[at.key].startsWith(this.protocol.merged_key);
    const calls = merged ? 1 + command[at.more_targets].length : 1;
    this.timer.time(command[at.label], () => this.draw(command), calls);
  }

  // The rows timed since profiling started, as JSON {timing, rows: [[label, ms]], discarded}.
  async takeProfile() {
    return this.timer.take(() => this.lost);
  }

  // A recorded step: its draws and constant uploads, kept here so a replay is one command.
  record(id, commandsJson, constants) {
    const buffer = constants.getBuffer("f32");
    this.recordings.set(id, { commands: JSON.parse(commandsJson), constants: buffer.data.slice() });
    buffer.release();
  }

  dropRecording(id) {
    this.recordings.delete(id);
  }

  // The batch was uploaded into the recorded input textures just before.
  replay(command) {
    const { commands, constants } = this.recordings.get(command[this.at.replay.id]);
    for (const recorded of commands) {
      if (recorded[0] === this.op.draw) this.timedDraw(recorded);
      else this.upload(recorded, constants);
      this.replayFault?.();
    }
  }

  // Exchanges the textures behind two ids of one shape and format: a replay's state moves into
  // the recorded state textures this way instead of by a copy draw (recorder.py says when).
  swap(a, b) {
    const first = this.textures.get(a);
    this.textures.set(a, this.textures.get(b));
    this.textures.set(b, first);
  }

  // An ImageBitmap (a camera frame the page transferred) as an RGBA8 texture, bytes as sent (no
  // flip, premultiplication or colour conversion), under a new negative id (Python's textures
  // are positive); Python draws from it and deletes it with its next commands.
  imageTexture(bitmap) {
    const gl = this.gl;
    const texture = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, texture);
    gl.pixelStorei(gl.UNPACK_FLIP_Y_WEBGL, false);
    gl.pixelStorei(gl.UNPACK_PREMULTIPLY_ALPHA_WEBGL, false);
    gl.pixelStorei(gl.UNPACK_COLORSPACE_CONVERSION_WEBGL, gl.NONE);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, gl.RGBA, gl.UNSIGNED_BYTE, bitmap);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
    this.current.units = []; // bound on whichever unit was active
    const id = -2 - this.frames++;
    this.textures.set(id, { texture, width: bitmap.width, height: bitmap.height, channels: 4, half: false });
    bitmap.close();
    return id;
  }

  createTexture(command) {
    const gl = this.gl;
    const at = this.at.texture;
    const [id, width, height, channels, half] = [at.id, at.width, at.height, at.channels, at.half].map((k) => command[k]);
    const texture = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, texture);
    const format = channels === 4 ? (half ? gl.RGBA16F : gl.RGBA32F) : half ? gl.R16F : gl.R32F;
    gl.texStorage2D(gl.TEXTURE_2D, 1, format, width, height);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST);
    this.current.units = []; // bound on whichever unit was active
    this.textures.set(id, { texture, width, height, channels, half });
  }

  deleteTexture(id) {
    this.resetState(); // a deleted texture is unbound everywhere
    const { texture } = this.textures.get(id);
    const framebuffer = this.targetFramebuffers.get(texture);
    if (framebuffer !== undefined) this.gl.deleteFramebuffer(framebuffer);
    this.targetFramebuffers.delete(texture);
    this.gl.deleteTexture(texture);
    this.textures.delete(id);
  }

  upload(command, staging) {
    const gl = this.gl;
    const id = command[this.at.upload.id], offset = command[this.at.upload.offset];
    const { texture, width, height, channels } = this.textures.get(id);
    gl.bindTexture(gl.TEXTURE_2D, texture);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 1);
    const format = channels === 4 ? gl.RGBA : gl.RED;
    gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, width, height, format, gl.FLOAT, staging, offset);
    this.current.units = []; // bound on whichever unit was active
  }

  // A draw's fields (wire.DRAW_FIELDS): program key, target texture, more_targets (render
  // targets 1, 2, ...: a float16 low part, or a block kernel's other targets), the target's
  // elements, inputs (wire.INPUT_FIELDS each), uniforms ([name, kind, values] each), label.
  // GL state is only changed where this draw differs from the last one (program, bound
  // textures, the extra attachments, viewport): redundant calls cost a command-buffer round
  // and, under ANGLE, framebuffer revalidation per draw.
  draw(command) {
    const gl = this.gl;
    const at = this.at.draw, input = this.at.input;
    const key = command[at.key], outId = command[at.target], moreIds = command[at.more_targets];
    const size = command[at.size], inputs = command[at.inputs], uniforms = command[at.uniforms];
    const entry = this.program(key);
    const { program, uniforms: slots } = entry;
    if (this.current.program !== program) {
      gl.useProgram(program);
      this.current.program = program;
    }
    const out = this.textures.get(outId);
    inputs.forEach((fields, k) => {
      const id = fields[input.texture], loId = fields[input.lo];
      const inputSize = fields[input.size], repeat = fields[input.repeat];
      const texture = this.textures.get(id);
      this.bindUnit(entry.unitStride * k, texture.texture);
      const slot = entry.inputs[k];
      if (slot && slot.lo) this.bindUnit(2 * k + 1, (loId >= 0 ? this.textures.get(loId) : texture).texture);
      if (slot && slot.layout) this.setSlot(slot.layout, [texture.width, texture.channels, inputSize, repeat]);
      if (slot && slot.hasLo) this.setSlot(slot.hasLo, [loId >= 0 ? 1 : 0]);
    });
    if (entry.out) this.setSlot(entry.out, [out.width, out.channels]);
    if (entry.outSize) this.setSlot(entry.outSize, [size]);
    for (const [name, , values] of uniforms) this.setUniform(slots, name, values);
    if (moreIds.length === 0) {
      this.bindFramebuffer(this.targetFramebuffer(out.texture));
    } else {
      this.bindFramebuffer(this.framebuffer);
      if (this.current.target !== out.texture) {
        gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, out.texture, 0);
        this.current.target = out.texture;
      }
      this.attachMore(moreIds.map((id) => this.textures.get(id).texture));
    }
    if (this.current.width !== out.width || this.current.height !== out.height) {
      gl.viewport(0, 0, out.width, out.height);
      this.current.width = out.width;
      this.current.height = out.height;
    }
    gl.drawArrays(gl.TRIANGLES, 0, 3);
  }

  bindFramebuffer(framebuffer) {
    if (this.current.framebuffer === framebuffer) return;
    this.gl.bindFramebuffer(this.gl.FRAMEBUFFER, framebuffer);
    this.current.framebuffer = framebuffer;
  }

  // The framebuffer drawing into `texture` alone (made on first use).
  targetFramebuffer(texture) {
    let framebuffer = this.targetFramebuffers.get(texture);
    if (framebuffer === undefined) {
      const gl = this.gl;
      framebuffer = gl.createFramebuffer();
      gl.bindFramebuffer(gl.FRAMEBUFFER, framebuffer);
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
      this.current.framebuffer = framebuffer;
      this.targetFramebuffers.set(texture, framebuffer);
    }
    return framebuffer;
  }

  // Attaches `more` at COLOR_ATTACHMENT1.. and draws into all of them; detaches what the last
  // draw had beyond (or, after resetState, everything that may be attached there).
  attachMore(more) {
    const gl = this.gl;
    const now = this.current.more;
    if (now && now.length === more.length && now.every((t, i) => t === more[i])) return;
    const count = now ? Math.max(now.length, more.length) : this.maxTargets - 1;
    for (let i = 0; i < count; i++) {
      if (!now || now[i] !== more[i]) {
        gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT1 + i, gl.TEXTURE_2D, more[i] || null, 0);
      }
    }
    gl.drawBuffers([gl.COLOR_ATTACHMENT0, ...more.map((_, i) => gl.COLOR_ATTACHMENT1 + i)]);
    this.current.more = more;
  }

  bindUnit(unit, texture) {
    if (this.current.units[unit] === texture) return;
    const gl = this.gl;
    gl.activeTexture(gl.TEXTURE0 + unit);
    gl.bindTexture(gl.TEXTURE_2D, texture);
    this.current.units[unit] = texture;
  }

  // Sets a uniform unless it already holds `values` (uniforms are program state: a replay sets
  // the same values step after step, and every call is a command the GPU process decodes).
  setSlot(slot, values) {
    const last = slot.last;
    if (last && last.length === values.length && last.every((v, i) => v === values[i])) return;
    slot.last = Array.from(values);
    const gl = this.gl;
    const { location, type } = slot;
    if (type === gl.FLOAT) gl.uniform1fv(location, values);
    else if (type === gl.INT_VEC2) gl.uniform2iv(location, values);
    else if (type === gl.INT_VEC3) gl.uniform3iv(location, values);
    else if (type === gl.INT_VEC4) gl.uniform4iv(location, values);
    else gl.uniform1iv(location, values);
  }

  // Forgets the cached GL state (after code that changes bindings behind draw's back).
  resetState() {
    this.current = { program: null, units: [], framebuffer: null, target: null, more: null, width: -1, height: -1 };
  }

  setUniform(slots, name, values) {
    const slot = slots.get(name);
    if (slot !== undefined) this.setSlot(slot, values); // else optimised away by the compiler
  }

  // ---- readback ----

  // A read of at most SMALL_READ_TEXELS texels (a loss, a prediction, a metric) is one blocking
  // readPixels, one task after it is asked for; a bigger one goes through a PIXEL_PACK_BUFFER
  // and a fence, polled. Why not a fence for all: a fence's status reaches this worker about
  // 2 ms after the GPU passed it (Chromium looks at pending queries on an idle timer), which
  // doubled a small model's synced step. The caller awaits the data either way, and the GPU
  // runs in order, so blocking only keeps other tasks of this worker waiting while work already
  // queued finishes; bigger reads (weights, whole outputs) keep the worker free meanwhile. The
  // task in between lets a context loss that happens meanwhile reject the read, as the fence
  // path does.
  async read(payloadJson, staging, idsJson) {
    if (this.run(payloadJson, staging) === "lost") throw new Error("WebGL context lost");
    const ids = JSON.parse(idsJson);
    const texels = ids.reduce((sum, id) => sum + this.texelCount(id), 0);
    const out = new Float32Array(texels * this.protocol.read_channels);
    if (texels <= SMALL_READ_TEXELS) {
      await this.nextTask();
      this.readPixelsOf(ids, (offset) => [out, offset / 4]);
      if (this.lost) throw new Error("WebGL context lost while a read was pending");
      return out;
    }
    const gl = this.gl;
    const buffer = gl.createBuffer();
    gl.bindBuffer(gl.PIXEL_PACK_BUFFER, buffer);
    gl.bufferData(gl.PIXEL_PACK_BUFFER, out.byteLength, gl.STREAM_READ);
    this.readPixelsOf(ids, (offset) => [offset]);
    gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null);
    await this.waitFor(gl.fenceSync(gl.SYNC_GPU_COMMANDS_COMPLETE, 0));
    gl.bindBuffer(gl.PIXEL_PACK_BUFFER, buffer);
    gl.getBufferSubData(gl.PIXEL_PACK_BUFFER, 0, out);
    gl.bindBuffer(gl.PIXEL_PACK_BUFFER, null);
    gl.deleteBuffer(buffer);
    return out;
  }

  // readPixels of each texture, one after another as RGBA floats; `destination(byteOffset)`:
  // readPixels' trailing arguments (a PIXEL_PACK_BUFFER offset, or an array and its offset).
  readPixelsOf(ids, destination) {
    const gl = this.gl;
    const texelBytes = 4 * this.protocol.read_channels; // float32 RGBA
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.framebuffer);
    this.attachMore([]);
    gl.readBuffer(gl.COLOR_ATTACHMENT0);
    let offset = 0;
    for (const id of ids) {
      const { texture, width, height } = this.textures.get(id);
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
      gl.readPixels(0, 0, width, height, gl.RGBA, gl.FLOAT, ...destination(offset));
      offset += width * height * texelBytes;
    }
    this.resetState(); // attachments changed for the reads
  }

  // Resolves in the next task (rejects if the context is lost by then), counted as a pending read.
  nextTask() {
    return new Promise((resolve, reject) => {
      this.pendingReads.add(reject);
      this.pauser.nextTask().then(() => {
        if (!this.pendingReads.delete(reject)) return; // rejected meanwhile by the loss
        if (this.lost) reject(new Error("WebGL context lost while a read was pending"));
        else resolve();
      });
    });
  }

  texelCount(id) {
    const { width, height } = this.textures.get(id);
    return width * height;
  }

  // Resolves once the GPU passed `sync`; rejects (never hangs) if the context is lost meanwhile.
  waitFor(sync) {
    const gl = this.gl;
    gl.flush();
    return new Promise((resolve, reject) => {
      this.pendingReads.add(reject);
      const poll = () => {
        if (this.lost) {
          this.rejectPendingReads();
          return;
        }
        const status = gl.clientWaitSync(sync, 0, 0);
        if (status === gl.WAIT_FAILED) {
          this.pendingReads.delete(reject);
          reject(new Error("WebGL fence wait failed"));
        } else if (status === gl.TIMEOUT_EXPIRED) {
          this.pauser.pause().then(poll);
        } else {
          gl.deleteSync(sync);
          this.pendingReads.delete(reject);
          resolve();
        }
      };
      setTimeout(poll, 0);
    });
  }

  // Runs a step's commands: "ok", "lost", or "wait" when more than `maxPending` fences are
  // unpassed (drain then applies the back-pressure). Synchronous: a step that need not wait
  // costs no task switch, which an awaited promise does (~0.3 ms of a small model's step).
  step(payloadJson, staging, maxPending) {
    if (this.run(payloadJson, staging) === "lost") return "lost";
    const gl = this.gl;
    while (this.fences.length > maxPending && gl.clientWaitSync(this.fences[0], 0, 0) !== gl.TIMEOUT_EXPIRED) {
      gl.deleteSync(this.fences.shift()); // passed (or failed: waiting on it would not help)
    }
    return this.fences.length > maxPending ? "wait" : "ok";
  }

  // Applies the back-pressure without reading data: waits until at most `maxPending` fences
  // are unpassed.
  async drain(maxPending) {
    while (this.fences.length > maxPending) await this.waitFor(this.fences.shift());
    return "ok";
  }

  // Fault injection (pib.debug.lose_device): makes the browser really drop this context and,
  // when restoreAfterMs >= 0, restore it that much later (restoreContext must run in a later task).
  loseContext(restoreAfterMs) {
    const ext = this.ext.loseContext;
    if (!ext) throw new Error("WEBGL_lose_context is not available");
    ext.loseContext();
    if (restoreAfterMs >= 0) setTimeout(() => ext.restoreContext(), restoreAfterMs);
  }

  // Fault injection: loseContext(restoreAfterMs) right after the `after`-th command the next
  // replay runs, in the middle of that replay's one synchronous call.
  loseContextInReplay(after, restoreAfterMs) {
    let left = after;
    this.replayFault = () => {
      if (--left > 0) return;
      this.replayFault = null;
      this.loseContext(restoreAfterMs);
    };
  }

  // Resolves true once webglcontextrestored fired (at once if it already did), false after
  // timeoutMs without it.
  whenRestored(timeoutMs) {
    if (this.restored) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      this.whenRestoredResolve = (value) => {
        clearTimeout(timer);
        resolve(value);
      };
    });
  }

  // Stops listening on the canvas: a restored canvas passes to the engine recovery builds on it.
  detach() {
    this.canvas.removeEventListener("webglcontextlost", this.lostListener);
    this.canvas.removeEventListener("webglcontextrestored", this.restoredListener);
    this.onLost = null;
    this.whenRestoredResolve = null;
  }
}
