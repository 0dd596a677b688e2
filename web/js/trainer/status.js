// The engine status panel (backend, software GPU or not, capabilities, memory) and banners for
// runtime events (context lost, paused, recovered...) and app messages.

const EVENT_TEXT = {
  paused: "The engine paused (hidden tab or lost GPU).",
  resumed: "The engine resumed.",
  checkpoint: "The engine saved a checkpoint.",
};

// A lost GPU and its recovery, as the engine's worker reports them when they happen (the "runtime"
// events): one banner that says what happened, never the engine's error text, and goes once
// prediction runs again.
const RECOVERY_TEXT = {
  context_lost: "The GPU context was lost. The engine is recovering; your model and samples are kept.",
  device_lost: "The GPU device was lost. The engine is recovering; your model and samples are kept.",
  context_restored: "The GPU was lost and is back; nothing was lost.",
  backend_switched: "The GPU did not come back, so the engine moved to another backend; your model is kept.",
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
  if (!software && status.capabilities?.renderer_masked) return `${name}: a name the browser shows in place of the real GPU's, so it may be a software GPU that runs on the CPU`;
  if (!software) return name || "a hardware GPU the browser does not name";
  const which = renderer ? ` (${renderer})` : "";
  return `${name ? `${name}: ` : ""}a software GPU${which} that runs on the CPU, so training is slow`;
}

export class StatusPanel {
  constructor({ state, list, capabilities, banners }) {
    Object.assign(this, { state, list, capabilities, banners });
    this.seenEvents = 0;
    this.recovering = false; // a loss was reported and no recovery yet
    this.recoveryBanner = null;
  }

  // A "runtime" event from the engine's worker (a loss or a recovery), as it happens.
  recovery(event) {
    const text = RECOVERY_TEXT[event.type];
    if (!text) return;
    this.recovering = event.type.endsWith("_lost");
    if (this.recoveryBanner?.isConnected) {
      this.recoveryBanner.querySelector("span").textContent = text;
    } else {
      this.recoveryBanner = this.banner(text, "warning");
      this.recoveryBanner.classList.add("recovery");
    }
    this.recoveryBanner.dataset.state = this.recovering ? "recovering" : "recovered";
  }

  // Prediction (or other engine work) ran after a recovery: the banner has said its piece.
  recovered() {
    if (this.recovering || !this.recoveryBanner) return;
    this.recoveryBanner.remove();
    this.recoveryBanner = null;
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
      if (event.type in RECOVERY_TEXT) continue; // shown as it happened: recovery()
      this.banner(EVENT_TEXT[event.type] ?? `Engine event: ${event.type}`, "warning");
    }
    this.seenEvents = status.events.length;
  }
}
