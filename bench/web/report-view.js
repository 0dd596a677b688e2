// A results JSON (bench/results/*.json) as HTML: the header, the comparison table, kernel profiles.
import { renderProfileTable } from "/js/profiler-table.js";

function element(tag, text = "", className = "") {
  const node = document.createElement(tag);
  node.textContent = text;
  if (className) node.className = className;
  return node;
}

function number(value) {
  if (value == null) return "";
  if (Math.abs(value) >= 100) return value.toFixed(0);
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(value >= 1 ? 2 : 3);
}

// One side's cell: "median [min–max] n=20", or why there is no number.
function sideText(side, unit) {
  if (side.median == null) return side.status + (side.detail ? `: ${side.detail}` : "");
  const spread = side.n > 1 ? ` [${number(side.min)}–${number(side.max)}]` : "";
  const note = side.status === "ok" ? "" : ` (${side.status}${side.detail ? `: ${side.detail}` : ""})`;
  return `${number(side.median)} ${unit}${spread} n=${side.n}${note}`;
}

function header(meta) {
  const box = element("section");
  box.append(element("h2", `py_in_browser ${meta.git_commit} vs TensorFlow.js ${meta.tfjs_version ?? "?"} · ${meta.mode} run, ${meta.started}`));
  const list = element("ul");
  for (const line of meta.header_lines ?? []) list.append(element("li", line));
  box.append(list);
  return box;
}

function resultsTable(rows) {
  const table = element("table", "", "results");
  const head = table.createTHead().insertRow();
  for (const name of ["workload", "measure", "ours on", "TF.js on", "ours", "TF.js", "ours/TF.js"]) head.append(element("th", name));
  const body = table.createTBody();
  for (const row of rows) {
    const tr = body.insertRow();
    tr.append(element("td", row.workload, ""), element("td", row.measure));
    tr.append(element("td", row.ours_backend), element("td", row.theirs_backend));
    tr.append(element("td", sideText(row.ours, row.unit), row.ours.median == null ? "status" : "num"));
    tr.append(element("td", sideText(row.theirs, row.unit), row.theirs.median == null ? "status" : "num"));
    const verdict = row.ratio == null ? "–" : `${row.ratio.toFixed(2)} (${row.better} ${row.speedup.toFixed(1)}x faster)`;
    tr.append(element("td", verdict, row.better === "ours" ? "num faster-ours" : row.better === "TF.js" ? "num faster-theirs" : "num"));
  }
  return table;
}

function profiles(entries) {
  const box = element("section");
  box.append(element("h2", "Where the time goes: one profiled step per workload"));
  for (const entry of entries) {
    box.append(element("h3", `${entry.workload} · ours ${entry.ours_backend} vs TF.js ${entry.theirs_backend}`));
    const pair = element("div", "", "profiles");
    if (entry.ours) pair.append(renderProfileTable(entry.ours, { title: `ours (${entry.ours_backend})`, limit: 15 }));
    if (entry.theirs) {
      pair.append(renderProfileTable(entry.theirs, { title: `TF.js (${entry.theirs_backend})${entry.theirs.note ? ` – ${entry.theirs.note}` : ""}`, limit: 15 }));
    }
    box.append(pair);
  }
  return box;
}

export function renderReport(root, results) {
  const table = element("section");
  table.append(element("h2", `Results (${results.meta.mode}: ${results.meta.steps} measured steps per mode, warm-up ${results.meta.warmup} excluded)`));
  table.append(resultsTable(results.rows));
  root.replaceChildren(header(results.meta), table, profiles(results.profiles ?? []));
}
