"""Content-versioned URLs for the pages' scripts and styles, and what else a page is served with
so its engine starts sooner (preloads, the engine build's description).

A page's module graph is a chain (page script -> client -> worker -> its imports), and with
revalidated files every link of it is a round trip before the next one starts: ~400 ms on a
returning visit before the engine's worker even begins to boot. The pages are served with their
/js/ and /css/ URLs under /v/<digest>/, a hash of the web folder's files: those URLs are cached for
good, so a returning visit takes the whole graph from the HTTP cache, and any edit yields a new
digest (relative imports inside the scripts inherit the prefix). The plain /js/ and /css/ URLs
keep working, revalidated.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import threading
from pathlib import Path

VERSIONED_PREFIX = "/v"
# src="/js/..." and href="/css/..." in the pages: the files whose URLs get the digest.
_ASSET_ATTRIBUTE = re.compile(r'((?:src|href)=")/((?:js|css)/)')
# A page's module scripts, and the static relative imports inside a script.
_MODULE_SCRIPT = re.compile(r'<script type="module" src="/(js/[^"]+)"')
_STATIC_IMPORT = re.compile(r'^import\b[^;]*?from "(\.{1,2}/[^"]+)";', re.MULTILINE | re.DOTALL)


class WebFolderDigest:
    """The web folder's content hash, recomputed only when a file's size or mtime changed, so a
    page request costs a few stats rather than hashing every script."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._signature: tuple[tuple[str, int, int], ...] = ()
        self._digest = ""

    def current(self) -> str:
        files = sorted(p for p in self._root.rglob("*") if p.is_file())
        signature = tuple(
            (p.relative_to(self._root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in files
        )
        with self._lock:
            if signature != self._signature:
                digest = hashlib.sha256()
                for path, (name, _, _) in zip(files, signature, strict=True):
                    digest.update(name.encode() + b"\0" + path.read_bytes())
                self._signature, self._digest = signature, digest.hexdigest()[:16]
            return self._digest


def versioned_page(html: str, digest: str) -> str:
    """`html` with its /js/ and /css/ URLs moved under /v/<digest>/."""
    return _ASSET_ATTRIBUTE.sub(rf"\1{VERSIONED_PREFIX}/{digest}/\2", html)


def with_module_preloads(html: str, web_root: Path) -> str:
    """`html` (before versioned_page) asking for every module its module scripts import,
    directly or not, as soon as it reads the head: the browser would otherwise find each level
    of the import graph only once the level above has loaded (the page -> client -> worker chain
    is what starts the engine)."""
    found: list[str] = []
    pending = _MODULE_SCRIPT.findall(html)
    roots = set(pending)
    while pending:
        module = pending.pop()
        path = web_root / module
        if module in found or not path.is_file():
            continue
        found.append(module)
        for target in _STATIC_IMPORT.findall(path.read_text(encoding="utf-8")):
            pending.append(posixpath.normpath(posixpath.join(posixpath.dirname(module), target)))
    links = "".join(
        f'  <link rel="modulepreload" href="/{module}">\n'
        for module in sorted(found)
        if module not in roots
    )
    return html.replace("</head>", links + "</head>", 1)


def with_preloads(html: str, urls: list[str]) -> str:
    """`html` asking the browser to download `urls` (fetch destinations, long-cached) as soon as it
    reads the head: the engine's worker asks for them only once its own module graph has loaded,
    and by then they are in the HTTP cache or on their way."""
    links = "".join(f'  <link rel="preload" href="{url}" as="fetch" crossorigin>\n' for url in urls)
    return html.replace("</head>", links + "</head>", 1)


# The element pib-client.js reads the engine build's description from.
ENGINE_DESCRIPTION_ID = "pib-engine"


def with_engine_description(html: str, description: dict[str, str | None]) -> str:
    """`html` carrying /api/engine's answer, which the engine's worker would otherwise ask for
    after its own module graph has loaded: one round trip fewer before the runtime starts (the
    page is revalidated on every visit, so the description is current)."""
    text = json.dumps(description).replace("</", "<\\/")  # cannot end the script element
    element = f'  <script type="application/json" id="{ENGINE_DESCRIPTION_ID}">{text}</script>\n'
    return html.replace("</head>", element + "</head>", 1)
