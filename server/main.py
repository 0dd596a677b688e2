"""The FastAPI dev server: the app page, the Pyodide runtime, the engine bundle and a small API."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.asset_versions import (
    VERSIONED_PREFIX,
    WebFolderDigest,
    versioned_page,
    with_engine_description,
    with_module_preloads,
    with_preloads,
)
from server.engine_bundle import BUNDLE_NAME, EngineBundle, ensure_engine_bundle
from server.pretrained_models import served_file
from server.registry import LazyRegistry
from server.registry.config import RegistryConfig
from server.request_limits import RequestBodyLimits
from server.routers import models, training
from server.runtime_setup import runtime_problems
from server.runtime_snapshot import (
    NO_JSPI_SNAPSHOT_NAME,
    SNAPSHOT_COOKIE,
    SNAPSHOT_NAMES,
    SNAPSHOT_URL_PREFIX,
    snapshot_key,
    snapshot_path,
    snapshot_url,
    snapshots_offered,
)
from server.settings import (
    NUMPY_BUNDLE_URL,
    PYODIDE_VERSION,
    RUNTIME_PREFIX,
    RUNTIME_URL,
    WEB_LIBRARIES,
    Paths,
)
from server.static import IMMUTABLE, REVALIDATE, resolve_inside, serve_file, served_at
from server.web_libraries import library_folder, web_library_problems

# Cross-origin isolation (SharedArrayBuffer, precise timers) needs COOP + COEP on every response.
SECURITY_HEADERS = [
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-embedder-policy", b"require-corp"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]
# Same-origin everything; blob: scripts because the engine imports its JS bridges from blob URLs
# (py_in_browser/_js.py); 'wasm-unsafe-eval' to compile Pyodide's WebAssembly; no inline code.
CONTENT_SECURITY_POLICY = (
    b"default-src 'self'; script-src 'self' blob: 'wasm-unsafe-eval'; "
    b"worker-src 'self' blob:; connect-src 'self'; img-src 'self' data: blob:; "
    b"style-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    b"frame-ancestors 'none'"
)
# Only the benchmark pages, which also run TensorFlow.js: its bundle evaluates strings.
BENCH_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    b"script-src 'self'", b"script-src 'self' 'unsafe-eval'"
)
# What /docs says before `make docs` has built the reference (the server starts without it).
DOCS_NOT_BUILT = (
    "<!doctype html><title>API reference not built</title>"
    "<p>The API reference is not built yet: run <code>make docs</code> in the repository "
    "(it builds <code>build/docs/</code> from the engine's docstrings), then reload.</p>"
)


class SecurityHeaders:
    """Adds the isolation headers to every response, errors and 404s included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        bench = scope["type"] == "http" and scope["path"].startswith("/bench/")
        csp = BENCH_CONTENT_SECURITY_POLICY if bench else CONTENT_SECURITY_POLICY
        headers = [*SECURITY_HEADERS, (b"content-security-policy", csp)]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


def _serve_web_folder(request: Request, root: Path, relative: str) -> Response:
    """A page folder: a path ending in / means its index.html; edits show on reload (no-cache)."""
    if relative == "" or relative.endswith("/"):
        relative += "index.html"
    path = resolve_inside(root, relative)
    if path is None:
        raise HTTPException(404, "not found")
    return serve_file(request, path, REVALIDATE)


def create_app(paths: Paths | None = None, registry: RegistryConfig | None = None) -> FastAPI:
    paths = paths or Paths.default()
    registry_config = registry or RegistryConfig.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        app.state.registry.close()

    app = FastAPI(
        # /docs is the engine's API reference; FastAPI's Swagger UI of the HTTP API moves aside.
        title="py_in_browser dev server",
        docs_url="/api/docs",
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.registry = LazyRegistry(registry_config)
    app.include_router(models.router)
    app.include_router(training.router)
    bundle_lock = threading.Lock()
    web_digest = WebFolderDigest(paths.web)
    offer_snapshot = snapshots_offered()

    def web_page(request: Request, relative: str) -> Response:
        """A page of the web folder, its scripts and styles under content-versioned URLs."""
        path = resolve_inside(paths.web, relative)
        if path is None:
            raise HTTPException(404, "not found")
        html = with_module_preloads(path.read_text(encoding="utf-8"), paths.web)
        html = versioned_page(html, web_digest.current())
        # The snapshot is the largest download of a first visit, preloaded so the rest come while
        # it arrives; a browser holding its own copy (SNAPSHOT_COOKIE) would only read it twice.
        description = engine_description()
        snapshot = description[snapshot_key(request.headers.get("user-agent", ""))]
        held = request.cookies.get(SNAPSHOT_COOKIE) == description["digest"]
        html = with_preloads(html, [snapshot] if snapshot and not held else [])
        html = with_engine_description(html, description)
        return HTMLResponse(html, headers={"Cache-Control": REVALIDATE})

    def engine_bundle() -> EngineBundle:
        with bundle_lock:
            return ensure_engine_bundle(paths)

    def engine_description() -> dict[str, str | None]:
        """The current engine build: its bundle, the runtime's and numpy's, and its snapshot; and
        the moment it was described (a page carries it as the moment it was served)."""
        bundle = engine_bundle()
        return {
            "bundle_url": f"/engine/{bundle.digest}/{BUNDLE_NAME}",
            "digest": bundle.digest,
            "runtime_url": RUNTIME_URL,
            "numpy_bundle_url": NUMPY_BUNDLE_URL,
            # now (server/static.py's SERVED_AT): downloads stamped earlier came from a cache
            "served_at": served_at(),
            # null when set-up made no snapshot of this build (no Chromium, or sources edited since)
            "snapshot_url": snapshot_url(paths, bundle.digest) if offer_snapshot else None,
            # the same, made without JSPI, for browsers that lack it (WebKit)
            "snapshot_url_without_jspi": (
                snapshot_url(paths, bundle.digest, NO_JSPI_SNAPSHOT_NAME)
                if offer_snapshot
                else None
            ),
        }

    @app.get("/api/health")
    def health() -> dict[str, object]:
        problems = runtime_problems(paths) + web_library_problems(paths)
        return {
            "status": "ok",
            "pyodide": PYODIDE_VERSION,
            "runtime_ready": not problems,
            "problems": problems,
        }

    @app.get("/api/engine")
    def engine() -> dict[str, str | None]:
        return engine_description()

    @app.api_route(
        SNAPSHOT_URL_PREFIX + "/{digest}/{name}",
        methods=["GET", "HEAD"],
        include_in_schema=False,
    )
    def runtime_snapshot_file(request: Request, digest: str, name: str) -> Response:
        path = snapshot_path(paths, digest, name)
        if digest != engine_bundle().digest or name not in SNAPSHOT_NAMES or not path.is_file():
            raise HTTPException(
                404, "no snapshot of that build; ask /api/engine for the current one"
            )
        return serve_file(request, path, IMMUTABLE)

    @app.api_route("/engine/{digest}/{name}", methods=["GET", "HEAD"], include_in_schema=False)
    def engine_file(request: Request, digest: str, name: str) -> Response:
        bundle = engine_bundle()
        if digest != bundle.digest or name != BUNDLE_NAME:
            raise HTTPException(404, "no such engine build; ask /api/engine for the current one")
        return serve_file(request, bundle.path, IMMUTABLE)

    @app.api_route(
        RUNTIME_PREFIX + "/{relative:path}", methods=["GET", "HEAD"], include_in_schema=False
    )
    def runtime_file(request: Request, relative: str) -> Response:
        path = resolve_inside(paths.runtime, relative)
        if path is not None and not path.name.endswith(".gz") and path.name != "MANIFEST.json":
            return serve_file(request, path, IMMUTABLE)
        if not paths.runtime.is_dir():
            return JSONResponse(
                {"detail": "the Pyodide runtime is not set up: run `py-in-browser setup`"},
                status_code=503,
            )
        raise HTTPException(404, "not found")

    @app.api_route("/bench/{relative:path}", methods=["GET", "HEAD"], include_in_schema=False)
    def bench_file(request: Request, relative: str) -> Response:
        return _serve_web_folder(request, paths.bench_page, relative)

    @app.api_route("/vendor/{relative:path}", methods=["GET", "HEAD"], include_in_schema=False)
    def vendor_file(request: Request, relative: str) -> Response:
        path = resolve_inside(paths.vendor, relative)
        if path is None:
            raise HTTPException(404, "not found (benchmark packages come with `make bench`)")
        return serve_file(request, path, REVALIDATE)

    @app.api_route("/lib/{name}/{file}", methods=["GET", "HEAD"], include_in_schema=False)
    def web_library_file(request: Request, name: str, file: str) -> Response:
        library = next((lib for lib in WEB_LIBRARIES if lib.name == name), None)
        path = None if library is None else resolve_inside(library_folder(paths, library), file)
        if path is None or path.name == "MANIFEST.json":
            raise HTTPException(
                404, "not found (the pages' libraries come with `py-in-browser setup`)"
            )
        return serve_file(request, path, REVALIDATE)

    @app.api_route("/models/{name}/{file}", methods=["GET", "HEAD"], include_in_schema=False)
    def pretrained_model_file(request: Request, name: str, file: str) -> Response:
        path = served_file(paths, name, file)
        if path is None:
            raise HTTPException(
                404, "not found (the pretrained models come with `py-in-browser setup`)"
            )
        return serve_file(request, path, REVALIDATE)

    @app.api_route("/console", methods=["GET", "HEAD"], include_in_schema=False)
    def console_page(request: Request) -> Response:
        """The engine console (the app has /)."""
        return web_page(request, "console.html")

    @app.api_route("/docs", methods=["GET", "HEAD"], include_in_schema=False)
    def docs_root() -> Response:
        return RedirectResponse("/docs/", status_code=308)  # the pages' links are relative

    @app.api_route("/docs/{relative:path}", methods=["GET", "HEAD"], include_in_schema=False)
    def docs_file(request: Request, relative: str) -> Response:
        if not (paths.docs / "index.html").is_file():
            return HTMLResponse(DOCS_NOT_BUILT, status_code=503)
        return _serve_web_folder(request, paths.docs, relative)

    @app.api_route(
        VERSIONED_PREFIX + "/{digest}/{relative:path}",
        methods=["GET", "HEAD"],
        include_in_schema=False,
    )
    def versioned_web_file(request: Request, digest: str, relative: str) -> Response:
        """A web file under a page's versioned URL: cached for good while the digest is current;
        a stale page's requests get today's file, revalidated."""
        path = resolve_inside(paths.web, relative)
        if path is None:
            raise HTTPException(404, "not found")
        current = digest == web_digest.current()
        return serve_file(request, path, IMMUTABLE if current else REVALIDATE)

    @app.api_route("/{relative:path}", methods=["GET", "HEAD"], include_in_schema=False)
    def web_file(request: Request, relative: str) -> Response:
        if relative in ("", "index.html"):
            return web_page(request, "index.html")
        return _serve_web_folder(request, paths.web, relative)

    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=6)
    app.add_middleware(
        RequestBodyLimits,
        upload_path="/api/models",
        max_upload_bytes=registry_config.max_upload_bytes,
        max_body_bytes=registry_config.max_json_body_bytes,
        take_upload_token=lambda client: app.state.registry.get().rate_limiter.take(
            "upload", client, registry_config.rate_limits["upload"]
        ),
        acquire_upload_slot=lambda: app.state.registry.get().upload_slots.acquire(),
    )
    app.add_middleware(SecurityHeaders)
    return app
