"""The runtime snapshot the server offers first visits: named by /api/engine only for the current
engine build, served cached for good, and kept only when its header records that build."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.engine_bundle import ensure_engine_bundle
from server.main import create_app
from server.runtime_snapshot import (
    SNAPSHOT_COOKIE,
    SnapshotRejected,
    build_version,
    store_snapshot,
)
from server.settings import Paths


def framed(version: str, image: bytes = b"\1" * 64) -> bytes:
    """A snapshot in the stored layout (web/js/framed.js): uint32 length, JSON header, image."""
    header = json.dumps({"version": version, "libraries": {}}).encode()
    return struct.pack("<I", len(header)) + header + image


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(cache=tmp_path / "cache")


def test_engine_names_the_snapshot_of_its_build_only_once_stored(paths: Paths) -> None:
    """The pages preload it too, so it downloads while the worker's scripts load."""
    client = TestClient(create_app(paths))
    digest = ensure_engine_bundle(paths).digest
    assert client.get("/api/engine").json()["snapshot_url"] is None
    assert 'rel="preload"' not in client.get("/console").text

    data = framed(build_version(digest) + " jspi=true")
    store_snapshot(paths, digest, data)
    url = client.get("/api/engine").json()["snapshot_url"]
    assert url is not None and digest in url
    for page in ("/", "/console"):
        assert f'<link rel="preload" href="{url}" as="fetch" crossorigin>' in client.get(page).text
    # A browser that holds this build's snapshot itself is not made to read the server's too.
    client.cookies.set(SNAPSHOT_COOKIE, digest)
    assert 'rel="preload"' not in client.get("/console").text
    client.cookies.set(SNAPSHOT_COOKIE, "an-older-build")
    assert 'rel="preload"' in client.get("/console").text
    served = client.get(url, headers={"accept-encoding": "gzip"})
    assert served.content == data
    assert served.headers["content-encoding"] == "gzip"  # the precompressed sibling
    assert "immutable" in served.headers["cache-control"]
    assert client.get(url.replace(digest, "0" * len(digest))).status_code == 404


def test_snapshot_offer_can_be_turned_off(paths: Paths, monkeypatch: pytest.MonkeyPatch) -> None:
    digest = ensure_engine_bundle(paths).digest
    store_snapshot(paths, digest, framed(build_version(digest) + " jspi=true"))
    monkeypatch.setenv("PIB_SERVER_SNAPSHOT", "off")
    assert TestClient(create_app(paths)).get("/api/engine").json()["snapshot_url"] is None


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (framed(build_version("another-build") + " jspi=true"), "made for"),
        (framed("nonsense"), "made for"),
        (b"\4\0\0\0{not json", "not JSON"),
        (struct.pack("<I", 2) + b"[]", "no version"),
        (b"\0", "too short"),
    ],
)
def test_uploads_that_are_not_a_snapshot_of_the_build_are_refused(
    paths: Paths, data: bytes, reason: str
) -> None:
    with pytest.raises(SnapshotRejected, match=reason):
        store_snapshot(paths, "c" * 16, data)
    assert not paths.runtime_snapshots.exists() or not any(paths.runtime_snapshots.iterdir())


def test_a_new_build_replaces_the_old_builds_snapshot(paths: Paths) -> None:
    for digest in ("a" * 16, "b" * 16):
        store_snapshot(paths, digest, framed(build_version(digest) + " jspi=true"))
    assert [p.name for p in paths.runtime_snapshots.iterdir()] == ["b" * 16]


def test_a_snapshot_made_without_jspi_is_kept_beside_and_named_apart(paths: Paths) -> None:
    """WebKit lacks JSPI and restores only an image JavaScriptCore made: set-up's WebKit snapshot
    is a second file, which /api/engine names for browsers without JSPI."""
    client = TestClient(create_app(paths))
    digest = ensure_engine_bundle(paths).digest
    with_jspi = framed(build_version(digest) + " jspi=true")
    without = framed(build_version(digest) + " jspi=false", b"\2" * 64)
    store_snapshot(paths, digest, with_jspi)
    assert client.get("/api/engine").json()["snapshot_url_without_jspi"] is None
    store_snapshot(paths, digest, without)
    described = client.get("/api/engine").json()
    assert client.get(described["snapshot_url"]).content == with_jspi
    assert client.get(described["snapshot_url_without_jspi"]).content == without
    assert client.get(f"/runtime-snapshot/{digest}/other.snapshot").status_code == 404
    # Pages preload the one the browser will take, guessed from its user agent.
    agents = {
        "Mozilla/5.0 (Macintosh) AppleWebKit/605.1.15 (KHTML, like Gecko) Safari/605.1.15": "snapshot_url_without_jspi",
        "Mozilla/5.0 (X11) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36": "snapshot_url",
        "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0": "snapshot_url",
    }
    for agent, key in agents.items():
        page = client.get("/console", headers={"user-agent": agent}).text
        assert f'<link rel="preload" href="{described[key]}"' in page, agent
