// The gesture trainer page: collect samples per class, train in the engine's Worker, predict live,
// keep the model. window.pib (API.md) is here as on the console.
import { startEngine } from "../pib-client.js";
import { TrainingCharts } from "./charts.js";
import { EmbeddingQueue, seedOf } from "./embeddings.js";
import { TrainerEngine } from "./engine.js";
import { Camera, centreSquare, imageFileSample, sampleBitmap, videoFrame } from "./frames.js";
import { Gallery } from "./gallery.js";
import { LongestTask } from "./longest-task.js";
import { permitFor, trainingPolicy } from "./permit.js";
import { SampleStore } from "./samples.js";
import { StatusPanel } from "./status.js";
import { Storage } from "./storage.js";
import { SampleStrip } from "./strip.js";

// py_in_browser/limits.py's default max_samples_per_class, until GET /api/training/policy says
// what this server's is.
const DEFAULT_CAP = 5000;
const MODEL_FILE_NAME = "gesture-classifier.pibmodel";
const TFJS_ZIP_NAME = "gesture-classifier-tfjs.zip";
// The hand backbone's input side (web/py/gesture_transfer.py BACKBONE): samples are embedded
// from their centre square at this size.
const BACKBONE_SIDE = 224;
// Landmarks are drawn when the hand model's score says a hand is there.
const HAND_PRESENT = 0.5;
// What each model kind trains with unless the person changes it.
const MODE_DEFAULTS = {
  transfer: { epochs: "30", learningRate: "0.003" },
  scratch: { epochs: "20", learningRate: "0.003" },
};
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

// Where the Model select's last choice is kept, so a reload keeps it (initialMode).
const MODE_KEY = "pib-gesture-trainer/mode";

const app = {
  storage: null,
  classes: [], // [{id, name, order}]
  store: new SampleStore(null, () => {}), // replaced once storage is open (restoreSession)
  strips: new Map(), // class id -> its SampleStrip
  cap: DEFAULT_CAP, // samples a class may hold (the server's max_samples_per_class)
  // "transfer": a head trained on the hand backbone's embeddings (each sample embedded once, when
  // added); "scratch": a small CNN trained on the samples' pixels (initialMode).
  mode: initialMode(),
  embeddings: null, // the EmbeddingQueue, once storage is open
  model: null, // {labels, size, backbone} of the model in the engine
  training: false,
  recording: null, // {classId, button, fps, timer, started, frames}
  lastRecording: null, // {frames, seconds, fps, wantedFps}
  lastUpload: null, // {count, failed, skipped, seconds, startedMs, marks: performance.now() after each image}
  // ms since the page opened (performance.now()) when the engine was ready, a model was first
  // there (trained or loaded) and the first live prediction was shown: time to first prediction.
  timings: { ready: null, model: null, firstPrediction: null },
};
window.gestureTrainer = app; // for tests and the curious: read-only use, but for app.add

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

// A storage failure in words: a full quota (Safari's is small, and smaller in private windows)
// says what still works.
function storageFailure(error) {
  if (error.name === "QuotaExceededError") {
    return "This browser's storage for the site is full, so this is not kept after a reload. Delete some samples or download the model to keep it.";
  }
  return `Could not store locally: ${error.message}`;
}

async function persist(store, value) {
  try {
    await app.storage?.put(store, value);
  } catch (error) {
    status.banner(storageFailure(error), "error");
  }
}

async function addClass(name) {
  const entry = { id: newId(), name, order: Date.now() + app.classes.length };
  app.classes.push(entry);
  app.store.addClass(entry.id);
  await persist("classes", entry);
  renderClasses();
  return entry;
}

async function deleteClass(classId) {
  const entry = app.classes.find((c) => c.id === classId);
  if (!entry || !confirmDelete(`Delete the class “${entry.name}” and its ${app.store.count(classId)} samples?`)) return;
  app.classes = app.classes.filter((c) => c.id !== classId);
  await app.store.removeClass(classId);
  await app.embeddings?.removeClass(classId);
  await app.storage?.delete("classes", classId);
  renderClasses();
}

// Tests set window.confirmDeletes = true to skip the dialog (it would block the page).
function confirmDelete(question) {
  return window.confirmDeletes === true || window.confirm(question);
}

// Adds one sample (SAMPLE_SIZE² RGBA) to a class: the same small cost whatever the class holds
// (samples.js queues the write, the strip redraws its few thumbnails). False at the cap. In
// transfer mode the sample is queued for embedding from `square` (a Promise of the best pixels:
// the frame's or image's centre square at the backbone's input size; `mirror`: a camera frame,
// flipped as the preview shows it) or, without one, from the stored sample.
function addSample(classId, rgba, square = null, mirror = false) {
  if (!app.strips.has(classId) || app.store.count(classId) >= app.cap) {
    square?.then((bitmap) => bitmap.close(), () => {});
    if (app.strips.has(classId)) renderCount(classId);
    return false;
  }
  const seq = app.store.add(classId, rgba);
  app.strips.get(classId).added(seq, rgba);
  renderCount(classId);
  if (app.mode === "transfer" && app.embeddings) {
    app.embeddings.add(classId, seq, square ?? sampleBitmap(rgba), square ? mirror : false, seedOf(rgba));
  } else {
    square?.then((bitmap) => bitmap.close(), () => {});
  }
  return true;
}

// The best pixels of the camera's current frame for the backbone (transfer mode), or null.
function frameSquare() {
  if (app.mode !== "transfer") return null;
  const video = camera.video;
  return centreSquare(video, video.videoWidth, video.videoHeight, BACKBONE_SIDE);
}

// The path recording and uploads take, for tests that fill classes with samples they generate.
app.add = addSample;

async function deleteSample(classId, seq) {
  await app.store.remove(classId, seq);
  await app.embeddings?.remove(classId, seq);
  const strip = app.strips.get(classId);
  await strip?.show(strip.offset);
  renderCount(classId);
}

// Said once, when samples start to be kept in this tab's memory only (samples.js).
function storageFallback(reason) {
  const why =
    reason === "quota"
      ? "This browser's storage for this site is full"
      : reason === "no storage"
        ? "This browser does not let the page store data here (a private window?)"
        : `Storing samples failed (${reason})`;
  status.banner(
    `${why}: the samples stored so far stay, and new ones are kept in this tab's memory only — they are lost when it closes or reloads. ` +
      "Training and prediction work as before; download the model to keep it.",
    "warning",
  );
  $("keep-message").textContent = "New samples are kept in this tab's memory only (this browser's storage is unavailable or full).";
}

// ---- collect panel ----

function cardOf(classId) {
  return document.querySelector(`.class-card[data-class-id="${classId}"]`);
}

function renderClasses() {
  const list = $("classes");
  app.strips.clear();
  list.replaceChildren(
    ...app.classes.map((entry, index) => {
      const card = $("class-template").content.firstElementChild.cloneNode(true);
      card.dataset.classId = entry.id;
      const name = card.querySelector(".class-name");
      name.value = entry.name;
      name.setAttribute("aria-label", `Name of class ${index + 1}`);
      const strip = new SampleStrip(card.querySelector(".strip"), entry.id, app.store, () => entry.name, (seq) =>
        deleteSample(entry.id, seq),
      );
      app.strips.set(entry.id, strip);
      // Renamed as the person types (keeps working when a browser skips the change event).
      name.addEventListener("input", () => {
        entry.name = name.value.trim() || `Class ${index + 1}`;
        persist("classes", entry);
        renderCount(entry.id);
        strip.draw();
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
  for (const entry of app.classes) {
    renderCount(entry.id);
    app.strips.get(entry.id).show(0);
  }
  updateButtons();
}

// The class's count, its record button's label and, at the cap, why nothing more is added.
function renderCount(classId) {
  const card = cardOf(classId);
  const entry = app.classes.find((c) => c.id === classId);
  if (!card || !entry) return;
  const count = app.store.count(classId);
  card.querySelector(".count").textContent = `${count.toLocaleString("en")} sample${count === 1 ? "" : "s"}`;
  card.querySelector(".record").textContent = `Hold to record ${entry.name}`;
  const full = count >= app.cap;
  const message = card.querySelector(".cap-message");
  message.hidden = !full;
  if (full) {
    message.textContent =
      `${entry.name} holds ${app.cap.toLocaleString("en")} samples, the most a class keeps here ` +
      "(max_samples_per_class): delete some to add others, or add a class.";
  }
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

// Captures frames at the chosen rate while the button is held. Each capture is scheduled from
// the recording's start (not from the previous one), so a late frame does not slow the rate.
function startRecording(classId, button) {
  if (app.recording) return;
  if (!camera.live) {
    showCameraMessage("Start the camera first to record, or upload images.");
    return;
  }
  button.classList.add("recording");
  button.setAttribute("aria-pressed", "true");
  const fps = Number($("record-fps").value);
  const recording = { classId, button, fps, started: performance.now(), frames: 0, timer: null };
  const capture = () => {
    if (app.recording !== recording) return;
    if (!addSample(classId, videoFrame(camera.video), frameSquare(), true)) {
      stopRecording();
      return;
    }
    recording.frames += 1;
    const next = recording.started + (recording.frames * 1000) / fps;
    recording.timer = setTimeout(capture, Math.max(0, next - performance.now()));
  };
  app.recording = recording;
  capture();
}

function stopRecording() {
  const recording = app.recording;
  if (!recording) return;
  clearTimeout(recording.timer);
  app.recording = null;
  recording.button.classList.remove("recording");
  recording.button.setAttribute("aria-pressed", "false");
  const seconds = (performance.now() - recording.started) / 1000;
  app.lastRecording = {
    frames: recording.frames,
    seconds,
    fps: recording.frames / Math.max(seconds, 1e-3),
    wantedFps: recording.fps,
  };
}

async function uploadFiles(classId, input) {
  const files = [...input.files];
  input.value = "";
  const started = performance.now();
  const upload = { count: 0, failed: 0, skipped: 0, seconds: 0, startedMs: started, marks: [] };
  app.lastUpload = upload;
  for (const file of files) {
    let sample;
    try {
      sample = await imageFileSample(file, app.mode === "transfer" ? BACKBONE_SIDE : null);
    } catch {
      upload.failed += 1;
      continue;
    }
    const square = sample.square ? Promise.resolve(sample.square) : null;
    if (!addSample(classId, sample.rgba, square, false)) {
      upload.skipped = files.length - upload.count - upload.failed;
      break;
    }
    upload.count += 1;
    upload.marks.push(performance.now());
  }
  upload.seconds = (performance.now() - started) / 1000;
  if (upload.failed) status.banner(`${upload.failed} file(s) could not be read as images.`, "warning");
  if (upload.skipped) status.banner(`${upload.skipped} image(s) not added: the class is full.`, "warning");
}

function trainableClasses() {
  return app.classes.filter((c) => app.store.count(c.id) > 0);
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

// Places the guide box over the part of the preview a sample and a live frame are cut from:
// the frame's centre square (frames.js), as the preview shows the frame (object-fit: cover).
function placeGuideBox() {
  const video = $("preview");
  const box = $("guide-box");
  if (!camera.live) {
    box.hidden = true;
    return;
  }
  const { clientWidth: width, clientHeight: height, videoWidth, videoHeight } = video;
  const scale = Math.max(width / videoWidth, height / videoHeight);
  const side = Math.min(videoWidth, videoHeight) * scale;
  Object.assign(box.style, {
    width: `${side}px`,
    height: `${side}px`,
    left: `${(width - side) / 2}px`,
    top: `${(height - side) / 2}px`,
  });
  box.hidden = false;
}

async function startCamera() {
  showCameraMessage("");
  try {
    await camera.start();
    placeGuideBox();
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
    const settings = {
      labels,
      classNames: classes.map((c) => c.name),
      size,
      epochs: Number($("epochs").value),
      batchSize: $("batch-size").value ? Number($("batch-size").value) : null,
    };
    const config = await (app.mode === "transfer" ? engine.headTrainingConfig(settings) : engine.trainingConfig(settings));
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
  // The samples as the worker sees them: the i-th is refs[i] ([class id, seq]), of class
  // labels[i]. Their pixels stay in storage until the worker asks for a batch.
  const refs = [];
  const labels = [];
  classes.forEach((entry, index) => {
    for (const seq of app.store.seqs.get(entry.id)) {
      refs.push([entry.id, seq]);
      labels.push(index);
    }
  });
  app.training = true;
  app.model = null;
  updateButtons();
  charts.reset();
  $("evaluation").hidden = true;
  $("train-progress").value = 0;
  try {
    if (app.mode === "transfer") await embedAll(refs);
  } catch (error) {
    app.training = false;
    updateButtons();
    $("train-progress-text").textContent = `Not trained: ${firstLine(error)}`;
    status.banner(`Not trained: ${firstLine(error)}`, "error");
    return;
  }
  const permit = await askPermit(labels, classes, size);
  if (permit === false) {
    app.training = false;
    updateButtons();
    return;
  }
  longest.start(); // from the hand-over to the worker until training ends
  try {
    const settings = {
      labels,
      classNames: classes.map((c) => c.name),
      epochs: Number($("epochs").value),
      learningRate: Number($("learning-rate").value),
      batchSize: $("batch-size").value ? Number($("batch-size").value) : null,
      permit,
    };
    const result =
      app.mode === "transfer"
        ? await engine.trainHead({ ...settings, embeddings: await app.embeddings.read(refs) })
        : await engine.train({ ...settings, refs, read: (classId, seqs) => app.store.read(classId, seqs), size });
    app.model = { labels: classes.map((c) => c.name), size: result.backbone ? BACKBONE_SIDE : size, backbone: result.backbone ?? null };
    app.timings.model ??= performance.now();
    const tasks = longest.stop();
    app.lastTraining = { ...result, longestTaskMs: tasks.overallMs, longestTaskDuringStepsMs: tasks.sinceMarkMs };
    showEvaluation(result);
    $("train-progress-text").textContent =
      `${result.stopped ? "Stopped" : "Trained"} in ${formatSeconds(result.seconds)} on ${result.train_count} samples ` +
      (result.backbone ? `(their ${result.trained_rows} embeddings with the augmented views; ` : "(") +
      `batch size ${result.batch_size}); ${result.held_out_count} held out.`;
    startPredicting();
  } catch (error) {
    longest.stop();
    console.warn(error.message ?? error); // the whole Python traceback, for whoever debugs it
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

// Transfer mode: waits until every sample of `refs` is embedded, first queueing those that are
// not (restored from an earlier session, added in from-scratch mode, or whose job failed) from
// their stored pixels, a few hundred at a time.
async function embedAll(refs) {
  const queue = app.embeddings;
  await queue.restored;
  const missing = refs.filter(([classId, seq]) => !queue.has(classId, seq));
  $("train-progress-text").textContent = missing.length || queue.pending
    ? "Waiting for the hand model to embed the samples (the progress is under the classes)…"
    : "";
  for (let start = 0; start < missing.length; start += 256) {
    const byClass = new Map();
    for (const [classId, seq] of missing.slice(start, start + 256)) {
      if (!byClass.has(classId)) byClass.set(classId, []);
      byClass.get(classId).push(seq);
    }
    for (const [classId, seqs] of byClass) {
      const rows = await app.store.read(classId, seqs);
      seqs.forEach((seq, i) => rows[i] && queue.add(classId, seq, sampleBitmap(rows[i]), false, seedOf(rows[i])));
    }
  }
  await queue.idle();
  const failed = refs.filter(([classId, seq]) => !queue.has(classId, seq)).length;
  if (failed) {
    throw new Error(`${failed} sample(s) could not be embedded (${queue.failures.at(-1) ?? "no stored pixels"}): delete them or try again`);
  }
}

// The embedding queue's progress, under the classes; while training waits for it, in the
// training text too.
function showEmbedding(queue) {
  const box = $("embed-status");
  const pending = queue.pending;
  box.hidden = pending === 0;
  if (pending === 0) return;
  const total = Math.max(queue.added, pending);
  $("embed-progress").max = total;
  $("embed-progress").value = total - pending;
  const left = queue.secondsLeft;
  $("embed-progress-text").textContent =
    `The hand model is embedding new samples: ${total - pending} of ${total} done` +
    (left === null ? ". " : `, about ${formatSeconds(left)} left. `) +
    "You can keep recording; training starts once they are done.";
}

function firstLine(error) {
  const lines = String(error.message ?? error).trim().split("\n");
  return lines[lines.length - 1];
}

// Under this held-out accuracy the panel says what helps.
const LOW_ACCURACY = 0.8;

function showEvaluation(result) {
  const labels = app.model.labels;
  $("evaluation").hidden = false;
  $("held-out-accuracy").textContent =
    result.held_out_count > 0
      ? `Held-out accuracy ${(result.accuracy * 100).toFixed(1)}% on ${result.held_out_count} samples.`
      : "No samples were held out (add at least two per class).";
  const advice = $("held-out-advice");
  const low = result.held_out_count > 0 && result.accuracy < LOW_ACCURACY;
  advice.hidden = !low;
  if (low) {
    const fewest = Math.min(...trainableClasses().map((c) => app.store.count(c.id)));
    advice.textContent = app.model.backbone
      ? `That is low: the model will often pick the wrong class. What helps: more samples per class (the smallest has ${fewest}; ` +
        "30 or more each, of different people, backgrounds and angles), steady, even light, and the hand inside the box on the preview " +
        "and filling much of it (the hand model sees only that square), recorded at the distances and positions you will use it at. Then train again."
      : `That is low: the model will often pick the wrong class. What helps: more samples per class (the smallest has ${fewest}; ` +
        "a few hundred each is better), steady, even light, and the gesture inside the box on the preview, " +
        "recorded at the distances and positions you will use it at. Then train again. " +
        "The “Hand features (pretrained)” model needs far fewer samples for hand gestures.";
  }
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
  drawHand(result.hand);
  status.recovered();
  $("latency").textContent = `${latencyMs.toFixed(0)} ms per frame`;
  $("fps").textContent = `${prediction.frames.length} frames/s`;
}
app.prediction = prediction;

// The hand model's 21 landmarks over the guide box (the square it saw, mirrored as the preview),
// when its score says a hand is there; cleared otherwise.
const BONES = [
  [0, 1], [1, 2], [2, 3], [3, 4], [0, 5], [5, 6], [6, 7], [7, 8], [5, 9], [9, 10], [10, 11], [11, 12],
  [9, 13], [13, 14], [14, 15], [15, 16], [13, 17], [0, 17], [17, 18], [18, 19], [19, 20],
];
function drawHand(hand) {
  const canvas = $("landmarks");
  const box = $("guide-box");
  const side = Math.round(box.clientWidth);
  if (canvas.width !== side || canvas.height !== side) canvas.width = canvas.height = side;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, side, side);
  prediction.hand = hand ?? null;
  if (!hand || hand.score < HAND_PRESENT) return;
  const points = hand.landmarks.map(([x, y]) => [x * side, y * side]);
  context.strokeStyle = "#4ade80";
  context.fillStyle = "#f6c343";
  context.lineWidth = 2;
  for (const [a, b] of BONES) {
    context.beginPath();
    context.moveTo(...points[a]);
    context.lineTo(...points[b]);
    context.stroke();
  }
  for (const [x, y] of points) {
    context.beginPath();
    context.arc(x, y, 3, 0, 2 * Math.PI);
    context.fill();
  }
}

// ---- keep ----

async function modelLoaded(info, source) {
  app.model = { labels: info.labels, size: info.size, backbone: info.backbone ?? null };
  app.timings.model ??= performance.now();
  if (!info.backbone) $("input-size").value = String(info.size);
  const kind = info.backbone
    ? `a head on the hand model ${info.backbone.name}, which sees ${info.size} × ${info.size}`
    : `input ${info.size} × ${info.size}`;
  $("keep-message").textContent = `Loaded the model (${source}): classes ${info.labels.join(", ")}, ${kind}.`;
  updateButtons();
  stopPredicting();
  await new Promise((resolve) => setTimeout(resolve));
  startPredicting();
}

async function saveToBrowser() {
  if (!app.storage) {
    throw new Error("This browser keeps nothing for the site here (a private window may refuse storage): download the model instead.");
  }
  const bytes = await engine.save();
  try {
    await app.storage.put("models", { id: "last", bytes, savedAt: new Date().toISOString(), labels: app.model.labels });
  } catch (error) {
    throw new Error(storageFailure(error));
  }
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
    // The error's own sentence, without the Python exception's dotted class name before it.
    status.banner(`Could not load ${file.name}: ${firstLine(error).replace(/^[\w.]+Error: /, "")}`, "error");
  }
  input.value = "";
}

async function clearAll() {
  if (!confirmDelete("Forget every class, sample and the saved model in this browser?")) return;
  await app.store.flush();
  await app.storage?.clear();
  app.classes = [];
  app.store.clear();
  app.embeddings?.clear();
  $("load-browser").disabled = true;
  await addClass("Class 1");
  await addClass("Class 2");
}

function guarded(work) {
  return (...args) =>
    work(...args).catch((error) => status.banner(firstLine(error), "error"));
}

// ---- start-up ----

// Reads the classes and which samples they hold (keys only: the pixels are read when shown or
// trained on), so 5,000 samples in each of three classes restore in a fraction of a second.
async function restoreSession() {
  const started = performance.now();
  app.timings.restore = { startedMs: started, ms: null };
  try {
    app.storage = await new Storage().open();
    const [classes, saved] = await Promise.all([app.storage.all("classes"), app.storage.get("models", "last")]);
    classes.sort((a, b) => a.order - b.order);
    app.store = new SampleStore(app.storage, storageFallback);
    app.embeddings = embeddingQueue(app.storage);
    await app.store.restore(classes.map((c) => c.id));
    app.classes = classes;
    const total = app.store.total();
    if (total) {
      $("keep-message").textContent =
        `Restored ${classes.length} class${classes.length === 1 ? "" : "es"} and ${total.toLocaleString("en")} samples from your last session.`;
    }
    $("load-browser").disabled = !saved;
    if (saved) $("keep-message").textContent += " A saved model is ready to load.";
  } catch (error) {
    app.storage = null;
    app.store = new SampleStore(null, storageFallback);
    app.embeddings = embeddingQueue(null);
    storageFallback("no storage");
    console.warn(`IndexedDB unavailable: ${error.message}`);
  }
  if (app.classes.length === 0) {
    await addClass("Class 1");
    await addClass("Class 2");
  }
  renderClasses();
  app.timings.restore.ms = performance.now() - started;
}

function embeddingQueue(storage) {
  const queue = new EmbeddingQueue(engine, storage, showEmbedding);
  queue.restored = queue.restore().catch((error) => {
    status.banner(`The hand model is unavailable: ${firstLine(error)}. Choose “From scratch” to train without it.`, "error");
  });
  return queue;
}

// ?mode=scratch|transfer when given, else the mode last chosen in this browser, else transfer.
function initialMode() {
  let kept = null;
  try {
    kept = localStorage.getItem(MODE_KEY);
  } catch {
    // a page that may store nothing: the default
  }
  return (new URLSearchParams(location.search).get("mode") ?? kept) === "scratch" ? "scratch" : "transfer";
}

function chooseMode(mode) {
  try {
    localStorage.setItem(MODE_KEY, mode);
  } catch {
    // kept for this visit only
  }
  setMode(mode);
}

// Transfer (the default) or from scratch: the Model select, and what each trains with.
function setMode(mode) {
  app.mode = mode;
  $("model-kind").value = mode;
  const transfer = mode === "transfer";
  $("input-size").disabled = transfer;
  $("model-hint").textContent = transfer
    ? "A pretrained hand model (MediaPipe hand landmarks) turns each sample into features once, when it is added; " +
      "only a small classifier on them is trained, in seconds. It sees the square in the box at 224 × 224. Best for hand gestures."
    : "A small network learns from the samples' pixels alone, at the input size below: it needs a few hundred samples per class.";
  const defaults = MODE_DEFAULTS[mode];
  $("epochs").value = defaults.epochs;
  $("learning-rate").value = defaults.learningRate;
}

// The server's cap on samples per class (limits.py max_samples_per_class).
async function readCap() {
  try {
    app.cap = (await trainingPolicy()).limits.max_samples_per_class ?? DEFAULT_CAP;
  } catch {
    return; // the default cap stands; training asks the server again
  }
  for (const entry of app.classes) renderCount(entry.id);
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
  $("model-kind").addEventListener("change", (event) => chooseMode(event.target.value));
  window.addEventListener("resize", placeGuideBox);
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
setMode(app.mode);
window.addEventListener("pagehide", () => app.store.flush());
charts.mount().catch((error) => status.banner(`Charts unavailable: ${error.message}`, "warning"));
app.restored = restoreSession().then(readCap);
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
