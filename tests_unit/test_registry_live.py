"""The registry under a real uvicorn on loopback: parallel uploads and reads lose or corrupt
nothing, the upload cap answers 503, and a server killed mid-upload leaves no trace of it."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import py_in_browser as pib
from py_in_browser import layers, model_file
from server.background import RegistryProcess
from server.postgres_sandbox import PostgresServer

GENEROUS = "upload=1000/6000,delete=1000/6000,permit=1000/6000"
# How long a step may take before the test calls it stuck. Deadlines only end a failing run, so
# they are generous: on a loaded machine (two cores shared by several test runs) a request can
# take seconds, and a passing run is slower, not different.
PATIENCE_S = 120.0


def distinct_model(seed: int, width: int = 16) -> bytes:
    model = pib.Sequential(
        [layers.Dense(width, activation="relu", input_shape=(32,)), layers.Dense(3)],
        name=f"model_{seed}",
        seed=seed,
    )
    return asyncio.run(model.save(labels=["a", "b", "c"]))


@pytest.fixture
def live(tmp_path: Path, database_url: str | None) -> Iterator[RegistryProcess]:
    server = RegistryProcess(
        tmp_path / "data", database_url, PIB_RATE_LIMITS=GENEROUS, PIB_MAX_CONCURRENT_UPLOADS="32"
    )
    server.start(PATIENCE_S)
    yield server
    server.stop()


def upload(client: httpx.Client, data: bytes, name: str) -> httpx.Response:
    return client.post("/api/models", files={"file": ("m.pibmodel", data)}, data={"name": name})


def test_20_parallel_uploads_and_reads_lose_nothing(live: RegistryProcess) -> None:
    files = {f"model_{i}": distinct_model(i) for i in range(20)}

    def publish_and_read(name: str) -> tuple[str, str]:
        with httpx.Client(base_url=live.url, timeout=PATIENCE_S) as client:
            created = upload(client, files[name], name)
            assert created.status_code == 201, created.text
            body = created.json()
            fetched = client.get(body["file_url"])
            assert fetched.status_code == 200
            assert hashlib.sha256(fetched.content).hexdigest() == body["sha256"]
            client.get("/api/models", params={"limit": 100}).raise_for_status()
            return name, body["id"]

    with ThreadPoolExecutor(20) as pool:
        ids = dict(pool.map(publish_and_read, files))
    with httpx.Client(base_url=live.url, timeout=PATIENCE_S) as client:
        listed = client.get("/api/models", params={"limit": 100}).json()
        assert listed["total"] == 20
        assert {item["name"]: item["id"] for item in listed["items"]} == ids
        for name, model_id in ids.items():
            stored = client.get(f"/api/models/{model_id}/file").content
            assert hashlib.sha256(stored).hexdigest() == hashlib.sha256(files[name]).hexdigest()


def open_upload(url: str, body_size: int) -> socket.socket:
    """An upload whose headers promise `body_size` bytes, of which only a part is sent."""
    host, port = url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)))
    head = (
        "POST /api/models HTTP/1.1\r\n"
        f"Host: {host}\r\nContent-Type: multipart/form-data; boundary=B\r\n"
        f"Content-Length: {body_size}\r\n\r\n"
    )
    connection.sendall(head.encode() + b'--B\r\nContent-Disposition: form-data; name="file"')
    return connection


def test_uploads_beyond_the_concurrent_cap_get_503(
    tmp_path: Path, database_url: str | None
) -> None:
    server = RegistryProcess(
        tmp_path / "data", database_url, PIB_RATE_LIMITS=GENEROUS, PIB_MAX_CONCURRENT_UPLOADS="1"
    ).start(PATIENCE_S)
    try:
        held = open_upload(server.url, 100_000)
        with httpx.Client(base_url=server.url, timeout=PATIENCE_S) as client:
            # Once the server waits for the rest of that body, the next upload is refused.
            deadline = time.monotonic() + PATIENCE_S
            while (refused := upload(client, distinct_model(1), "second")).status_code != 503:
                assert refused.status_code == 201 and time.monotonic() < deadline
                time.sleep(0.1)
            assert refused.headers["retry-after"] == "1"
            held.close()
            deadline = time.monotonic() + PATIENCE_S
            while (response := upload(client, distinct_model(1), "later")).status_code == 503:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert response.status_code == 201
    finally:
        server.stop()


def test_the_upload_cap_holds_across_server_processes_on_postgresql(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    """Two processes behind one PostgreSQL registry share its one upload slot; a killed holder
    gives its slot back (its connection drops, and its advisory lock with it)."""
    url = postgres_server.database()
    settings = {"PIB_RATE_LIMITS": GENEROUS, "PIB_MAX_CONCURRENT_UPLOADS": "1"}
    first = RegistryProcess(tmp_path / "a", url, **settings).start(PATIENCE_S)
    second = RegistryProcess(tmp_path / "b", url, **settings).start(PATIENCE_S)
    try:
        held = open_upload(first.url, 100_000)
        with httpx.Client(base_url=second.url, timeout=PATIENCE_S) as client:
            deadline = time.monotonic() + PATIENCE_S
            while (refused := upload(client, distinct_model(1), "second")).status_code != 503:
                assert refused.status_code == 201 and time.monotonic() < deadline
                time.sleep(0.1)
            first.kill()
            held.close()
            deadline = time.monotonic() + PATIENCE_S
            while (response := upload(client, distinct_model(1), "later")).status_code == 503:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert response.status_code == 201
    finally:
        first.stop()
        second.stop()


def test_killing_the_server_mid_upload_leaves_no_half_written_model(
    tmp_path: Path, database_url: str | None
) -> None:
    data = tmp_path / "data"
    server = RegistryProcess(data, database_url, PIB_RATE_LIMITS=GENEROUS).start(PATIENCE_S)
    big = distinct_model(7, width=4096)  # ~0.5 MB: each upload spends time in the transfer
    published: list[str] = []
    stop = threading.Event()

    def keep_uploading() -> None:
        with httpx.Client(base_url=server.url, timeout=PATIENCE_S) as client:
            while not stop.is_set():
                try:
                    response = upload(client, big, "during the kill")
                except httpx.HTTPError:
                    return
                if response.status_code == 201:
                    published.append(response.json()["id"])

    half_sent = open_upload(server.url, len(big) + 500)
    half_sent.sendall(big[: len(big) // 2])
    workers = [threading.Thread(target=keep_uploading) for _ in range(6)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + PATIENCE_S
    while len(published) < 3:  # uploads are flowing: the kill lands in the middle of some
        assert time.monotonic() < deadline, "uploads did not go through before the kill"
        time.sleep(0.05)
    server.kill()
    stop.set()
    for worker in workers:
        worker.join()
    half_sent.close()

    restarted = RegistryProcess(data, database_url, PIB_RATE_LIMITS=GENEROUS).start(PATIENCE_S)
    try:
        with httpx.Client(base_url=restarted.url, timeout=PATIENCE_S) as client:
            listed = client.get("/api/models", params={"limit": 100}).json()
            visible = [item["id"] for item in listed["items"]]
            # Every answered upload is there; anything else visible is whole.
            assert set(published) <= set(visible), (len(published), listed["total"], len(visible))
            for item in listed["items"]:
                stored = client.get(item["file_url"]).content
                assert stored == big
                assert hashlib.sha256(stored).hexdigest() == item["sha256"]
                model_file.read_header(stored)
            assert upload(client, distinct_model(8), "after restart").status_code == 201
    finally:
        restarted.stop()
    if database_url is None:
        import sqlite3

        connection = sqlite3.connect(data / "registry.sqlite3")
        assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        connection.close()
