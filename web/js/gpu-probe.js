// What GPU APIs this worker can see, probed rather than assumed; reported on the page and by tests.
// A reason given here is the one text of why an API is missing: the app's status panel shows it
// and pib.capabilities()["selection"]["unavailable"] reports it (py_in_browser/_js.py).

async function probeWebGPU() {
  if (!("gpu" in navigator)) {
    return {
      available: false,
      reason: "navigator.gpu is absent in the engine's worker: this browser gives workers no WebGPU, or has it off",
    };
  }
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return { available: false, reason: "requestAdapter() returned null" };
    const info = adapter.info || {};
    return {
      available: true,
      vendor: info.vendor || "",
      architecture: info.architecture || "",
      device: info.device || "",
      description: info.description || "",
      // A fallback adapter is a software one (Firefox's, whose names above are all blank).
      fallback: Boolean(info.isFallbackAdapter ?? adapter.isFallbackAdapter),
      features: [...adapter.features].sort(),
      max_storage_buffer_binding_size: adapter.limits.maxStorageBufferBindingSize,
      max_compute_workgroups_per_dimension: adapter.limits.maxComputeWorkgroupsPerDimension,
    };
  } catch (error) {
    return { available: false, reason: String(error) };
  }
}

// The webgl2 backend takes over this context (its bridge.js), which draws only into textures: of
// the context's attributes only the GPU it runs on matters, the one the engine asks for.
const ENGINE_CONTEXT = { powerPreference: "high-performance" };

function probeWebGL2() {
  if (typeof OffscreenCanvas === "undefined") return { available: false, reason: "no OffscreenCanvas" };
  const canvas = new OffscreenCanvas(1, 1);
  const gl = canvas.getContext("webgl2", ENGINE_CONTEXT);
  // WebKitGTK's page canvases have WebGL2 while its workers' OffscreenCanvas does not: giving
  // workers WebGL is a WebKit feature (AllowWebGLInWorkers) Safari turns on from 17, WebKitGTK not.
  if (!gl) {
    return {
      available: false,
      reason:
        "getContext('webgl2') returned null in the engine's worker: this browser gives workers no WebGL2 " +
        "(WebKitGTK leaves its AllowWebGLInWorkers feature off; Safari has it from 17), or WebGL is off or blocked",
    };
  }
  const colorBufferFloat = gl.getExtension("EXT_color_buffer_float") !== null;
  const high = gl.getShaderPrecisionFormat(gl.FRAGMENT_SHADER, gl.HIGH_FLOAT);
  // The extension can be advertised yet a float32 target still be incomplete: render-test one.
  const texture = gl.createTexture();
  gl.bindTexture(gl.TEXTURE_2D, texture);
  gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA32F, 1, 1, 0, gl.RGBA, gl.FLOAT, null);
  const framebuffer = gl.createFramebuffer();
  gl.bindFramebuffer(gl.FRAMEBUFFER, framebuffer);
  gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
  const float32Render = gl.checkFramebufferStatus(gl.FRAMEBUFFER) === gl.FRAMEBUFFER_COMPLETE;
  gl.deleteFramebuffer(framebuffer);
  gl.deleteTexture(texture);
  const debug = gl.getExtension("WEBGL_debug_renderer_info");
  const result = {
    available: true,
    renderer: debug ? gl.getParameter(debug.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER),
    max_texture_size: gl.getParameter(gl.MAX_TEXTURE_SIZE),
    ext_color_buffer_float: colorBufferFloat,
    float32_render: colorBufferFloat && float32Render,
    highp: high !== null && high.precision > 0,
  };
  // Kept for the webgl2 backend to take (a context costs 10-40 ms to make); let go once init has
  // chosen (releaseProbedContext).
  self.pibProbedWebGL2 = canvas;
  return result;
}

export async function probeGPU() {
  const environment = { webgpu: await probeWebGPU(), webgl2: probeWebGL2() };
  // What Python's backend availability checks read instead of probing again (py_in_browser/_js.py).
  self.pibGpuEnvironment = environment;
  return environment;
}

// Lets go of the probe's WebGL2 context unless the webgl2 backend took it: the collector frees
// it (a 1x1 canvas whose texture and framebuffer are deleted already; where browsers cap live
// contexts, an unused one is the first they drop). Not WEBGL_lose_context: WebKit then refuses
// the next page's worker a WebGL2 context for about 3 s, so a reload right after ready found no
// WebGL2, and its changed GPU fingerprint (backend-verdicts.js) made init self-test again.
export function releaseProbedContext() {
  self.pibProbedWebGL2 = undefined;
}
