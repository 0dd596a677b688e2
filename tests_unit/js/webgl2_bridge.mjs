// Runs webgl2/bridge.js's Engine on a fake WebGL2 context that logs every GL call it is asked
// for, so that a unit test can check bridge.js reads Python's commands as Python wrote them.
// Usage: node webgl2_bridge.mjs <bridge.js> <input.json>, input {protocol, programs, payloads}:
// the start-up protocol, sources to compile, then [commands JSON, staging floats] per run.
// Prints the log: [GL function, ...arguments], textures as "texture<n>" in creation order,
// uniform locations by name, typed arrays as plain arrays.
import { readFile } from "node:fs/promises";

const [bridgePath, inputPath] = process.argv.slice(2);
const source = await readFile(bridgePath, "utf8");
const input = JSON.parse(await readFile(inputPath, "utf8"));
const log = [];
let textures = 0;

const UNIFORM_TYPES = { float: "FLOAT", int: "INT", ivec2: "INT_VEC2", ivec3: "INT_VEC3", ivec4: "INT_VEC4", sampler2D: "SAMPLER_2D" };
const PARAMETERS = { MAX_TEXTURE_SIZE: 4096, MAX_TEXTURE_IMAGE_UNITS: 16, MAX_DRAW_BUFFERS: 8, MAX_COLOR_ATTACHMENTS: 8 };
// Enums bridge.js adds to are numbers, as in WebGL; every other enum stands for its own name.
const NUMERIC_ENUMS = { TEXTURE0: 0x84c0, COLOR_ATTACHMENT0: 0x8ce0 };

// The uniforms a fragment shader declares, as a real compiler lists them (arrays as "name[0]").
function declaredUniforms(text) {
  const found = [];
  for (const [, type, name, array] of text.matchAll(/^\s*uniform\s+(?:highp\s+)?(\w+)\s+(\w+)(\[\d+\])?\s*;/gm)) {
    found.push({ name: array ? `${name}[0]` : name, type: UNIFORM_TYPES[type] });
  }
  return found;
}

function describe(value) {
  if (value && value.texture) return `texture${value.texture}`;
  if (value && value.uniform) return value.uniform;
  if (ArrayBuffer.isView(value)) return Array.from(value);
  if (Array.isArray(value)) return value.map(describe);
  if (value && typeof value === "object") return "object";
  return value;
}

const calls = {
  getParameter: (name) => PARAMETERS[name] ?? 0,
  getExtension: (name) => (name === "EXT_color_buffer_float" ? {} : null),
  getShaderPrecisionFormat: () => ({ precision: 23, rangeMax: 30 }),
  createShader: (type) => ({ type, text: "" }),
  shaderSource: (shader, text) => { shader.text = text; },
  createProgram: () => ({ shaders: [] }),
  attachShader: (program, shader) => { program.shaders.push(shader); },
  getProgramParameter: (program, name) => {
    if (name === "ACTIVE_UNIFORMS") return program.shaders.flatMap((s) => declaredUniforms(s.text)).length;
    return true; // LINK_STATUS, COMPLETION_STATUS_KHR
  },
  getActiveUniform: (program, i) => program.shaders.flatMap((s) => declaredUniforms(s.text))[i],
  getUniformLocation: (program, name) => ({ uniform: name.replace(/\[0\]$/, "") }),
  createTexture: () => ({ texture: ++textures }),
  isContextLost: () => false,
};
const gl = new Proxy(calls, {
  get(target, name) {
    if (typeof name !== "string") return undefined;
    if (name in NUMERIC_ENUMS) return NUMERIC_ENUMS[name];
    if (/^[A-Z][A-Z0-9_]*$/.test(name)) return name;
    return (...args) => {
      log.push([name, ...args.map(describe)]);
      return name in target ? target[name](...args) : {};
    };
  },
});
globalThis.OffscreenCanvas = class {
  getContext() { return gl; }
  addEventListener() {}
};

const bridge = await import("data:text/javascript," + encodeURIComponent(source));
const engine = bridge.createEngine(JSON.stringify(input.protocol));
await engine.compile(JSON.stringify(input.programs ?? {}));
log.length = 0; // set-up and compiles are not what the test looks at
for (const [payload, staging] of input.payloads) {
  const data = Float32Array.from(staging);
  engine.run(payload, { getBuffer: () => ({ data, release() {} }) });
}
console.log(JSON.stringify(log));
// The engine's MessageChannel (its Pauser's next-task wake-ups) keeps Node's event loop alive.
process.exit(0);
