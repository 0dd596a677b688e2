"""Serving files from a fixed folder: traversal-safe lookup, MIME types, caching, precompressed gzip."""

from __future__ import annotations

import mimetypes
import time
from pathlib import Path, PurePosixPath

from starlette.requests import Request
from starlette.responses import FileResponse, Response

# Browsers insist on these for streaming compilation and module scripts; the OS table may lack them.
MIME_OVERRIDES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".wgsl": "text/plain",
    ".y4m": "video/x-yuv4mpeg",
}
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# When the server sent a file (Unix ms). A copy from the browser's HTTP cache keeps the stamp of
# its download, older than the page that asks for it (whose engine description carries the
# moment the page was served): the engine's worker tells cached downloads from fresh ones so,
# in every browser (WebKit's resource timing reports 0 for every size, a download's too).
SERVED_AT = "X-Served-At"


def served_at() -> str:
    """The current moment as SERVED_AT spells it."""
    return str(time.time_ns() // 1_000_000)


def content_type(path: Path) -> str:
    return (
        MIME_OVERRIDES.get(path.suffix)
        or mimetypes.guess_type(path.name)[0]
        or "application/octet-stream"
    )


def resolve_inside(root: Path, relative: str) -> Path | None:
    """The file `relative` names under `root`, or None when it is absent or would leave `root`.

    `relative` arrives already percent-decoded by the ASGI server, so an encoded `..` shows up
    here as a plain `..` part and is refused like any other.
    """
    parts = PurePosixPath(relative).parts
    if any(part in ("..", "") or "\\" in part or "\0" in part for part in parts):
        return None
    if relative.startswith("/") or (parts and ":" in parts[0]):
        return None
    root = root.resolve()
    candidate = root.joinpath(*parts).resolve() if parts else root
    if not candidate.is_relative_to(root):
        return None
    return candidate if candidate.is_file() else None


def serve_file(request: Request, path: Path, cache_control: str) -> Response:
    """A file response that uses a `.gz` sibling when the client accepts gzip."""
    headers = {"Cache-Control": cache_control, "Vary": "Accept-Encoding", SERVED_AT: served_at()}
    media_type = content_type(path)
    compressed = path.with_name(path.name + ".gz")
    if "gzip" in request.headers.get("accept-encoding", "") and compressed.is_file():
        headers["Content-Encoding"] = "gzip"
        return FileResponse(compressed, media_type=media_type, headers=headers)
    return FileResponse(path, media_type=media_type, headers=headers)
