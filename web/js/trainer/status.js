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

// Whether the backend in use runs on a software rasteriser, from the worker's GPU probe.
export function softwareGpu(backend, environment) {
  if (backend === "webgpu") {
    const info = environment?.webgpu ?? {};
    return SOFTWARE_GPU.test(`${info.vendor} ${info.architecture} ${info.description} ${info.device}`);
  }
  if (backend === "webgl2") return SOFTWARE_GPU.test(environment?.webgl2?.renderer ?? "");
  return null;
}

function gpuText(backend, environment) {
  if (backend === "cpu") return "none (numpy on the CPU)";
  const software = softwareGpu(backend, environment);
  const name =
    backend === "webgpu"
      ? [environment?.webgpu?.vendor, environment?.webgpu?.architecture].filter(Boolean).join(" ")
      : environment?.webgl2?.renderer;
  return `${name || "unknown"}${software ? " — a software GPU (slow)" : ""}`;
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
      ["GPU", gpuText(status.backend, pib.environment)],
      ["Tensors", `${memory.num_tensors} (${(memory.num_bytes / 1024).toFixed(1)} KiB)`],
    ]);
    this.capabilities.textContent = JSON.stringify(status.capabilities, null, 1);
    for (const event of status.events.slice(this.seenEvents)) {
      this.banner(EVENT_TEXT[event.type] ?? `Engine event: ${event.type}`, "warning");
    }
    this.seenEvents = status.events.length;
  }
}
