"""A short, bounded load run of the model registry on loopback, on SQLite and on PostgreSQL.

    python -m bench.registry_load [--seconds 5] [--clients 8]

Starts the dev server (uvicorn, one process) on each database, publishes one gesture-sized model
(~0.2 MB), then for `--seconds` each measures requests per second and latency of
GET /api/models/{id}/file (every answer's sha256 checked) and of POST /api/models, with
`--clients` threads each holding a keep-alive connection. Also reports how long the throwaway
PostgreSQL takes to start (initdb + pg_ctl), the set-up the PostgreSQL tests add.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

import py_in_browser as pib
from py_in_browser import layers
from server.background import RegistryProcess
from server.postgres_sandbox import PostgresServer

UNLIMITED = "upload=1000000/60000000,delete=1000000/60000000,permit=1000000/60000000"


def gesture_sized_model() -> bytes:
    model = pib.Sequential(
        [
            layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
            layers.MaxPool2D(2),
            layers.Flatten(),
            layers.Dense(24, activation="relu"),
            layers.Dense(4, activation="softmax"),
        ]
    )
    return asyncio.run(model.save(labels=["fist", "palm", "point", "none"]))


def measure(
    seconds: float, clients: int, url: str, request: Callable[[httpx.Client], object]
) -> dict[str, float]:
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client_loop() -> None:
        mine = []
        with httpx.Client(base_url=url, timeout=60) as client:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                request(client)
                mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - began
    ordered = sorted(latencies)
    return {
        "requests": len(latencies),
        "per_s": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(ordered),
        "p95_ms": 1000 * ordered[int(0.95 * (len(ordered) - 1))],
    }


def run_on(database_url: str | None, data_dir: Path, seconds: float, clients: int) -> dict:
    data = gesture_sized_model()
    digest = hashlib.sha256(data).hexdigest()
    server = RegistryProcess(
        data_dir, database_url, PIB_RATE_LIMITS=UNLIMITED, PIB_MAX_CONCURRENT_UPLOADS="1000"
    ).start()
    try:

        def publish(client: httpx.Client) -> str:
            response = client.post(
                "/api/models", files={"file": ("m.pibmodel", data)}, data={"name": "bench"}
            )
            assert response.status_code == 201, response.text
            return str(response.json()["id"])

        with httpx.Client(base_url=server.url) as client:
            file_url = f"/api/models/{publish(client)}/file"

        def fetch(client: httpx.Client) -> None:
            response = client.get(file_url)
            assert response.status_code == 200
            assert hashlib.sha256(response.content).hexdigest() == digest

        return {
            "size_bytes": len(data),
            "get_file": measure(seconds, clients, server.url, fetch),
            "post": measure(seconds, clients, server.url, publish),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        results["sqlite"] = run_on(None, Path(folder) / "data", args.seconds, args.clients)
    postgres = PostgresServer()
    began = time.monotonic()
    postgres.start()
    startup = time.monotonic() - began
    try:
        with tempfile.TemporaryDirectory() as folder:
            results["postgresql"] = run_on(
                postgres.database(), Path(folder) / "data", args.seconds, args.clients
            )
    finally:
        postgres.stop()
    print(f"model file: {results['sqlite']['size_bytes']:,} bytes; {args.clients} clients")
    print(f"{'database':<11} {'request':<28} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for kind, result in results.items():
        for name, label in (
            ("get_file", "GET /api/models/{id}/file"),
            ("post", "POST /api/models"),
        ):
            row = result[name]
            print(
                f"{kind:<11} {label:<28} {row['per_s']:>8.1f} {row['p50_ms']:>8.1f} "
                f"{row['p95_ms']:>8.1f}"
            )
    print(f"throwaway PostgreSQL start-up (initdb + pg_ctl start): {startup:.1f} s")


if __name__ == "__main__":
    main()
