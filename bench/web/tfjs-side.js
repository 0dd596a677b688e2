// Their side: each workload built in TensorFlow.js 4.22.0 (global `tf`) and timed step by step.
// The training step is TF.js's fastest idiomatic loop, optimizer.minimize inside tf.tidy, because
// model.trainOnBatch reads the loss back every step and could not be measured unsynced.

tf.wasm.setWasmPaths("/vendor/@tensorflow/tfjs-backend-wasm/dist/");

// A small seeded generator (mulberry32): same inputs on every run, no dependency.
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

function uniform(shape, seed, low = -1) {
  const next = random(seed);
  const values = new Float32Array(shape.reduce((a, b) => a * b, 1));
  for (let i = 0; i < values.length; i++) values[i] = low + next() * (1 - low);
  return tf.tensor(values, shape, "float32");
}

function labels(count, classes, seed) {
  const next = random(seed);
  return tf.tensor1d(Array.from({ length: count }, () => Math.floor(next() * classes)), "int32");
}

function buildModel(spec) {
  const model = tf.sequential();
  spec.layers.forEach((layer, index) => {
    const first = index === 0 ? { inputShape: spec.input_shape } : {};
    if (layer.type === "dense") {
      model.add(tf.layers.dense({ units: layer.units, activation: layer.activation, ...first }));
    } else if (layer.type === "conv2d") {
      model.add(tf.layers.conv2d({ filters: layer.filters, kernelSize: layer.kernel, padding: layer.padding, activation: layer.activation, ...first }));
    } else if (layer.type === "maxpool") {
      model.add(tf.layers.maxPooling2d({ poolSize: layer.size }));
    } else if (layer.type === "flatten") {
      model.add(tf.layers.flatten(first));
    } else {
      throw new Error(`unknown layer type ${layer.type}`);
    }
  });
  return model;
}

function xorData() {
  return { x: tf.tensor2d([[0, 0], [0, 1], [1, 0], [1, 1]]), y: tf.tensor2d([[0], [1], [1], [0]]) };
}

// A pretrained graph model read from the URL our side reads (the dev server's /models/), run to
// the named tensor; execute, not executeAsync: the hand model has no control flow.
async function buildGraphWorkload(spec) {
  const model = await tf.loadGraphModel(spec.model_url);
  const x = uniform([spec.batch, ...spec.input_shape], spec.seed, 0);
  return {
    step: () => model.execute(x, spec.output),
    dispose: () => { x.dispose(); model.dispose(); },
  };
}

// One workload, built: `step()` queues one step and returns the tensor whose read-back syncs it.
async function buildWorkload(spec) {
  if (spec.kind === "graph") return buildGraphWorkload(spec);
  if (spec.kind === "matmul") {
    const n = spec.matmul_n;
    const a = uniform([n, n], spec.seed);
    const b = uniform([n, n], spec.seed + 1);
    return { step: () => tf.matMul(a, b), dispose: () => tf.dispose([a, b]) };
  }
  const model = buildModel(spec);
  const shape = [spec.batch, ...spec.input_shape];
  if (spec.kind === "infer") {
    const x = uniform(shape, spec.seed);
    return {
      step: () => tf.tidy(() => model.predict(x).argMax(-1)),
      dispose: () => { x.dispose(); model.dispose(); },
    };
  }
  const { x, y } = spec.loss === "mse" ? xorData() : { x: uniform(shape, spec.seed), y: tf.oneHot(labels(spec.batch, spec.classes, spec.seed + 1), spec.classes) };
  const { name, learning_rate: rate } = spec.optimizer;
  const optimizer = name === "adam" ? tf.train.adam(rate) : tf.train.sgd(rate);
  const variables = model.trainableWeights.map((weight) => weight.read());
  const loss = () => {
    const out = model.apply(x, { training: true });
    return spec.loss === "mse" ? tf.losses.meanSquaredError(y, out) : tf.losses.softmaxCrossEntropy(y, out);
  };
  return {
    step: () => tf.tidy(() => optimizer.minimize(loss, true, variables)),
    dispose: () => { tf.dispose([x, y]); optimizer.dispose(); model.dispose(); },
  };
}

export class TfjsSide {
  constructor() {
    this.workload = null;
  }

  info() {
    return { version: tf.version.tfjs, backend: tf.getBackend() };
  }

  // Start-up: setBackend + ready; false from setBackend means this backend cannot run here.
  async start({ backend }) {
    const started = performance.now();
    let ok = false;
    let error = null;
    try {
      ok = await tf.setBackend(backend);
      await tf.ready();
    } catch (caught) {
      error = caught.message ?? String(caught);
    }
    if (!ok || tf.getBackend() !== backend) {
      return { ok: false, error: error ?? `tf.setBackend("${backend}") failed (now ${tf.getBackend()})` };
    }
    return { ok: true, ms: performance.now() - started, backend, flags: tf.env().getFlags() };
  }

  async setup({ spec }) {
    this.teardown();
    this.workload = await buildWorkload(spec);
    const how = {
      train: "optimizer.minimize(loss, true) in tf.tidy; sync = await cost.data()",
      infer: "model.predict(x).argMax(-1) in tf.tidy; await .data()",
      matmul: "tf.matMul(a, b); sync = await product.data()",
      graph: "tf.loadGraphModel(url).execute(x, embedding); await .data()",
    };
    return { ok: true, how: how[spec.kind] };
  }

  // `steps` steps, reading the result back after every `sync_every` of them; one sample (ms per
  // step) per synced block. Stops before a block once `budget_ms` is spent.
  async run({ steps, sync_every: syncEvery, budget_ms: budgetMs }) {
    const samples = [];
    const started = performance.now();
    for (let done = 0; done < steps; ) {
      if (performance.now() - started > budgetMs) break;
      const block = Math.min(syncEvery, steps - done);
      const blockStart = performance.now();
      let last = null;
      for (let i = 0; i < block; i++) {
        last?.dispose();
        last = this.workload.step();
      }
      await last.data();
      last.dispose();
      samples.push((performance.now() - blockStart) / block);
      done += block;
    }
    return { samples };
  }

  // Time to the first finished training step on a fresh model: build, compile shaders, step, sync.
  async firstStep({ spec }) {
    const started = performance.now();
    const workload = await buildWorkload(spec);
    const result = workload.step();
    await result.data();
    const ms = performance.now() - started;
    result.dispose();
    workload.dispose();
    return { ms };
  }

  // tf.profile per kernel, in the shape of pib.profile so one table renders both.
  async profile() {
    const wallStart = performance.now();
    const info = await tf.profile(async () => {
      const result = this.workload.step();
      await result.data();
      result.dispose();
    });
    const kernels = info.kernels.map((kernel) => ({
      name: kernel.name,
      ms: typeof kernel.kernelTimeMs === "number" ? kernel.kernelTimeMs : 0,
    }));
    const timed = info.kernels.some((kernel) => typeof kernel.kernelTimeMs === "number");
    return {
      backend: tf.getBackend(),
      kernels,
      wall_ms: performance.now() - wallStart,
      note: timed ? null : "this TF.js backend reports no kernel timer here",
    };
  }

  teardown() {
    this.workload?.dispose();
    this.workload = null;
    return { ok: true, tensors: tf.memory().numTensors };
  }
}
