"""The results as a plain-text table for the terminal (a line per workload, measure and backends,
TF.js and jax-js side by side), and as JSON under bench/results/."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.stats import JAXJS, TFJS
from bench.targets import targets_text, time_notes

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def _number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def side_text(side: dict[str, Any], unit: str) -> str:
    """'12.3 ms [11.9-13.0] n=20', or the status and why when there is no number."""
    why = f"{side['status']}: {side['detail']}" if side["detail"] else side["status"]
    if side["median"] is None:
        return why
    spread = f" [{_number(side['min'])}-{_number(side['max'])}]" if side["n"] > 1 else ""
    text = f"{_number(side['median'])} {unit}{spread} n={side['n']}"
    return text if side["status"] == "ok" else f"{text} ({why})"


def verdict_text(row: dict[str, Any] | None) -> str:
    if row is None or row["ratio"] is None:
        return "-"
    return f"{row['ratio']:.2f} ({row['better']} {row['speedup']:.1f}x faster)"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def merged_rows(rows: list[dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """The JSON's rows (one per anchor) as the table's lines: one per workload, measure and
    backend group, {"tfjs": row, "jax-js": row} (either may be missing), in the run's order."""
    lines: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        key = (row["workload"], row["measure"], row.get("group") or row["ours_backend"])
        lines.setdefault(key, {})[row.get("anchor", TFJS)] = row
    return list(lines.values())


def _anchor_cell(line: dict[str, dict[str, Any]], anchor: str) -> str:
    row = line.get(anchor)
    return "" if row is None else _clip(side_text(row["theirs"], row["unit"]), 46)


def format_table(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"py_in_browser vs TensorFlow.js {meta.get('tfjs_version') or '?'} and jax-js "
        f"{meta.get('jaxjs_version') or '?'}",
        *meta["header_lines"],
    ]
    lines.append(
        f"{meta['mode']} run: {meta['steps']} measured steps per mode, {meta['warmup']} warm-up "
        "steps excluded; median [min-max] over samples (a sample per synced step, or per block of "
        "10 steps when synced every 10); ratio = ours/TF.js and ours/jax-js of the medians; "
        "backends: ours|TF.js|jax-js ('-': no jax-js side)."
    )
    header = ["workload", "measure", "backends", "ours", "TF.js", "ours/TF.js", "jax-js"]
    header.append("ours/jax-js")
    table = []
    for line in merged_rows(results["rows"]):
        first = line.get(TFJS) or line[JAXJS]
        table.append(
            [
                first["workload"],
                first["measure"],
                first.get("group") or f"{first['ours_backend']}|{first['theirs_backend']}",
                _clip(side_text(first["ours"], first["unit"]), 46),
                _anchor_cell(line, TFJS),
                verdict_text(line.get(TFJS)),
                _anchor_cell(line, JAXJS),
                verdict_text(line.get(JAXJS)),
            ]
        )
    widths = [max(len(cells[i]) for cells in [header, *table]) for i in range(len(header))]
    render = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    lines += ["", render(header), render(["-" * w for w in widths]), *map(render, table)]
    if meta.get("targets"):
        lines += [
            "",
            "Targets (issue 29: ours/jax-js; issue 26's H1: ours/TF.js; medians of this run):",
        ]
        lines += targets_text(meta["targets"])
    lines += time_notes(results.get("profiles") or [])
    return "\n".join(line.rstrip() for line in lines)


def write_json(results: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{results['meta']['mode']}.json"
    path.write_text(json.dumps(results, indent=1, allow_nan=False))
    return path


def write_named(name: str, results: dict[str, Any]) -> Path:
    """The results of one of bench's side measurements (python -m bench.<name>) as
    RESULTS_DIR/<name>-<time>.json; prints where."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")
    return path
