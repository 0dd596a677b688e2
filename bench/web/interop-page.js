// The interop check page: our engine (worker) beside TF.js (this thread, cpu backend, the exact
// float32 reference). window.interop loads the engine's TF.js export the way a web page would
// (tf.loadLayersModel over HTTP, served from memory) and saves TF.js models for the engine.
import { startEngine } from "/js/pib-client.js";

window.pib = startEngine();

const toBase64 = (buffer) => {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
};
const fromBase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

async function predict(model, x) {
  const input = tf.tensor(x.values, x.shape, "float32");
  const output = model.predict(input);
  const values = Array.from(await output.data());
  tf.dispose([input, output]);
  return values;
}

// tf.loadLayersModel through TF.js's own HTTP loader (model.json, then every shard its manifest
// names, resolved next to it); fetchFunc answers from `files` ({name: text or base64 bytes}).
async function loadFromFiles(files) {
  const fetchFunc = async (url) => {
    const name = new URL(url).pathname.split("/").pop();
    if (!(name in files)) return new Response("missing", { status: 404 });
    const body = name === "model.json" ? files[name] : fromBase64(files[name]);
    return new Response(body, { status: 200 });
  };
  return tf.loadLayersModel(tf.io.http("http://exported.invalid/model/model.json", { fetchFunc }));
}

// A TF.js model of the given kind with every weight drawn from a seeded generator, so batch
// normalization's moving statistics are not the trivial 0 and 1.
function buildTfjsModel(kind) {
  const model = tf.sequential();
  if (kind === "mlp") {
    model.add(tf.layers.dense({ units: 16, activation: "relu", inputShape: [12] }));
    model.add(tf.layers.dropout({ rate: 0.3 }));
    model.add(tf.layers.dense({ units: 8, activation: "tanh" }));
    model.add(tf.layers.dense({ units: 3, activation: "softmax" }));
  } else {
    model.add(tf.layers.conv2d({ filters: 6, kernelSize: 3, padding: "same", activation: "relu", inputShape: [12, 12, 3] }));
    model.add(tf.layers.batchNormalization());
    model.add(tf.layers.maxPooling2d({ poolSize: 2 }));
    model.add(tf.layers.conv2d({ filters: 8, kernelSize: 3, strides: 1, activation: "relu" }));
    model.add(tf.layers.averagePooling2d({ poolSize: 2, padding: "same" }));
    model.add(tf.layers.dropout({ rate: 0.25 }));
    model.add(tf.layers.flatten());
    model.add(tf.layers.dense({ units: 4, activation: "softmax" }));
  }
  let state = 12345;
  const next = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 4294967296);
  model.setWeights(model.weights.map((w) => {
    const low = w.originalName.endsWith("moving_variance") ? 0.5 : -0.5;
    return tf.tensor(Float32Array.from({ length: w.shape.reduce((a, b) => a * b, 1) }, () => low + next()), w.shape);
  }));
  return model;
}

window.interop = {
  async ready() {
    await tf.setBackend("cpu");
    await window.pib.ready;
    return { tfjs: tf.version.tfjs, backend: window.pib.backend };
  },
  async predictExported(files, x) {
    const model = await loadFromFiles(files);
    const values = await predict(model, x);
    model.dispose();
    return values;
  },
  // Builds and saves a TF.js model with a custom IOHandler that captures the artifacts; returns
  // the files as a TF.js page would serve them (model.json + one shard) and its predictions.
  async saveFromTfjs(kind, x) {
    const model = buildTfjsModel(kind);
    let artifacts = null;
    await model.save(tf.io.withSaveHandler(async (saved) => {
      artifacts = saved;
      return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: "JSON" } };
    }));
    const modelJson = {
      modelTopology: artifacts.modelTopology,
      format: artifacts.format,
      generatedBy: artifacts.generatedBy,
      convertedBy: artifacts.convertedBy,
      weightsManifest: [{ paths: ["weights.bin"], weights: artifacts.weightSpecs }],
    };
    const values = await predict(model, x);
    model.dispose();
    return { files: { "model.json": JSON.stringify(modelJson), "weights.bin": toBase64(artifacts.weightData) }, values };
  },
  // A pretrained graph model the server serves (/models/<name>/model.json), run by
  // tf.loadGraphModel on TF.js's cpu backend: the named tensors for x ({base64, shape, dtype},
  // little-endian bytes), as {name: {shape, values}}. TF.js holds a graph to its signature's
  // batch of 1, so a batch runs image by image and the results are stacked.
  async runGraphModel(url, x, outputs) {
    const model = await tf.loadGraphModel(url);
    const bytes = fromBase64(x.base64);
    const data = x.dtype === "int32" ? new Int32Array(bytes.buffer) : new Float32Array(bytes.buffer);
    const input = tf.tensor(data, x.shape, x.dtype);
    const perImage = tf.unstack(input).map((image) => [model.execute(image.expandDims(0), outputs)].flat());
    const answer = {};
    for (const [i, name] of outputs.entries()) {
      const joined = tf.concat(perImage.map((results) => results[i]), 0);
      answer[name] = { shape: joined.shape, values: Array.from(await joined.data()) };
      joined.dispose();
    }
    tf.dispose([input, ...perImage.flat()]);
    model.dispose();
    return answer;
  },
};
