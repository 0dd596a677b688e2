// A bar chart per workload drawn by uPlot (the pinned library the app's charts use, at /lib/uplot/):
// one group of bars per measure and backends, a bar per side (ours, TF.js, jax-js) at its median.
// The y scale is logarithmic: the sides differ by up to three orders of magnitude on software GPUs.
import uPlot from "/lib/uplot/uPlot.esm.js";

const SIDES = [
  { label: "ours", color: "#2563eb", value: (line) => line.ours.median },
  { label: "TF.js", color: "#d97706", value: (line) => line.tfjs?.theirs.median },
  { label: "jax-js", color: "#059669", value: (line) => line.jaxjs?.theirs.median },
];
const OFFSETS = [-0.27, 0, 0.27]; // each side's bar beside its group's centre

// Short group labels under the x axis: "every step cpu|wasm|wasm".
function shortLabel(line) {
  const measure = line.measure
    .replace(/^(train step|matmul), synced /, "")
    .replace("predict+argmax+read back, ms", "predict")
    .replace("graph model to embedding+read back, ms per frame", "per frame")
    .replace(/, ms$/, "")
    .replace("ready, ", "")
    .replace(" training step after ready", "");
  return `${measure} ${line.group}`;
}

// uPlot wants one shared x array: three x slots per group, each side's value only in its own.
function chartData(lines) {
  const x = [];
  const ys = SIDES.map(() => []);
  lines.forEach((line, group) => {
    SIDES.forEach((side, s) => {
      x.push(group + OFFSETS[s]);
      ys.forEach((y, t) => y.push(t === s ? (side.value(line) ?? null) : null));
    });
  });
  return [x, ...ys];
}

function chart(lines, width) {
  const unit = lines[0].unit;
  const labels = lines.map(shortLabel);
  const bars = uPlot.paths.bars({ size: [0.9, 40] });
  return new uPlot(
    {
      title: `${lines[0].workload} (${unit}${unit === "GFLOP/s" ? ", higher is better" : ", lower is better"})`,
      width,
      height: 260,
      scales: { x: { time: false, range: [-0.6, lines.length - 0.4] }, y: { distr: 3 } },
      axes: [
        { splits: () => lines.map((_, i) => i), values: (_, splits) => splits.map((i) => labels[i] ?? ""), size: 40 },
        { label: unit },
      ],
      series: [{ label: "group", value: (_, x) => labels[Math.round(x)] ?? "" }, ...SIDES.map((side) => ({ label: side.label, fill: side.color, stroke: side.color, paths: bars, points: { show: false } }))],
    },
    chartData(lines),
  );
}

export function renderCharts(root, lines) {
  const byWorkload = new Map();
  for (const line of lines) {
    if (!byWorkload.has(line.workload)) byWorkload.set(line.workload, []);
    byWorkload.get(line.workload).push(line);
  }
  const width = Math.max(480, Math.min(root.clientWidth || 960, 1200));
  for (const workloadLines of byWorkload.values()) {
    const box = document.createElement("div");
    box.className = "chart";
    root.append(box);
    // Start-up mixes measures an order of magnitude apart: one chart per measure keeps both legible.
    const groups = workloadLines[0].workload === "start-up" ? [...new Set(workloadLines.map((l) => l.measure))].map((m) => workloadLines.filter((l) => l.measure === m)) : [workloadLines];
    for (const group of groups) box.append(chart(group, width).root);
  }
}
