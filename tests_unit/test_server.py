"""The dev server: isolation headers, MIME types, caching, health, traversal, a missing runtime."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from server.main import RUNTIME_PREFIX, create_app
from server.package_bundle import read_bundle, write_bundle
from server.settings import NUMPY_BUNDLE, REPO_ROOT, Paths

ISOLATION = {
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-embedder-policy": "require-corp",
    "x-content-type-options": "nosniff",
}


@pytest.fixture
def runtime_cache(tmp_path: Path) -> Paths:
    """A cache holding a tiny stand-in runtime: the server only serves files, it never runs them."""
    paths = Paths(cache=tmp_path / "cache")
    paths.runtime.mkdir(parents=True)
    (paths.runtime / "pyodide.asm.wasm").write_bytes(b"\0asm" + bytes(5000))
    (paths.runtime / "pyodide.asm.wasm.gz").write_bytes(gzip.compress(b"\0asm" + bytes(5000)))
    (paths.runtime / "pyodide.mjs").write_text("export const x = 1;\n" * 100)
    return paths


@pytest.fixture
def client(runtime_cache: Paths) -> TestClient:
    return TestClient(create_app(runtime_cache))


def assert_isolated(response: httpx.Response) -> None:
    for name, value in ISOLATION.items():
        assert response.headers.get(name) == value, (name, dict(response.headers))


def test_health(client: TestClient) -> None:
    response = client.get("/api/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert_isolated(response)


@pytest.mark.parametrize(
    ("path", "script"),
    [("/", "/js/trainer/main.js"), ("/console", "/js/console.js")],
)
def test_app_and_console_pages_and_their_headers(
    client: TestClient, path: str, script: str
) -> None:
    """/ is the gesture trainer, /console the engine console; both host window.pib."""
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert re.search(rf'src="/v/[0-9a-f]{{16}}{script}"', response.text), response.text
    assert "window.pib = startEngine(" in (REPO_ROOT / "web" / script.lstrip("/")).read_text()
    assert_isolated(response)


def test_page_scripts_are_cached_for_good_until_the_web_folder_changes(
    tmp_path: Path, runtime_cache: Paths
) -> None:
    """A returning visit takes the pages' module graph from the HTTP cache without a request; an
    edit yields new URLs, and a stale page's old URLs get today's files, revalidated."""
    web = tmp_path / "web"
    shutil.copytree(REPO_ROOT / "web", web)
    client = TestClient(create_app(Paths(cache=runtime_cache.cache, web=web)))
    script = re.search(r'src="(/v/\w+/js/console\.js)"', client.get("/console").text)
    assert script is not None
    first = client.get(script[1])
    assert first.status_code == 200 and "immutable" in first.headers["cache-control"]
    assert first.content == (web / "js" / "console.js").read_bytes()

    (web / "js" / "console.js").write_text("// edited\n")
    edited = re.search(r'src="(/v/\w+/js/console\.js)"', client.get("/console").text)
    assert edited is not None and edited[1] != script[1]
    assert client.get(edited[1]).text == "// edited\n"
    stale = client.get(script[1])
    assert (stale.text, stale.headers["cache-control"]) == ("// edited\n", "no-cache")
    assert client.get(script[1].replace("console.js", "../../pyproject.toml")).status_code == 404


@pytest.mark.parametrize("path", ["/", "/console"])
def test_pages_carry_the_engine_description_the_api_gives(client: TestClient, path: str) -> None:
    """The engine's worker starts from the page's copy instead of asking /api/engine."""
    html = client.get(path).text
    found = re.search(r'<script type="application/json" id="pib-engine">(.*?)</script>', html)
    assert found is not None, html
    copy, answer = json.loads(found[1]), client.get("/api/engine").json()
    # Each names the moment it was served (the page's first), as files do (next test).
    assert int(copy.pop("served_at")) <= int(answer.pop("served_at"))
    assert copy == answer


def test_files_are_stamped_with_when_they_were_sent(client: TestClient) -> None:
    """A download stamped before the page asking for it was served is a copy from the browser's
    HTTP cache (web/js/http-cache.js): a fresh one is stamped later than the page."""
    described = int(client.get("/api/engine").json()["served_at"])
    for path in (f"{RUNTIME_PREFIX}/pyodide.asm.wasm", "/js/pib-client.js"):
        assert described <= int(client.get(path).headers["x-served-at"]), path


@pytest.mark.parametrize(
    ("path", "imported"),
    [("/", ["pib-client.js", "trainer/frames.js"]), ("/console", ["pib-client.js"])],
)
def test_pages_preload_the_whole_static_import_graph_of_their_scripts(
    client: TestClient, path: str, imported: list[str]
) -> None:
    """frames.js is imported by main.js and by engine.js (one level deeper): listed once."""
    preloads = re.findall(r'<link rel="modulepreload" href="([^"]+)">', client.get(path).text)
    names = [url.split("/js/", 1)[1] for url in preloads]
    assert all(name in names for name in imported), names
    assert len(names) == len(set(names))
    for url in preloads:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize(
    ("path", "mime"),
    [
        (f"{RUNTIME_PREFIX}/pyodide.asm.wasm", "application/wasm"),
        (f"{RUNTIME_PREFIX}/pyodide.mjs", "text/javascript"),
        ("/js/pib-client.js", "text/javascript"),
        ("/css/app.css", "text/css"),
    ],
)
def test_mime_types(client: TestClient, path: str, mime: str) -> None:
    response = client.get(path)
    assert response.status_code == 200, path
    assert response.headers["content-type"].split(";")[0] == mime
    assert_isolated(response)


def test_runtime_is_long_cached_and_precompressed(client: TestClient) -> None:
    response = client.get(f"{RUNTIME_PREFIX}/pyodide.asm.wasm", headers={"Accept-Encoding": "gzip"})
    assert "immutable" in response.headers["cache-control"]
    assert response.headers["content-encoding"] == "gzip"
    assert response.content.startswith(b"\0asm")  # the client undid the precompressed gzip
    plain = client.get(
        f"{RUNTIME_PREFIX}/pyodide.asm.wasm", headers={"Accept-Encoding": "identity"}
    )
    assert "content-encoding" not in plain.headers
    assert plain.content == b"\0asm" + bytes(5000)


def test_text_is_gzipped_where_it_pays(client: TestClient) -> None:
    response = client.get(f"{RUNTIME_PREFIX}/pyodide.mjs", headers={"Accept-Encoding": "gzip"})
    assert response.headers.get("content-encoding") == "gzip"
    app_page = client.get("/js/engine-worker.js", headers={"Accept-Encoding": "gzip"})
    assert app_page.headers.get("content-encoding") == "gzip"
    assert app_page.headers["cache-control"] == "no-cache"


def test_engine_answer_names_long_cached_bundles(client: TestClient, runtime_cache: Paths) -> None:
    """The worker fetches both bundles while the runtime starts; a second visit takes them from
    the HTTP cache, so their URLs change with their contents, are cached for good and come
    gzip-encoded (the browser inflates them)."""
    write_bundle(runtime_cache.runtime / NUMPY_BUNDLE, [("numpy/__init__.py", b"# stand-in\n")])
    engine = client.get("/api/engine")
    assert engine.headers.get("cache-control") is None  # asked on every visit: names the build
    answer = engine.json()
    for url in (answer["numpy_bundle_url"], answer["bundle_url"]):
        response = client.get(url, headers={"accept-encoding": "gzip"})
        assert response.status_code == 200, url
        assert "immutable" in response.headers["cache-control"]
        assert response.headers.get("content-encoding") == "gzip", url
    numpy_files = read_bundle(client.get(answer["numpy_bundle_url"]).content)
    assert numpy_files == {"numpy/__init__.py": b"# stand-in\n"}
    engine_files = read_bundle(client.get(answer["bundle_url"]).content)
    assert (
        engine_files["py_in_browser/__init__.py"]
        == (REPO_ROOT / "py_in_browser/__init__.py").read_bytes()
    )


def test_engine_bundle_is_rebuilt_when_sources_change(tmp_path: Path, runtime_cache: Paths) -> None:
    source = tmp_path / "py_in_browser"
    shutil.copytree(
        REPO_ROOT / "py_in_browser", source, ignore=shutil.ignore_patterns("__pycache__")
    )
    client = TestClient(create_app(Paths(cache=runtime_cache.cache, engine_src=source)))
    first = client.get("/api/engine").json()
    assert client.get(first["bundle_url"]).status_code == 200
    (source / "_edited.py").write_text("EDITED = True\n")
    second = client.get("/api/engine").json()
    assert second["digest"] != first["digest"]
    assert (
        read_bundle(client.get(second["bundle_url"]).content)["py_in_browser/_edited.py"]
        == b"EDITED = True\n"
    )
    assert client.get(first["bundle_url"]).status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/nonexistent.js",
        "/api/nope",
        "/%2e%2e/pyproject.toml",
        "/..%2fpyproject.toml",
        "/js/%2e%2e/%2e%2e/pyproject.toml",
        "/%2fetc%2fpasswd",
        "//etc/passwd",
        f"{RUNTIME_PREFIX}/..%2f..%2f..%2fpyproject.toml",
        f"{RUNTIME_PREFIX}/%2fetc%2fpasswd",
        f"{RUNTIME_PREFIX}/MANIFEST.json",
        "/js/..%5c..%5cpyproject.toml",
    ],
)
def test_unknown_and_traversal_paths_are_404(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404, (path, response.text[:200])
    assert "[project]" not in response.text and "root:" not in response.text
    assert_isolated(response)


def test_missing_runtime_says_how_to_fix_it(tmp_path: Path) -> None:
    client = TestClient(create_app(Paths(cache=tmp_path / "empty")))
    response = client.get(f"{RUNTIME_PREFIX}/pyodide.mjs")
    assert response.status_code == 503
    assert "py-in-browser setup" in response.json()["detail"]
    health = client.get("/api/health").json()
    assert health["runtime_ready"] is False
    assert any("no runtime cache" in problem for problem in health["problems"])
    assert json.dumps(health)


def test_docs_say_how_to_build_them_before_make_docs(tmp_path: Path) -> None:
    client = TestClient(create_app(Paths(cache=tmp_path / "cache", docs=tmp_path / "no-docs")))
    response = client.get("/docs")  # redirected to /docs/, whose pages link relatively
    assert response.history[0].status_code == 308
    assert response.url.path == "/docs/"
    assert response.status_code == 503
    assert "make docs" in response.text
    assert_isolated(response)


def test_docs_serve_the_built_reference(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "_static").mkdir(parents=True)
    (docs / "index.html").write_text("<!doctype html><title>py_in_browser API reference</title>")
    (docs / "_static" / "theme.css").write_text("body { margin: 0 }")
    client = TestClient(create_app(Paths(cache=tmp_path / "cache", docs=docs)))

    page = client.get("/docs/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "API reference" in page.text
    assert_isolated(page)
    style = client.get("/docs/_static/theme.css")
    assert style.status_code == 200
    assert style.headers["content-type"].startswith("text/css")
    assert client.get("/docs/missing.html").status_code == 404


def test_http_api_description_moved_aside_for_the_docs(client: TestClient) -> None:
    assert "/api/health" in client.get("/openapi.json").json()["paths"]
    assert "swagger" in client.get("/api/docs").text.lower()
