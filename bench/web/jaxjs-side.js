// The jax-js side: each workload written in jax-js (npm @jax-js/jax, served at /vendor/) as its own
// examples write models: parameters in a pytree, the whole training step (valueAndGrad of the loss
// and an Adam update written with jax-js ops, since its optax package is not on the registry) in
// one `jit`, so it is traced once and runs as compiled, fused kernels. jax-js has no layers API, so
// the layer specs are turned into functions here. Convolutions are NCHW, jax-js's layout; the
// inputs are random, so only the layout of the same numbers differs from the other sides.
import * as jax from "/vendor/@jax-js/jax/dist/index.js";

const { jit, lax, nn, numpy: np, tree, valueAndGrad } = jax;

// Adam's constants, as TF.js's tf.train.adam uses them.
const BETA1 = 0.9;
const BETA2 = 0.999;
const EPSILON = 1e-7;

// The same seeded generator as the TF.js side (mulberry32): same kind of inputs, no dependency.
function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function uniform(shape, seed, scale = 1) {
  const next = random(seed);
  const values = new Float32Array(shape.reduce((a, b) => a * b, 1));
  for (let i = 0; i < values.length; i++) values[i] = (next() * 2 - 1) * scale;
  return np.array(values, { shape });
}

// Glorot-uniform weights (TF.js's default), zero biases.
function glorot(shape, fanIn, fanOut, seed) {
  return uniform(shape, seed, Math.sqrt(6 / (fanIn + fanOut)));
}

const ACTIVATIONS = { relu: nn.relu, sigmoid: nn.sigmoid, linear: (x) => x };

// The layer specs as parameters plus a forward function of (params, x); x is NCHW for images.
function buildModel(spec) {
  const image = spec.input_shape.length === 3;
  let shape = image ? [spec.input_shape[2], spec.input_shape[0], spec.input_shape[1]] : [...spec.input_shape];
  const params = [];
  const forwards = [];
  spec.layers.forEach((layer, index) => {
    const seed = spec.seed * 100 + index;
    if (layer.type === "dense") {
      const [inputs] = shape;
      params.push({ w: glorot([inputs, layer.units], inputs, layer.units, seed), b: np.zeros([layer.units]) });
      const at = params.length - 1;
      const activation = ACTIVATIONS[layer.activation];
      forwards.push((p, x) => activation(np.dot(x, p[at].w).add(p[at].b)));
      shape = [layer.units];
    } else if (layer.type === "conv2d") {
      const [channels, height, width] = shape;
      const k = layer.kernel;
      const w = glorot([layer.filters, channels, k, k], channels * k * k, layer.filters * k * k, seed);
      params.push({ w, b: np.zeros([layer.filters, 1, 1]) });
      const at = params.length - 1;
      const activation = ACTIVATIONS[layer.activation];
      const padding = layer.padding === "same" ? "SAME" : "VALID";
      forwards.push((p, x) => activation(lax.conv(x, p[at].w, [1, 1], padding).add(p[at].b)));
      shape = padding === "SAME" ? [layer.filters, height, width] : [layer.filters, height - k + 1, width - k + 1];
    } else if (layer.type === "maxpool") {
      const s = layer.size;
      forwards.push((_, x) => lax.reduceWindow(x, np.max, [s, s], [s, s]));
      shape = [shape[0], Math.floor(shape[1] / s), Math.floor(shape[2] / s)];
    } else if (layer.type === "flatten") {
      forwards.push((_, x) => x.reshape([x.shape[0], -1]));
      shape = [shape.reduce((a, b) => a * b, 1)];
    } else {
      throw new Error(`unknown layer type ${layer.type}`);
    }
  });
  // Every layer but the last reads the parameters through a new reference: jax-js arrays are
  // consumed by the operation they are passed to.
  const forward = (p, x) => {
    let out = x;
    forwards.forEach((f, i) => {
      out = f(i === forwards.length - 1 ? p : tree.ref(p), out);
    });
    return out;
  };
  const [height, width, channels] = spec.input_shape;
  const inputShape = image ? [spec.batch, channels, height, width] : [spec.batch, ...spec.input_shape];
  return { params, forward, inputShape };
}

function lossFunction(spec, forward) {
  if (spec.loss === "mse") {
    return (p, x, y) => np.square(np.subtract(forward(p, x), y)).mean();
  }
  // Softmax cross-entropy on logits against one-hot labels, the batch mean.
  return (p, x, y) => nn.logSoftmax(forward(p, x), -1).mul(y).sum().mul(-1 / spec.batch);
}

// One Adam (or SGD) update of every parameter; `rate` is the step's bias-corrected learning rate,
// passed in as an argument so one compiled step serves every step.
function update(spec, params, grads, state, rate) {
  const leaves = tree.leaves(params);
  const gradLeaves = tree.leaves(grads);
  const def = tree.structure(params);
  if (spec.optimizer.name !== "adam") {
    const next = leaves.map((p, i) => np.subtract(p, gradLeaves[i].mul(i === leaves.length - 1 ? rate : rate.ref)));
    return [tree.unflatten(def, next), state];
  }
  const m = tree.leaves(state.m);
  const v = tree.leaves(state.v);
  const out = leaves.map((p, i) => {
    const g = gradLeaves[i];
    const m2 = m[i].mul(BETA1).add(g.ref.mul(1 - BETA1));
    const v2 = v[i].mul(BETA2).add(np.square(g).mul(1 - BETA2));
    const r = i === leaves.length - 1 ? rate : rate.ref;
    const p2 = np.subtract(p, np.divide(m2.ref.mul(r), np.sqrt(v2.ref).add(EPSILON)));
    return [p2, m2, v2];
  });
  return [
    tree.unflatten(def, out.map((o) => o[0])),
    { m: tree.unflatten(def, out.map((o) => o[1])), v: tree.unflatten(def, out.map((o) => o[2])) },
  ];
}

function xorData() {
  return { x: np.array([[0, 0], [0, 1], [1, 0], [1, 1]]), y: np.array([[0], [1], [1], [0]]) };
}

function oneHotLabels(count, classes, seed) {
  const next = random(seed);
  const values = new Float32Array(count * classes);
  for (let i = 0; i < count; i++) values[i * classes + Math.floor(next() * classes)] = 1;
  return np.array(values, { shape: [count, classes] });
}

// One workload, built: `step()` queues one step and returns an array whose read-back syncs it.
function buildWorkload(spec) {
  if (spec.kind === "matmul") {
    const n = spec.matmul_n;
    const a = uniform([n, n], spec.seed);
    const b = uniform([n, n], spec.seed + 1);
    const product = jit((x, y) => np.matmul(x, y));
    return { step: () => product(a.ref, b.ref), dispose: () => { a.dispose(); b.dispose(); product.dispose(); } };
  }
  const model = buildModel(spec);
  if (spec.kind === "infer") {
    const x = uniform(model.inputShape, spec.seed);
    const predict = jit((p, input) => np.argmax(model.forward(p, input), -1));
    return {
      step: () => predict(tree.ref(model.params), x.ref),
      dispose: () => { x.dispose(); tree.dispose(model.params); predict.dispose(); },
    };
  }
  const { x, y } = spec.loss === "mse" ? xorData() : { x: uniform(model.inputShape, spec.seed), y: oneHotLabels(spec.batch, spec.classes, spec.seed + 1) };
  const loss = lossFunction(spec, model.forward);
  const trainStep = jit((p, state, input, target, rate) => {
    const [value, grads] = valueAndGrad(loss)(tree.ref(p), input, target);
    const [next, nextState] = update(spec, p, grads, state, rate);
    return [value, next, nextState];
  });
  let params = model.params;
  let state = spec.optimizer.name === "adam" ? { m: tree.map((p) => np.zerosLike(p.ref), params), v: tree.map((p) => np.zerosLike(p.ref), params) } : {};
  let t = 0;
  const lr = spec.optimizer.learning_rate;
  return {
    step: () => {
      t += 1;
      const rate = spec.optimizer.name === "adam" ? (lr * Math.sqrt(1 - BETA2 ** t)) / (1 - BETA1 ** t) : lr;
      const [value, next, nextState] = trainStep(params, state, x.ref, y.ref, np.array(rate));
      params = next;
      state = nextState;
      return value;
    },
    dispose: () => { tree.dispose([params, state, x, y]); trainStep.dispose(); },
  };
}

// What jax-js's kernel times mean here. On wasm in a cross-origin isolated page, jax-js runs its
// kernels on a pool of hardwareConcurrency Web Workers sharing the Wasm memory, and the trace
// times only their dispatch from this thread.
function profileNote(traced) {
  if (!traced) return "jax-js traced no kernel times here (no WebGPU timestamp-query, or no trace on this backend)";
  if (jax.defaultDevice() === "wasm" && crossOriginIsolated) {
    return `kernels run on jax-js's Wasm worker pool (${navigator.hardwareConcurrency} threads): times are their dispatch only`;
  }
  return null;
}

export class JaxjsSide {
  constructor() {
    this.workload = null;
    this.version = null;
  }

  async info() {
    if (!this.version) this.version = (await (await fetch("/vendor/@jax-js/jax/package.json")).json()).version;
    return { version: this.version, backend: jax.defaultDevice() };
  }

  // Start-up: init(backend) (the Wasm module, or the WebGPU adapter and device) and defaultDevice.
  async start({ backend }) {
    const started = performance.now();
    try {
      const available = await jax.init(backend);
      if (!available.includes(backend)) return { ok: false, error: `jax-js init("${backend}"): not available here (got ${available.join(", ") || "none"})` };
      jax.defaultDevice(backend);
    } catch (caught) {
      return { ok: false, error: caught.message ?? String(caught) };
    }
    return { ok: true, ms: performance.now() - started, backend };
  }

  async setup({ spec }) {
    this.teardown();
    this.workload = buildWorkload(spec);
    const how = {
      train: "jit(valueAndGrad(loss) + Adam in jax-js ops), one call a step; sync = await loss.data()",
      infer: "jit(argmax(forward(params, x))); await .data()",
      matmul: "jit(np.matmul)(a, b); sync = await product.data()",
    };
    return { ok: true, how: how[spec.kind] };
  }

  // `steps` steps, reading the result back after every `sync_every` of them; one sample (ms per
  // step) per synced block. jax-js is lazy and an array dropped unread may never be computed, so
  // the block's results are kept until all of them are ready, then dropped.
  async run({ steps, sync_every: syncEvery, budget_ms: budgetMs }) {
    const samples = [];
    const started = performance.now();
    for (let done = 0; done < steps; ) {
      if (performance.now() - started > budgetMs) break;
      const block = Math.min(syncEvery, steps - done);
      const blockStart = performance.now();
      const results = [];
      for (let i = 0; i < block; i++) results.push(this.workload.step());
      const last = results.pop();
      await jax.blockUntilReady(results);
      await last.data();
      tree.dispose(results);
      samples.push((performance.now() - blockStart) / block);
      done += block;
    }
    return { samples };
  }

  // Time to the first finished training step on a fresh model: build, trace + compile, step, sync.
  async firstStep({ spec }) {
    const started = performance.now();
    const workload = buildWorkload(spec);
    await workload.step().data();
    const ms = performance.now() - started;
    workload.dispose();
    return { ms };
  }

  // jax-js's profiler: while tracing, each kernel dispatch becomes a performance.measure entry
  // (WebGPU: timestamp queries where the device has them; Wasm: the dispatch's wall time).
  // per_step: an untraced step's wall time and the traced step's kernel dispatches.
  async profile() {
    const isJax = (entry) => entry.detail?.devtools?.trackGroup === "JAX Profiler";
    const stepStart = performance.now();
    await this.workload.step().data();
    const perStep = { wall_ms: performance.now() - stepStart };
    const before = new Set(performance.getEntriesByType("measure").filter(isJax));
    const wallStart = performance.now();
    jax.profiler.startTrace();
    try {
      await this.workload.step().data();
    } finally {
      jax.profiler.stopTrace();
    }
    const wall = performance.now() - wallStart;
    await new Promise((resolve) => setTimeout(resolve, 200)); // WebGPU timestamps map back later
    const entries = performance.getEntriesByType("measure").filter((e) => isJax(e) && !before.has(e));
    const kernels = entries.map((entry) => {
      const props = Object.fromEntries(entry.detail.devtools.properties ?? []);
      const name = props.reduction ? `${entry.name} reduce ${props.reduction}` : entry.name;
      return { name, ms: entry.duration };
    });
    return {
      backend: jax.defaultDevice(),
      kernels,
      wall_ms: wall,
      per_step: { ...perStep, dispatches: kernels.length },
      note: profileNote(kernels.length),
    };
  }

  teardown() {
    this.workload?.dispose();
    this.workload = null;
    return { ok: true };
  }
}
