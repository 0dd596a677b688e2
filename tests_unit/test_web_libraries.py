"""The pages' pinned browser libraries (uPlot, axe-core): fetched by setup from npm, checked
against the tarball's sha256, detected when altered, served same-origin under /lib/."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server import web_libraries
from server.main import create_app
from server.runtime_setup import SetupError
from server.settings import WEB_LIBRARIES, Paths
from server.web_libraries import ensure_web_libraries, library_folder, web_library_problems


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    paths = Paths(cache=tmp_path_factory.mktemp("cache"))
    ensure_web_libraries(paths, log=lambda _: None)
    return paths


def test_setup_caches_every_pinned_file_verified(cache: Paths) -> None:
    assert web_library_problems(cache) == []
    assert (library_folder(cache, WEB_LIBRARIES[0]) / "uPlot.esm.js").read_text().count(
        "uPlot"
    ) > 10
    assert not list(cache.cache.rglob("*.tgz"))


def test_an_altered_file_is_detected(cache: Paths, tmp_path: Path) -> None:
    copy = Paths(cache=tmp_path / "cache")
    shutil.copytree(cache.cache, copy.cache)
    (library_folder(copy, WEB_LIBRARIES[1]) / "axe.min.js").write_text("/* not axe */")
    assert web_library_problems(copy) == ["corrupted axe-core@4.11.0/axe.min.js"]


def test_a_tarball_with_another_hash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = dataclasses.replace(WEB_LIBRARIES[0], tarball_sha256="0" * 64)
    monkeypatch.setattr(web_libraries, "WEB_LIBRARIES", (wrong,))
    paths = Paths(cache=tmp_path / "cache")
    with pytest.raises(SetupError, match="refusing it"):
        ensure_web_libraries(paths, log=lambda _: None)
    assert not library_folder(paths, wrong).exists()


def test_served_under_lib_with_the_isolation_headers(cache: Paths) -> None:
    client = TestClient(create_app(cache))
    response = client.get("/lib/uplot/uPlot.esm.js")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.headers["cross-origin-embedder-policy"] == "require-corp"
    assert client.get("/lib/axe-core/axe.min.js").status_code == 200
    for missing in ("/lib/uplot/MANIFEST.json", "/lib/leftpad/index.js", "/lib/uplot/..%2Fx"):
        assert client.get(missing).status_code == 404, missing
