// Every call the gesture trainer makes into the engine, in one place: the page hands pixels over
// as ImageBitmaps transferred (not copied) to the engine's Worker, which puts them straight into
// GPU memory, and runs web/py/gesture_trainer.py's functions there.
import { SAMPLE_SIZE, stackSamples } from "./frames.js";

// Stored samples travel this many to a bitmap, stacked top to bottom: 32 x 64 px = 2048 px tall,
// within the smallest texture side WebGL2 allows, and a few hundred samples make a few bitmaps.
const SAMPLES_PER_BITMAP = 32;

let sequence = 0;

function key(kind) {
  sequence += 1;
  return `gesture-trainer/${kind}/${sequence}`;
}

export class TrainerEngine {
  constructor(pib) {
    this.pib = pib;
    this.loaded = null;
  }

  // Loads gesture_trainer.py into the worker's interpreter as a module, once.
  async load() {
    this.loaded ??= (async () => {
      await this.pib.ready;
      const response = await fetch("/py/gesture_trainer.py");
      if (!response.ok) throw new Error(`/py/gesture_trainer.py: HTTP ${response.status}`);
      const source = await response.text();
      await this.pib.runPython(
        "import sys, types\n" +
          "gesture_trainer = types.ModuleType('gesture_trainer')\n" +
          "sys.modules['gesture_trainer'] = gesture_trainer\n" +
          `exec(compile(${JSON.stringify(source)}, 'gesture_trainer.py', 'exec'), gesture_trainer.__dict__)`,
      );
    })();
    return this.loaded;
  }

  // Calls gesture_trainer.<name>(**args); args travel as one JSON text, read by json.loads.
  async call(name, args = {}) {
    await this.load();
    const text = JSON.stringify(JSON.stringify(args)); // a JSON string literal reads the same in Python
    return this.pib.runPython(
      `import json\n_result = gesture_trainer.${name}(**json.loads(${text}))\n` +
        "await _result if hasattr(_result, '__await__') else _result",
    );
  }

  // samples: SAMPLE_SIZE x SAMPLE_SIZE RGBA arrays, sent as bitmaps of up to SAMPLES_PER_BITMAP.
  async train({ samples, labels, classNames, size, epochs, learningRate, batchSize, permit = null }) {
    await this.load();
    const names = [];
    for (let start = 0; start < samples.length; start += SAMPLES_PER_BITMAP) {
      const name = key("samples");
      const stack = stackSamples(samples.slice(start, start + SAMPLES_PER_BITMAP), SAMPLE_SIZE);
      this.pib.putBitmap(name, await createImageBitmap(stack));
      names.push(name);
    }
    return this.call("train", {
      permit,
      names,
      labels,
      class_names: classNames,
      size,
      epochs,
      learning_rate: learningRate,
      batch_size: batchSize,
    });
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

  // The top classes of the video's current frame: {top: [{index, score, label}], ms}.
  async predict(video) {
    await this.load();
    const name = key("frame"); // its own name: calls in flight never take each other's frame
    this.pib.putBitmap(name, await createImageBitmap(video));
    return this.call("predict", { name });
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

  // Loads a model file; resolves to {labels, size, preprocessing}.
  loadFile(bytes) {
    const name = key("model");
    const copy = new Uint8Array(bytes);
    this.pib.put(name, copy, [copy.buffer]);
    return this.call("load", { key: name });
  }

  status() {
    return this.call("status");
  }
}
