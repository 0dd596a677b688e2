// A results JSON (bench/results/*.json) as HTML: the header, a chart per workload (ours, TF.js,
// jax-js), the comparison table, issue 29's targets and the kernel profiles.
import { renderProfileTable } from "/js/profiler-table.js";
import { renderCharts } from "./report-charts.js";
import { mergedLines } from "./report-lines.js";

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
  const versions = `TensorFlow.js ${meta.tfjs_version ?? "?"} and jax-js ${meta.jaxjs_version ?? "?"}`;
  box.append(element("h2", `py_in_browser ${meta.git_commit} vs ${versions} · ${meta.mode} run, ${meta.started}`));
  const list = element("ul");
  for (const line of meta.header_lines ?? []) list.append(element("li", line));
  box.append(list);
  return box;
}

function verdictCell(row) {
  if (!row) return element("td", "", "num");
  const verdict = row.ratio == null ? "–" : `${row.ratio.toFixed(2)} (${row.better} ${row.speedup.toFixed(1)}x faster)`;
  return element("td", verdict, row.better === "ours" ? "num faster-ours" : row.ratio == null ? "num" : "num faster-theirs");
}

function anchorCell(row) {
  if (!row) return element("td", "", "num");
  return element("td", sideText(row.theirs, row.unit), row.theirs.median == null ? "status" : "num");
}

// One line per workload, measure and backends: ours, then TF.js and jax-js with their ratios.
function resultsTable(rows) {
  const table = element("table", "", "results");
  const head = table.createTHead().insertRow();
  for (const name of ["workload", "measure", "backends (ours|TF.js|jax-js)", "ours", "TF.js", "ours/TF.js", "jax-js", "ours/jax-js"]) head.append(element("th", name));
  const body = table.createTBody();
  for (const line of mergedLines(rows)) {
    const tr = body.insertRow();
    tr.append(element("td", line.workload), element("td", line.measure), element("td", line.group));
    tr.append(element("td", sideText(line.ours, line.unit), line.ours.median == null ? "status" : "num"));
    tr.append(anchorCell(line.tfjs), verdictCell(line.tfjs), anchorCell(line.jaxjs), verdictCell(line.jaxjs));
  }
  return table;
}

function targets(verdicts) {
  const box = element("section");
  box.append(element("h2", "Targets (issue 29: ours/jax-js; issue 26's H1: ours/TF.js; medians of this run)"));
  const list = element("ul");
  for (const v of verdicts) {
    const state = v.row == null ? "not measured" : v.met == null ? "no ratio" : v.met ? "met" : "missed";
    const ratio = v.ratio == null ? "" : ` ${v.ratio.toFixed(2)}`;
    const item = element("li", `${v.target} | ${v.row ?? ""}:${ratio} ${state}`, v.met === false ? "missed" : "");
    if (v.bound) item.append(element("div", `where the time goes: ${v.bound}`, "bound"));
    list.append(item);
  }
  box.append(list);
  return box;
}

function profiles(entries) {
  const box = element("section");
  box.append(element("h2", "Where the time goes: one profiled step per workload"));
  for (const entry of entries) {
    const jax = entry.jaxjs_backend ? ` vs jax-js ${entry.jaxjs_backend}` : "";
    box.append(element("h3", `${entry.workload} · ours ${entry.ours_backend} vs TF.js ${entry.theirs_backend}${jax}`));
    const pair = element("div", "", "profiles");
    const sides = [["ours", `ours (${entry.ours_backend})`], ["theirs", `TF.js (${entry.theirs_backend})`], ["jaxjs", `jax-js (${entry.jaxjs_backend})`]];
    for (const [side, title] of sides) {
      const profile = entry[side];
      if (profile) pair.append(renderProfileTable(profile, { title: `${title}${profile.note ? ` – ${profile.note}` : ""}`, limit: 15 }));
    }
    box.append(pair);
  }
  return box;
}

export function renderReport(root, results) {
  const table = element("section");
  table.append(element("h2", `Results (${results.meta.mode}: ${results.meta.steps} measured steps per mode, warm-up ${results.meta.warmup} excluded)`));
  table.append(resultsTable(results.rows));
  const charts = element("section", "", "charts");
  charts.append(element("h2", "Medians per workload (log scale; lower is faster, GFLOP/s higher)"));
  root.replaceChildren(header(results.meta), charts, table, targets(results.meta.targets ?? []), profiles(results.profiles ?? []));
  renderCharts(charts, mergedLines(results.rows));
}
