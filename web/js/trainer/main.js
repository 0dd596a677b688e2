// The gesture trainer page: collect samples per class, train in the engine's Worker, predict live,
// keep the model. window.pib (API.md) is here as on the console.
import { startEngine } from "../pib-client.js";
import { TrainingCharts } from "./charts.js";
import { TrainerEngine } from "./engine.js";
import { Camera, imageFileSample, thumbnail, videoFrame } from "./frames.js";
import { Gallery } from "./gallery.js";
import { LongestTask } from "./longest-task.js";
import { permitFor } from "./permit.js";
import { StatusPanel } from "./status.js";
import { Storage } from "./storage.js";

const RECORD_FPS = 10;
const MAX_SAMPLES_PER_CLASS = 500;
const MODEL_FILE_NAME = "gesture-classifier.pibmodel";
const TFJS_ZIP_NAME = "gesture-classifier-tfjs.zip";
const $ = (id) => document.getElementById(id);

window.pib = startEngine();
const engine = new TrainerEngine(window.pib);
const camera = new Camera($("preview"));
const charts = new TrainingCharts($("loss-chart"), $("accuracy-chart"));
const status = new StatusPanel({
  state: $("engine-state"),
  list: $("status-list"),
  capabilities: $("capabilities"),
  banners: $("banners"),
});

// ---- state: classes and their samples, mirrored into IndexedDB ----

const app = {
  storage: null,
  classes: [], // [{id, name, order}]
  samples: new Map(), // class id -> [{id, classId, rgba}]
  model: null, // {labels, size} of the model in the engine
  training: false,
  recording: null, // {classId, timer}
  // ms since the page opened (performance.now()) when the engine was ready, a model was first
  // there (trained or loaded) and the first live prediction was shown: time to first prediction.
  timings: { ready: null, model: null, firstPrediction: null },
};
window.gestureTrainer = app; // for tests and the curious: read-only use

// Publishing to and loading from the server's registry (web/js/trainer/gallery.js).
const gallery = new Gallery({
  save: () => engine.save(),
  current: () => app.model,
  load: async (bytes, item) => modelLoaded(await engine.loadFile(bytes), `shared “${item.name}”`),
  confirm: (question) => confirmDelete(question),
});

function newId() {
  return crypto.randomUUID();
}

async function persist(store, value) {
  try {
    await app.storage?.put(store, value);
  } catch (error) {
    status.banner(`Could not store locally: ${error.message}`, "error");
  }
}

async function addClass(name) {
  const entry = { id: newId(), name, order: Date.now() + app.classes.length };
  app.classes.push(entry);
  app.samples.set(entry.id, []);
  await persist("classes", entry);
  renderClasses();
  return entry;
}

async function deleteClass(classId) {
  const entry = app.classes.find((c) => c.id === classId);
  if (!entry || !confirmDelete(`Delete the class “${entry.name}” and its ${app.samples.get(classId).length} samples?`)) return;
  app.classes = app.classes.filter((c) => c.id !== classId);
  for (const sample of app.samples.get(classId)) await app.storage?.delete("samples", sample.id);
  app.samples.delete(classId);
  await app.storage?.delete("classes", classId);
  renderClasses();
}

// Tests set window.confirmDeletes = true to skip the dialog (it would block the page).
function confirmDelete(question) {
  return window.confirmDeletes === true || window.confirm(question);
}

async function addSample(classId, rgba) {
  const list = app.samples.get(classId);
  if (!list || list.length >= MAX_SAMPLES_PER_CLASS) return false;
  const sample = { id: newId(), classId, rgba };
  list.push(sample);
  await persist("samples", sample);
  renderSamples(classId);
  return true;
}

async function deleteSample(classId, sampleId) {
  app.samples.set(classId, app.samples.get(classId).filter((s) => s.id !== sampleId));
  await app.storage?.delete("samples", sampleId);
  renderSamples(classId);
}

// ---- collect panel ----

function cardOf(classId) {
  return document.querySelector(`.class-card[data-class-id="${classId}"]`);
}

function renderClasses() {
  const list = $("classes");
  list.replaceChildren(
    ...app.classes.map((entry, index) => {
      const card = $("class-template").content.firstElementChild.cloneNode(true);
      card.dataset.classId = entry.id;
      const name = card.querySelector(".class-name");
      name.value = entry.name;
      name.setAttribute("aria-label", `Name of class ${index + 1}`);
      // Renamed as the person types (keeps working when a browser skips the change event).
      name.addEventListener("input", () => {
        entry.name = name.value.trim() || `Class ${index + 1}`;
        persist("classes", entry);
        renderSamples(entry.id);
      });
      name.addEventListener("change", () => {
        name.value = entry.name;
      });
      const remove = card.querySelector(".delete-class");
      remove.setAttribute("aria-label", `Delete class ${entry.name}`);
      remove.addEventListener("click", () => deleteClass(entry.id));
      wireRecordButton(card.querySelector(".record"), entry.id);
      const upload = card.querySelector(".upload");
      upload.setAttribute("aria-label", `Upload images for ${entry.name}`);
      upload.addEventListener("change", () => uploadFiles(entry.id, upload));
      return card;
    }),
  );
  app.classes.forEach((entry) => renderSamples(entry.id));
  updateButtons();
}

function renderSamples(classId) {
  const card = cardOf(classId);
  const entry = app.classes.find((c) => c.id === classId);
  if (!card || !entry) return;
  const samples = app.samples.get(classId);
  card.querySelector(".count").textContent = `${samples.length} sample${samples.length === 1 ? "" : "s"}`;
  card.querySelector(".record").textContent = `Hold to record ${entry.name}`;
  card.querySelector(".thumbs").replaceChildren(
    ...samples.map((sample, index) => {
      const item = document.createElement("li");
      const remove = document.createElement("button");
      remove.type = "button";
      remove.className = "thumb";
      remove.title = "Delete this sample";
      remove.setAttribute("aria-label", `Delete sample ${index + 1} of ${entry.name}`);
      remove.append(thumbnail(sample.rgba, `Sample ${index + 1} of ${entry.name}`));
      remove.addEventListener("click", () => deleteSample(classId, sample.id));
      item.append(remove);
      return item;
    }),
  );
  updateButtons();
}

function wireRecordButton(button, classId) {
  const start = (event) => {
    event.preventDefault();
    startRecording(classId, button);
  };
  button.addEventListener("pointerdown", start);
  for (const end of ["pointerup", "pointerleave", "pointercancel", "blur"]) {
    button.addEventListener(end, stopRecording);
  }
  button.addEventListener("keydown", (event) => {
    if ((event.key === " " || event.key === "Enter") && !event.repeat) start(event);
    else if (event.key === " " || event.key === "Enter") event.preventDefault();
  });
  button.addEventListener("keyup", (event) => {
    if (event.key === " " || event.key === "Enter") {
      event.preventDefault();
      stopRecording();
    }
  });
}

function startRecording(classId, button) {
  if (app.recording) return;
  if (!camera.live) {
    showCameraMessage("Start the camera first to record, or upload images.");
    return;
  }
  button.classList.add("recording");
  button.setAttribute("aria-pressed", "true");
  const capture = () => addSample(classId, videoFrame(camera.video));
  capture();
  app.recording = { button, timer: setInterval(capture, 1000 / RECORD_FPS) };
}

function stopRecording() {
  if (!app.recording) return;
  clearInterval(app.recording.timer);
  app.recording.button.classList.remove("recording");
  app.recording.button.setAttribute("aria-pressed", "false");
  app.recording = null;
}

async function uploadFiles(classId, input) {
  let failed = 0;
  for (const file of input.files) {
    try {
      await addSample(classId, await imageFileSample(file));
    } catch {
      failed += 1;
    }
  }
  if (failed) status.banner(`${failed} file(s) could not be read as images.`, "warning");
  input.value = "";
}

function trainableClasses() {
  return app.classes.filter((c) => app.samples.get(c.id).length > 0);
}

function updateButtons() {
  const ready = window.pib.backend !== null;
  const enoughData = trainableClasses().length >= 2;
  $("train").disabled = !ready || app.training || !enoughData;
  $("stop").disabled = !app.training;
  $("save-browser").disabled = $("download").disabled = $("export-tfjs").disabled =
    app.training || app.model === null;
  $("add-class").disabled = app.training;
  gallery.setPublishable(!app.training && app.model !== null);
}

// ---- camera ----

function showCameraMessage(text) {
  const message = $("camera-message");
  message.textContent = text;
  message.hidden = !text;
}

async function startCamera() {
  showCameraMessage("");
  try {
    await camera.start();
    $("camera-start").hidden = true;
    if (app.model) startPredicting();
  } catch (error) {
    showCameraMessage(error.message);
  }
}

// ---- train ----

const longest = new LongestTask();

function formatSeconds(seconds) {
  if (!Number.isFinite(seconds)) return "–";
  return seconds < 60 ? `${Math.round(seconds)} s` : `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

function showProgress(event) {
  if (event.event === "begin") {
    longest.mark(); // the worker has the data: what follows is the training steps
    $("train-progress-text").textContent = `Starting: batch size ${event.batch_size}, ${event.steps} steps per epoch…`;
    return;
  }
  const { epochs, steps, logs } = event;
  const done = event.event === "batch" ? event.epoch + (event.batch + 1) / steps : event.epoch + 1;
  const bar = $("train-progress");
  bar.value = Math.min(1, done / epochs);
  const eta = (event.seconds / done) * (epochs - done);
  const step = event.event === "batch" ? event.batch + 1 : steps;
  $("train-progress-text").textContent =
    `Epoch ${event.epoch + 1} of ${epochs}, step ${step} of ${steps} · loss ${logs.loss?.toFixed(3) ?? "–"}` +
    ` · ETA ${formatSeconds(eta)}`;
  if (event.event === "batch") {
    charts.add(done, { loss: logs.loss, accuracy: logs.accuracy ?? null });
  } else if (event.event === "epoch" && "val_loss" in logs) {
    charts.add(done, {
      loss: logs.loss,
      accuracy: logs.accuracy ?? null,
      heldOutLoss: logs.val_loss,
      heldOutAccuracy: logs.val_accuracy ?? null,
    });
  }
}

// The permit for the training the form describes: a token, null when the server requires
// none, or false when it refused one (the reason is shown; nothing trains).
async function askPermit(labels, classes, size) {
  try {
    const config = await engine.trainingConfig({
      labels,
      classNames: classes.map((c) => c.name),
      size,
      epochs: Number($("epochs").value),
      batchSize: $("batch-size").value ? Number($("batch-size").value) : null,
    });
    return await permitFor(config);
  } catch (error) {
    $("train-progress-text").textContent = `Not trained: ${firstLine(error)}`;
    status.banner(`Not trained: ${firstLine(error)}`, "error");
    startPredicting(); // the model from before, if any, goes on predicting
    return false;
  }
}

async function train(event) {
  event.preventDefault();
  if (!$("train-settings").reportValidity()) return;
  stopPredicting();
  const classes = trainableClasses();
  const size = Number($("input-size").value);
  const samples = [];
  const labels = [];
  classes.forEach((entry, index) => {
    for (const sample of app.samples.get(entry.id)) {
      samples.push(sample.rgba);
      labels.push(index);
    }
  });
  const permit = await askPermit(labels, classes, size);
  if (permit === false) return;
  app.training = true;
  app.model = null;
  updateButtons();
  charts.reset();
  $("evaluation").hidden = true;
  $("train-progress").value = 0;
  longest.start(); // from the hand-over to the worker until training ends
  try {
    const result = await engine.train({
      samples,
      labels,
      classNames: classes.map((c) => c.name),
      size,
      epochs: Number($("epochs").value),
      learningRate: Number($("learning-rate").value),
      batchSize: $("batch-size").value ? Number($("batch-size").value) : null,
      permit,
    });
    app.model = { labels: classes.map((c) => c.name), size };
    app.timings.model ??= performance.now();
    const tasks = longest.stop();
    app.lastTraining = { ...result, longestTaskMs: tasks.overallMs, longestTaskDuringStepsMs: tasks.sinceMarkMs };
    showEvaluation(result);
    $("train-progress-text").textContent =
      `${result.stopped ? "Stopped" : "Trained"} in ${formatSeconds(result.seconds)} on ${result.train_count} samples ` +
      `(batch size ${result.batch_size}); ${result.held_out_count} held out.`;
    startPredicting();
  } catch (error) {
    longest.stop();
    $("train-progress-text").textContent = `Training failed: ${firstLine(error)}`;
    status.banner(`Training failed: ${firstLine(error)}`, "error");
  } finally {
    app.training = false;
    updateButtons();
    refreshStatus();
  }
  if (app.lastTraining) {
    const { longestTaskMs, longestTaskDuringStepsMs } = app.lastTraining;
    $("responsiveness").textContent =
      `Page responsiveness during training: the longest main-thread task took ${Math.round(longestTaskMs)} ms ` +
      `(${Math.round(longestTaskDuringStepsMs ?? longestTaskMs)} ms once the steps ran; under 50 ms counts as none).`;
  }
}

function firstLine(error) {
  const lines = String(error.message ?? error).trim().split("\n");
  return lines[lines.length - 1];
}

function showEvaluation(result) {
  const labels = app.model.labels;
  $("evaluation").hidden = false;
  $("held-out-accuracy").textContent =
    result.held_out_count > 0
      ? `Held-out accuracy ${(result.accuracy * 100).toFixed(1)}% on ${result.held_out_count} samples.`
      : "No samples were held out (add at least two per class).";
  const table = $("confusion");
  const caption = document.createElement("caption");
  caption.textContent = "Confusion matrix (rows: true class, columns: predicted) and per-class accuracy";
  const head = document.createElement("tr");
  head.append(cell("th", "true \\ predicted", "col"), ...labels.map((l) => cell("th", l, "col")), cell("th", "accuracy", "col"));
  const rows = result.confusion.map((row, i) => {
    const tr = document.createElement("tr");
    const accuracy = result.per_class[i];
    tr.append(
      cell("th", labels[i], "row"),
      ...row.map((count, j) => {
        const td = cell("td", String(count));
        if (count > 0) td.classList.add(i === j ? "hit" : "miss");
        return td;
      }),
      cell("td", accuracy === null ? "–" : `${(accuracy * 100).toFixed(0)}%`),
    );
    return tr;
  });
  table.replaceChildren(caption, head, ...rows);
}

function cell(tag, text, scope) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (scope) element.scope = scope;
  return element;
}

// ---- predict ----

// loop: the number of the live loop; a loop whose number is not the latest stops (a model loaded
// while a frame was in flight must not leave two loops running).
const prediction = { running: false, loop: 0, frames: [], lastLatencyMs: null, result: null };

function renderBars(labels) {
  $("confidence").replaceChildren(
    ...labels.map((label) => {
      const item = document.createElement("li");
      const name = document.createElement("span");
      name.className = "bar-label";
      name.textContent = label;
      const meter = document.createElement("meter");
      meter.min = 0;
      meter.max = 1;
      meter.value = 0;
      meter.setAttribute("aria-label", `Confidence for ${label}`);
      const value = document.createElement("span");
      value.className = "bar-value";
      value.textContent = "0%";
      item.append(name, meter, value);
      return item;
    }),
  );
}

function startPredicting() {
  if (!app.model || !camera.live || prediction.running) return;
  prediction.running = true;
  $("prediction").hidden = false;
  renderBars(app.model.labels);
  prediction.loop += 1;
  predictLoop(prediction.loop);
}

function stopPredicting() {
  prediction.running = false;
}

async function predictLoop(loop) {
  const current = () => prediction.running && prediction.loop === loop && app.model !== null;
  let failures = 0; // frames in a row that a GPU loss took
  while (current()) {
    const started = performance.now();
    try {
      const result = await engine.predict(camera.video);
      if (!current()) break;
      failures = 0;
      showPrediction(result, performance.now() - started);
    } catch (error) {
      if (!current()) break;
      if ((status.recovering || status.recoveryBanner) && ++failures <= 50) {
        // The GPU went away under this frame: the banner says so; the next frame is tried.
        await new Promise((resolve) => setTimeout(resolve, 100));
        continue;
      }
      const reason = failures ? "the GPU could not be recovered" : firstLine(error);
      status.banner(`Prediction failed: ${reason}`, "error");
      prediction.running = false;
      break;
    }
    await new Promise((resolve) => requestAnimationFrame(resolve));
  }
}

// result.top: the best classes, best first ({index, score, label}); only those were read back, so
// a class outside them shows an empty bar.
function showPrediction(result, latencyMs) {
  const now = performance.now();
  prediction.frames = prediction.frames.filter((t) => now - t < 1000).concat(now);
  const best = result.top[0];
  app.timings.firstPrediction ??= now;
  prediction.result = { ...result, label: best.label, latencyMs };
  $("top-label").textContent = best.label;
  const scores = new Map(result.top.map((entry) => [entry.index, entry.score]));
  $("confidence").querySelectorAll("li").forEach((item, i) => {
    const score = scores.get(i);
    item.querySelector("meter").value = score ?? 0;
    item.querySelector(".bar-value").textContent = score === undefined ? "–" : `${Math.round(score * 100)}%`;
    item.classList.toggle("best", i === best.index);
  });
  status.recovered();
  $("latency").textContent = `${latencyMs.toFixed(0)} ms per frame`;
  $("fps").textContent = `${prediction.frames.length} frames/s`;
}
app.prediction = prediction;

// ---- keep ----

async function modelLoaded(info, source) {
  app.model = { labels: info.labels, size: info.size };
  app.timings.model ??= performance.now();
  $("input-size").value = String(info.size);
  $("keep-message").textContent = `Loaded the model (${source}): classes ${info.labels.join(", ")}, input ${info.size} × ${info.size}.`;
  updateButtons();
  stopPredicting();
  await new Promise((resolve) => setTimeout(resolve));
  startPredicting();
}

async function saveToBrowser() {
  const bytes = await engine.save();
  await app.storage.put("models", { id: "last", bytes, savedAt: new Date().toISOString(), labels: app.model.labels });
  $("keep-message").textContent = `Saved in this browser (${(bytes.length / 1024).toFixed(1)} KiB).`;
  $("load-browser").disabled = false;
}

async function loadFromBrowser() {
  const saved = await app.storage.get("models", "last");
  if (!saved) return;
  await modelLoaded(await engine.loadFile(saved.bytes), `saved ${saved.savedAt}`);
}

function offerFile(bytes, name) {
  const url = URL.createObjectURL(new Blob([bytes], { type: "application/zip" }));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

async function download() {
  offerFile(await engine.save(), MODEL_FILE_NAME);
}

// A zip of model.json and its weight shard, which tf.loadLayersModel reads once unpacked.
async function exportTfjs() {
  offerFile(await engine.exportTfjs(), TFJS_ZIP_NAME);
}

async function loadFromFile(input) {
  const file = input.files[0];
  if (!file) return;
  try {
    await modelLoaded(await engine.loadFile(new Uint8Array(await file.arrayBuffer())), file.name);
  } catch (error) {
    status.banner(`Could not load ${file.name}: ${firstLine(error)}`, "error");
  }
  input.value = "";
}

async function clearAll() {
  if (!confirmDelete("Forget every class, sample and the saved model in this browser?")) return;
  await app.storage?.clear();
  app.classes = [];
  app.samples.clear();
  $("load-browser").disabled = true;
  await addClass("Class 1");
  await addClass("Class 2");
}

function guarded(work) {
  return (...args) =>
    work(...args).catch((error) => status.banner(firstLine(error), "error"));
}

// ---- start-up ----

async function restoreSession() {
  try {
    app.storage = await new Storage().open();
    const [classes, samples, saved] = await Promise.all([
      app.storage.all("classes"),
      app.storage.all("samples"),
      app.storage.get("models", "last"),
    ]);
    classes.sort((a, b) => a.order - b.order);
    app.classes = classes;
    for (const entry of classes) app.samples.set(entry.id, []);
    for (const sample of samples) app.samples.get(sample.classId)?.push(sample);
    if (samples.length) {
      $("keep-message").textContent = `Restored ${classes.length} classes and ${samples.length} samples from your last session.`;
    }
    $("load-browser").disabled = !saved;
    if (saved) $("keep-message").textContent += " A saved model is ready to load.";
  } catch (error) {
    status.banner(`Local storage is unavailable (${error.message}); nothing will be kept after a reload.`, "warning");
  }
  if (app.classes.length === 0) {
    await addClass("Class 1");
    await addClass("Class 2");
  }
  renderClasses();
}

async function refreshStatus() {
  try {
    status.show(window.pib, await engine.status());
  } catch (error) {
    status.state.textContent = `Engine status unavailable: ${firstLine(error)}`;
  }
}

function wire() {
  $("camera-start").addEventListener("click", startCamera);
  $("add-class").addEventListener("click", () => addClass(`Class ${app.classes.length + 1}`));
  $("train-settings").addEventListener("submit", train);
  $("stop").addEventListener("click", () => engine.stop());
  $("save-browser").addEventListener("click", guarded(saveToBrowser));
  $("load-browser").addEventListener("click", guarded(loadFromBrowser));
  $("download").addEventListener("click", guarded(download));
  $("export-tfjs").addEventListener("click", guarded(exportTfjs));
  $("model-file").addEventListener("change", (event) => loadFromFile(event.target));
  $("clear-data").addEventListener("click", guarded(clearAll));
  window.pib.events.addEventListener("train", (event) => showProgress(event.detail));
  window.pib.events.addEventListener("runtime", (event) => {
    status.recovery(event.detail);
    // Nothing predicts to clear the banner: it goes a few seconds after the recovery.
    if (!prediction.running) setTimeout(() => prediction.running || status.recovered(), 4000);
  });
}

wire();
charts.mount().catch((error) => status.banner(`Charts unavailable: ${error.message}`, "warning"));
restoreSession();
startCamera();
window.pib.ready.then(
  async () => {
    await engine.load();
    app.timings.ready = performance.now();
    updateButtons();
    await refreshStatus();
    setInterval(refreshStatus, 5000);
  },
  (error) => {
    status.state.textContent = `The engine failed to start: ${error.message}`;
    status.state.classList.add("error");
  },
);
