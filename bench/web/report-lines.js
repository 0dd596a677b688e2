// The results' rows (one per anchor: ours vs TF.js, ours vs jax-js) as the report's lines: one per
// workload, measure and backend group, ours' numbers shared; bench/report.py does the same for the
// terminal.
export function mergedLines(rows) {
  const lines = new Map();
  for (const row of rows) {
    const group = row.group ?? `${row.ours_backend}|${row.theirs_backend}`;
    const key = `${row.workload}\u0000${row.measure}\u0000${group}`;
    if (!lines.has(key)) lines.set(key, { workload: row.workload, measure: row.measure, group, unit: row.unit, ours: row.ours, tfjs: null, jaxjs: null });
    lines.get(key)[(row.anchor ?? "tfjs") === "tfjs" ? "tfjs" : "jaxjs"] = row;
  }
  return [...lines.values()];
}
