// Every call the gesture trainer makes into the engine, in one place: the page hands pixels over
// as ImageBitmaps transferred (not copied) to the engine's Worker, which puts them straight into
// GPU memory, and runs web/py/gesture_trainer.py's functions there (and, for transfer learning on
// a pretrained backbone, web/py/gesture_transfer.py's).
import { SAMPLE_SIZE, stackSamples } from "./frames.js";

let sequence = 0;
// The worker's modules, in load order (gesture_transfer imports gesture_trainer).
const MODULES = ["gesture_trainer", "gesture_transfer"];

function key(kind) {
  sequence += 1;
  return `gesture-trainer/${kind}/${sequence}`;
}

export class TrainerEngine {
  constructor(pib) {
    this.pib = pib;
    this.loaded = null;
    this.transfer = false; // whether the model in the worker is a head on the backbone
  }

  // Loads web/py's modules into the worker's interpreter, once.
  async load() {
    this.loaded ??= (async () => {
      await this.pib.ready;
      for (const module of MODULES) {
        const response = await fetch(`/py/${module}.py`);
        if (!response.ok) throw new Error(`/py/${module}.py: HTTP ${response.status}`);
        const source = await response.text();
        await this.pib.runPython(
          "import sys, types\n" +
            `${module} = types.ModuleType('${module}')\n` +
            `sys.modules['${module}'] = ${module}\n` +
            `exec(compile(${JSON.stringify(source)}, '${module}.py', 'exec'), ${module}.__dict__)`,
        );
      }
    })();
    return this.loaded;
  }

  // Calls gesture_trainer.<name>(**args) (a name "module.function" another module's);
  // args travel as one JSON text, read by json.loads.
  async call(name, args = {}) {
    await this.load();
    const qualified = name.includes(".") ? name : `gesture_trainer.${name}`;
    const text = JSON.stringify(JSON.stringify(args)); // a JSON string literal reads the same in Python
    return this.pib.runPython(
      `import json\n_result = ${qualified}(**json.loads(${text}))\n` +
        "await _result if hasattr(_result, '__await__') else _result",
    );
  }

  // The backbone transfer mode embeds with: {name, version, sha256, output, input_shape, copies}.
  backboneInfo() {
    return this.call("gesture_transfer.info");
  }

  // A sample's embeddings (its own, then its augmented views, seeded by `seed`) from `bitmap`
  // (transferred to the worker; `mirror`: flip it first): {embedding: Float32Array, rows, ms}.
  async embed(bitmap, mirror, seed) {
    const name = key("sample");
    this.pib.putBitmap(name, bitmap);
    const result = await this.call("gesture_transfer.embed", { name, mirror, seed });
    const bytes = Uint8Array.from(atob(result.embedding), (c) => c.charCodeAt(0));
    return { ...result, embedding: new Float32Array(bytes.buffer) };
  }

  // Trains the head on cached embeddings (Float32Array, samples x rows x features, labels[i]
  // sample i's class); resolves to the same result as train().
  async trainHead({ embeddings, labels, classNames, epochs, learningRate, batchSize, permit = null }) {
    await this.load();
    const name = key("embeddings");
    const bytes = new Uint8Array(embeddings.buffer, embeddings.byteOffset, embeddings.byteLength);
    this.pib.put(name, bytes, [bytes.buffer]);
    const result = await this.call("gesture_transfer.train_head", {
      key: name,
      labels,
      class_names: classNames,
      epochs,
      learning_rate: learningRate,
      batch_size: batchSize,
      permit,
    });
    this.transfer = true;
    return result;
  }

  // What trainHead() with these settings asks of fit (as trainingConfig).
  headTrainingConfig({ labels, classNames, epochs, batchSize }) {
    return this.call("gesture_transfer.training_config", {
      labels,
      class_names: classNames,
      epochs,
      batch_size: batchSize,
    });
  }

  // Trains on the samples refs ([class id, seq] each, of class labels[i]); read(classId, seqs)
  // gives their pixels. The worker asks for each batch as training reaches it (a
  // "samples-wanted" event: parts of up to 32 positions in refs, each with a name); each part
  // goes back as one bitmap of its samples stacked top to bottom.
  async train({ refs, read, labels, classNames, size, epochs, learningRate, batchSize, permit = null }) {
    await this.load();
    const serve = async (part) => {
      const byClass = new Map();
      for (const index of part.indices) {
        const [classId, seq] = refs[index];
        if (!byClass.has(classId)) byClass.set(classId, []);
        byClass.get(classId).push(seq);
      }
      const pixels = new Map();
      for (const [classId, seqs] of byClass) {
        const rows = await read(classId, seqs);
        seqs.forEach((seq, i) => pixels.set(`${classId}/${seq}`, rows[i] ?? new Uint8ClampedArray(SAMPLE_SIZE * SAMPLE_SIZE * 4)));
      }
      const samples = part.indices.map((index) => pixels.get(refs[index].join("/")));
      this.pib.putBitmap(part.name, await createImageBitmap(stackSamples(samples, SAMPLE_SIZE)));
    };
    // Parts are served in the order asked: the worker trains on them in that order.
    let served = Promise.resolve();
    const onWanted = (event) => {
      for (const part of event.detail.parts) {
        // A part that cannot be served is not sent: the worker gives up on it with a clear error.
        served = served.then(() => serve(part)).catch((error) => console.warn(`samples not sent: ${error.message}`));
      }
    };
    this.pib.events.addEventListener("samples-wanted", onWanted);
    try {
      this.transfer = false;
      return await this.call("train", {
        permit,
        labels,
        class_names: classNames,
        size,
        epochs,
        learning_rate: learningRate,
        batch_size: batchSize,
      });
    } finally {
      this.pib.events.removeEventListener("samples-wanted", onWanted);
    }
  }

  // What train() with these settings asks of fit: {model, samples, epochs, batch_size}.
  trainingConfig({ labels, classNames, size, epochs, batchSize }) {
    return this.call("training_config", {
      labels,
      class_names: classNames,
      size,
      epochs,
      batch_size: batchSize,
    });
  }

  stop() {
    return this.call("stop");
  }

  // The top classes of the video's current frame: {top: [{index, score, label}], ms}, and for a
  // head on the hand backbone hand: {score, landmarks: 21 [x, y] in [0, 1] of the guide box}.
  async predict(video) {
    await this.load();
    const name = key("frame"); // its own name: calls in flight never take each other's frame
    this.pib.putBitmap(name, await createImageBitmap(video));
    return this.call(this.transfer ? "gesture_transfer.predict" : "predict", { name });
  }

  // The model file (model_file.py format) as bytes.
  async save() {
    const encoded = await this.call("save");
    return Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
  }

  // The model as a zip of TensorFlow.js Layers files (model.json + weight shard), as bytes.
  async exportTfjs() {
    const encoded = await this.call("export_tfjs");
    return Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
  }

  // Loads a model file; resolves to {labels, size, preprocessing, backbone?} (a head on a
  // backbone gets it from the server; a clear error when it is not there as the file names it).
  async loadFile(bytes) {
    const name = key("model");
    const copy = new Uint8Array(bytes);
    this.pib.put(name, copy, [copy.buffer]);
    const info = await this.call("gesture_transfer.load", { key: name });
    this.transfer = Boolean(info.backbone);
    return info;
  }

  status() {
    return this.call("status");
  }
}
