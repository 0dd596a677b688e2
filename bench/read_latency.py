"""`python -m bench.read_latency`: what reading a small result back costs, per browser and backend.

Every predict, evaluate and live frame ends in a read (tensor.numpy()), so a read's fixed latency
bounds the frame rate of live prediction. Per browser, one engine page; per backend, an
elementwise op on 4 floats and its read, `--reads` times after a warm-up: the median and the
slowest ms, wall time in the worker (Python to JS and back included).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from playwright.sync_api import sync_playwright

from bench.recovery_overhead import open_page, run
from bench.report import write_named
from bench.server import dev_server
from tests_e2e.browsers import launch_chromium, launch_firefox, xvfb_display

BACKENDS = ("webgpu", "webgl2", "cpu")
READS = """
import time
await pib.init({backend!r})
x = pib.tensor(np.ones((4,), np.float32))
await (x * 2.0).numpy()
ms = []
for _ in range({reads}):
    began = time.perf_counter()
    await (x * 2.0).numpy()
    ms.append((time.perf_counter() - began) * 1000.0)
ms
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.read_latency", description=__doc__)
    parser.add_argument("--browsers", default="chromium,firefox")
    parser.add_argument("--reads", type=int, default=30)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results: dict[str, Any] = {"args": vars(args), "rows": []}
    with dev_server() as base_url, sync_playwright() as driver, xvfb_display() as display:
        for name in args.browsers.split(","):
            browser = (
                launch_firefox(driver, display) if name == "firefox" else launch_chromium(driver)
            )
            try:
                page = open_page(browser, f"{base_url}/console?backend=cpu")
                for backend in BACKENDS:
                    ms = run(page, READS.format(backend=backend, reads=args.reads))
                    row = {"browser": name, "backend": backend, "ms": ms}
                    results["rows"].append(row)
                    print(
                        f"{name:<8} {backend:<6} read of 4 floats: median "
                        f"{statistics.median(ms):.1f} ms, slowest {max(ms):.1f} ms",
                        flush=True,
                    )
            finally:
                browser.close()
    write_named("read-latency", results)


if __name__ == "__main__":
    main()
