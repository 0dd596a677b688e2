// pib.profile output as a per-kernel table (name, calls, total ms, share), slowest kernel first.

// Entries may already be aggregated ({name, ms, calls}) or one per call ({name, ms}); both fold
// into one row per kernel name so a slow kernel stands out whatever the backend reports.
export function aggregateKernels(profile) {
  const rows = new Map();
  for (const kernel of profile?.kernels ?? []) {
    const row = rows.get(kernel.name) ?? { name: kernel.name, calls: 0, ms: 0 };
    row.calls += kernel.calls ?? 1;
    row.ms += Number(kernel.ms) || 0;
    rows.set(kernel.name, row);
  }
  const total = [...rows.values()].reduce((sum, row) => sum + row.ms, 0);
  return [...rows.values()]
    .map((row) => ({ ...row, share: total > 0 ? row.ms / total : 0 }))
    .sort((a, b) => b.ms - a.ms);
}

function cell(tag, text, className) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (className) element.className = className;
  // Inline, so the table reads well on any page without that page's stylesheet knowing about it.
  if (className?.includes("num")) element.style.textAlign = "right";
  element.style.padding = "0.1rem 0.6rem";
  return element;
}

// A <table> with a caption summing kernel and wall time; `limit` keeps the slowest rows only.
export function renderProfileTable(profile, { title = "Kernels", limit = Infinity } = {}) {
  const table = document.createElement("table");
  table.className = "profile-table";
  table.style.borderCollapse = "collapse";
  table.style.fontVariantNumeric = "tabular-nums";
  const rows = aggregateKernels(profile);
  const kernelMs = rows.reduce((sum, row) => sum + row.ms, 0);
  const wall = profile?.wall_ms != null ? `, wall ${Number(profile.wall_ms).toFixed(2)} ms` : "";
  table.append(cell("caption", `${title}: ${rows.length} kernels, ${kernelMs.toFixed(2)} ms in kernels${wall}`));
  const head = table.createTHead().insertRow();
  for (const name of ["kernel", "calls", "total ms", "share"]) head.append(cell("th", name));
  const body = table.createTBody();
  for (const row of rows.slice(0, limit)) {
    const tr = body.insertRow();
    tr.append(cell("td", row.name), cell("td", String(row.calls), "num"), cell("td", row.ms.toFixed(3), "num"));
    const share = cell("td", `${(row.share * 100).toFixed(1)} %`, "num share");
    // A bar behind the number: the eye finds the slow kernel before reading any digits.
    share.style.background = `linear-gradient(90deg, #f4b26b ${row.share * 100}%, transparent 0)`;
    tr.append(share);
  }
  if (rows.length > limit) body.insertRow().append(cell("td", `… ${rows.length - limit} more`));
  return table;
}

// The developer panel on the app page: runs a tiny op under pib.profile and shows its table.
export const DEMO_PROFILE_CODE = `
_rng = np.random.default_rng(0)
_a = pib.tensor(_rng.standard_normal((128, 128)).astype("float32"))
_b = pib.tensor(_rng.standard_normal((128, 128)).astype("float32"))
async def _profiled():
    await pib.sum(pib.softmax(pib.relu(_a @ _b))).numpy()
await pib.profile(_profiled)
`;

export function mountDeveloperPanel(root, pib) {
  const button = root.querySelector("button");
  const output = root.querySelector("output");
  button.addEventListener("click", async () => {
    button.disabled = true;
    output.replaceChildren("profiling…");
    try {
      await pib.ready;
      const profile = await pib.runPython(DEMO_PROFILE_CODE);
      output.replaceChildren(renderProfileTable(profile, { title: `sum(softmax(relu(a @ b))) on ${profile.backend ?? pib.backend}` }));
    } catch (error) {
      output.replaceChildren(cell("pre", error.message, "error"));
    } finally {
      button.disabled = false;
    }
  });
}
