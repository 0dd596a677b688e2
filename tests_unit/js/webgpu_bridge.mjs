// Runs webgpu/bridge.js's Engine on a fake GPUDevice that logs what it is asked to do, so that a
// unit test can check bridge.js reads Python's command words as commands.py wrote them.
// Usage: node webgpu_bridge.mjs <bridge.js> <input.json>, input {protocol, pipelines, labels,
// recordings, flushes}: the start-up protocol, pipelines and labels to define, recordings to
// keep ([id, words]), then [words, blob bytes] per flush.
// Prints {info, log}: info() as the engine reports it, and [call, ...arguments] with buffers as
// "buffer<n>" in creation order and pipelines by label.
import { readFile } from "node:fs/promises";

const [bridgePath, inputPath] = process.argv.slice(2);
const source = await readFile(bridgePath, "utf8");
const input = JSON.parse(await readFile(inputPath, "utf8"));
const log = [];
let buffers = 0;

globalThis.GPUBufferUsage = { MAP_READ: 1, COPY_SRC: 4, COPY_DST: 8, UNIFORM: 64, STORAGE: 128, QUERY_RESOLVE: 512 };
globalThis.GPUMapMode = { READ: 1 };

const name = (thing) => thing?.fake ?? thing;
const device = {
  limits: new Proxy({}, { get: (_, limit) => (typeof limit === "string" ? 1 << 20 : undefined) }),
  features: new Set(),
  lost: new Promise(() => {}),
  addEventListener() {},
  queue: {
    writeBuffer: (buffer, offset, data, dataOffset, size) => log.push(["writeBuffer", name(buffer), offset, dataOffset, size]),
    submit: () => log.push(["submit"]),
    onSubmittedWorkDone: () => Promise.resolve(),
  },
  createBuffer: ({ size, usage }) => {
    const buffer = { fake: `buffer${++buffers}`, destroy: () => log.push(["destroy", buffer.fake]) };
    log.push(["createBuffer", buffer.fake, size, usage]);
    return buffer;
  },
  createShaderModule: ({ label }) => ({ label }),
  createComputePipelineAsync: async ({ label }) => ({ fake: label, getBindGroupLayout: () => ({}) }),
  createComputePipeline: ({ label }) => ({ fake: label, getBindGroupLayout: () => ({}) }),
  createBindGroup: ({ entries }) => ({
    fake: entries.map(({ binding, resource }) => [binding, name(resource.buffer), resource.size ?? null]),
  }),
  createCommandEncoder: () => ({
    beginComputePass: () => ({
      setPipeline: (pipeline) => log.push(["setPipeline", name(pipeline)]),
      setBindGroup: (index, group) => log.push(["setBindGroup", index, group.fake]),
      dispatchWorkgroups: (x, y, z) => log.push(["dispatchWorkgroups", x, y, z]),
      end() {},
    }),
    copyBufferToBuffer: (from, fromOffset, to, toOffset, size) => log.push(["copyBufferToBuffer", name(from), fromOffset, name(to), toOffset, size]),
    finish: () => ({}),
  }),
};
const adapter = {
  limits: device.limits,
  features: new Set(),
  info: { vendor: "fake", architecture: "fake", description: "fake" },
  requestDevice: async () => device,
};
globalThis.navigator = { gpu: { requestAdapter: async () => adapter }, hardwareConcurrency: 2 };

const bridge = await import("data:text/javascript," + encodeURIComponent(source));
const engine = await bridge.createEngine(() => {}, JSON.stringify(input.protocol));
for (const [id, label] of input.pipelines) engine.definePipeline(id, label, "", false);
await Promise.all(input.pipelines.map(([id]) => engine.compile(engine.pipelines.get(id))));
for (const [id, label] of input.labels) engine.defineLabel(id, label);
const view = (array) => ({ getBuffer: () => ({ data: array, release() {} }) });
for (const [id, words] of input.recordings) engine.record(id, view(Int32Array.from(words)));
for (const [words, blob] of input.flushes) engine.flush(view(Int32Array.from(words)), view(Uint8Array.from(blob)), false);
console.log(JSON.stringify({ info: JSON.parse(engine.info()), log }));
