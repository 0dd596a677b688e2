// The reference runtime for the graph-model importer's CPython tests: TensorFlow.js 4.22 (pure
// JS, cpu backend) in Node runs a graph model on given inputs and prints the named tensors.
//   node tfjs_graph_model.mjs <tfjs dist/tf.node.js> <request.json>
// request: {"model": path of model.json, "shard_dir": folder of its shards,
//           "input": path of raw little-endian data, "shape": [...], "dtype": "float32"|"int32",
//           "outputs": ["node:0", ...]}
// stdout: {"<name>": {"shape": [...], "values": [...]}}
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [tfPath, requestPath] = process.argv.slice(2);
const tf = createRequire(import.meta.url)(tfPath);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const model = JSON.parse(readFileSync(request.model, "utf8"));

const weightSpecs = model.weightsManifest.flatMap((group) => group.weights);
const shards = model.weightsManifest.flatMap((group) =>
  group.paths.map((path) => readFileSync(join(request.shard_dir, path))),
);
const joined = Buffer.concat(shards);
const weightData = joined.buffer.slice(joined.byteOffset, joined.byteOffset + joined.byteLength);
const handler = {
  load: async () => ({
    modelTopology: model.modelTopology,
    format: model.format,
    generatedBy: model.generatedBy,
    convertedBy: model.convertedBy,
    signature: model.signature,
    userDefinedMetadata: model.userDefinedMetadata,
    weightSpecs,
    weightData,
  }),
};

await tf.setBackend("cpu");
const graph = await tf.loadGraphModel(handler);
const raw = readFileSync(request.input);
const bytes = raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength);
const data = request.dtype === "int32" ? new Int32Array(bytes) : new Float32Array(bytes);
const input = tf.tensor(data, request.shape, request.dtype);
const results = graph.execute(input, request.outputs);
const list = Array.isArray(results) ? results : [results];
const answer = {};
request.outputs.forEach((name, i) => {
  answer[name] = { shape: list[i].shape, values: Array.from(list[i].dataSync()) };
});
process.stdout.write(JSON.stringify(answer));
