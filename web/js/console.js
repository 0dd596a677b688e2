// The engine console page: start-up progress per stage, the GPU report, and a Python prompt.
import { startEngine } from "./pib-client.js";

const status = document.getElementById("status");

function showStage({ stage, state, ms }) {
  const row = document.querySelector(`.stage[data-stage="${stage}"]`);
  if (!row) return;
  const bar = row.querySelector("progress");
  if (state === "done") {
    bar.max = 1;
    bar.value = 1;
    row.querySelector(".ms").textContent = `${ms} ms`;
  } else {
    bar.removeAttribute("value"); // indeterminate while the stage runs
  }
}

window.pib = startEngine({ onStage: showStage });

const runButton = document.getElementById("run");
const code = document.getElementById("code");
const output = document.getElementById("output");

async function runCode() {
  output.textContent = "running…";
  output.classList.remove("error");
  try {
    output.textContent = JSON.stringify(await window.pib.runPython(code.value), null, 2);
  } catch (error) {
    output.textContent = error.message;
    output.classList.add("error");
  }
}

runButton.addEventListener("click", runCode);
code.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && event.ctrlKey) runCode();
});

// The header in words: which backend runs, why, and whether its GPU is a software one.
async function describeBackend(pib) {
  const selection = await pib.runPython('pib.capabilities()["selection"]');
  const chosen = selection.candidates.find((c) => c.name === selection.chosen);
  const software = chosen.software_renderer ? `, on a software GPU (${chosen.software_renderer})` : "";
  const others = selection.candidates.filter((c) => c !== chosen).map((c) => `${c.name}: ${c.status}`);
  const how = selection.mode === "forced" ? "forced" : `chosen by measurement${others.length ? `; ${others.join(", ")}` : ""}`;
  return `running on ${pib.backend}${software} (${how})`;
}

window.pib.ready.then(
  async (pib) => {
    status.textContent = `ready: Python ${pib.python}, backend ${pib.backend}`;
    status.textContent = `ready: Python ${pib.python}, ${await describeBackend(pib)}`;
    document.getElementById("environment-report").textContent = JSON.stringify(pib.environment, null, 2);
    runButton.disabled = false;
  },
  (error) => {
    status.textContent = `the engine failed to start: ${error.message}`;
    status.classList.add("error");
  },
);
