// The engine status panel (backend, software GPU or not, capabilities, memory) and banners for
// runtime events (context lost, paused, recovered...) and app messages.

const EVENT_TEXT = {
  context_lost: "The GPU context was lost; the engine is recovering.",
  context_restored: "The GPU context is back; training and prediction continue.",
  device_lost: "The GPU device was lost; the engine is recovering.",
  backend_switched: "The engine switched to another backend.",
  paused: "The engine paused (hidden tab or lost GPU).",
  resumed: "The engine resumed.",
  checkpoint: "The engine saved a checkpoint.",
};

const SOFTWARE_GPU = /swiftshader|llvmpipe|lavapipe|software|basic render/i;

// The GPU row: the GPU's name as the worker's probe saw it, and whether it is a software one. The
// engine's verdict comes first (capabilities.software_renderer: SwiftShader, llvmpipe, or "a
// fallback adapter", which is what Firefox's software WebGPU reports, its names all blank); the
// probe's names and adapter flag are the fallback.
function gpuText(status, environment) {
  const backend = status.backend;
  if (backend === "cpu") {
    // Why no GPU runs, where the browser offered none (otherwise the CPU measured faster).
    const missing = [
      ["WebGPU", environment?.webgpu],
      ["WebGL2", environment?.webgl2],
    ].filter(([, probe]) => probe && !probe.available);
    const why = missing.map(([name, probe]) => `${name}: ${probe.reason}`).join("; ");
    return `none (numpy on the CPU)${why ? `; ${why}` : ""}`;
  }
  const probe = (backend === "webgpu" ? environment?.webgpu : environment?.webgl2) ?? {};
  const name = backend === "webgpu" ? [probe.vendor, probe.architecture].filter(Boolean).join(" ") : probe.renderer;
  const renderer = status.capabilities?.software_renderer;
  const software = Boolean(renderer) || probe.fallback || SOFTWARE_GPU.test(`${name} ${probe.description ?? ""}`);
  if (!software) return name || "a hardware GPU the browser does not name";
  const which = renderer ? ` (${renderer})` : "";
  return `${name ? `${name}: ` : ""}a software GPU${which} that runs on the CPU, so training is slow`;
}

export class StatusPanel {
  constructor({ state, list, capabilities, banners }) {
    Object.assign(this, { state, list, capabilities, banners });
    this.seenEvents = 0;
  }

  banner(text, kind = "info") {
    const banner = document.createElement("div");
    banner.className = `banner ${kind}`;
    const message = document.createElement("span");
    message.textContent = text;
    const close = document.createElement("button");
    close.type = "button";
    close.className = "small secondary";
    close.textContent = "Dismiss";
    close.addEventListener("click", () => banner.remove());
    banner.append(message, close);
    this.banners.append(banner);
    return banner;
  }

  rows(entries) {
    this.list.replaceChildren(
      ...entries.flatMap(([term, value]) => {
        const dt = document.createElement("dt");
        dt.textContent = term;
        const dd = document.createElement("dd");
        dd.textContent = value;
        return [dt, dd];
      }),
    );
  }

  show(pib, status) {
    this.state.textContent = `Ready: Python ${pib.python}.`;
    const memory = status.memory;
    this.rows([
      ["Backend", status.backend],
      ["GPU", gpuText(status, pib.environment)],
      ["Tensors", `${memory.num_tensors} (${(memory.num_bytes / 1024).toFixed(1)} KiB)`],
    ]);
    this.capabilities.textContent = JSON.stringify(status.capabilities, null, 1);
    for (const event of status.events.slice(this.seenEvents)) {
      this.banner(EVENT_TEXT[event.type] ?? `Engine event: ${event.type}`, "warning");
    }
    this.seenEvents = status.events.length;
  }
}
