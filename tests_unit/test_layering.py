"""Layers point down: no module imports a module above it, at import time or inside a function.

Every module is read with `ast`, nothing is executed. Each `import` and `from ... import` anywhere
in it counts: at the top level, inside functions and under `if TYPE_CHECKING:` alike (a
typing-only import still ties the lower module to the higher one; the engine types such links
with protocols instead: ops.TensorLike, runtime._Scoped, trainable.TrainableModel). Relative
imports are resolved; `from package import name` is an import of the module package.name where
there is one, else of the package itself. Importing package.name also runs package/__init__.py,
as Python always does; that is not counted, or every module would import the py_in_browser facade.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Packages whose every module must have a place in LAYERS.
PLACED_PACKAGES = ("py_in_browser", "server", "bench")
# Top-level names of this repository's code: imports of anything else (numpy, js, ...) are free.
FIRST_PARTY = (*PLACED_PACKAGES, "tests_e2e", "tests_unit")

# The allowed order, lowest layer first: a module may import modules of lower layers only. A layer
# lists units, each a module or "package.*" (the package and everything under it). Units of one
# layer are peers and never import each other; the modules inside one package unit may import one
# another (each backend and the server order their own internals), and
# test_imports_have_no_cycles keeps those internal imports acyclic.
LAYERS: list[tuple[str, ...]] = [
    # Leaves: runtime events (which the backends record) and the only module that touches `js`.
    # The image preprocessing schema is data too (model files validate it).
    (
        "py_in_browser.events",
        "py_in_browser._js",
        "py_in_browser.limits",
        "py_in_browser.preprocessing",
    ),
    # Training permits: signed bounds checked against the caps; the page's visibility and the
    # worker's IndexedDB checkpoints, which recovery.py uses.
    ("py_in_browser.permits", "py_in_browser.visibility", "py_in_browser.persist"),
    # The fused-program IR: data that the op table checks and every backend compiles.
    ("py_in_browser.fusion",),
    # The Backend interface and kernel registry, then the backends, which know nothing of tensors.
    ("py_in_browser.backends",),
    # The counter-based hash every backend's random_uniform kernel computes the same way, and
    # the WebAssembly SIMD kernels the cpu backend calls when their module loads.
    ("py_in_browser.backends.counter_hash", "py_in_browser.backends.cpu_simd.*"),
    (
        "py_in_browser.backends.cpu",
        "py_in_browser.backends.webgpu.*",
        "py_in_browser.backends.webgl2.*",
    ),
    # What selection learned on earlier visits, then choosing among the registered backends by
    # self-test and timing (init's helper).
    ("py_in_browser.backends.verdicts",),
    ("py_in_browser.backends.selection",),
    # The op table (rules and VJPs) and the runtime (active backend, memory, tidy, profile).
    ("py_in_browser.ops", "py_in_browser.runtime"),
    # The tape, then tensors, which tell the tape about every op they run.
    ("py_in_browser.autograd",),
    ("py_in_browser.tensor",),
    # How a guarded call's results are computed again if their device was lost before a read.
    ("py_in_browser.lineage",),
    # Recovery of every engine call from a lost device: models' host copies and the guard.
    ("py_in_browser.resilience",),
    # Public functions: broadcasting wrappers, composites and fused().
    ("py_in_browser.functional",),
    # Layers, losses, metrics and optimizers, built on the functions.
    (
        "py_in_browser.nn",
        "py_in_browser.nn.initializers",
        "py_in_browser.nn.activations",
        "py_in_browser.nn.losses",
    ),
    ("py_in_browser.nn.metrics", "py_in_browser.nn.layers"),
    # Optimizers, and the Keras-style configs of layers that the model file and exports read.
    ("py_in_browser.optimizers", "py_in_browser.layer_configs"),
    # Training: the model as training sees it, the fit accumulators, callbacks, recorded steps,
    # the Trainer, checkpoints; then the model, which delegates to them.
    ("py_in_browser.trainable", "py_in_browser.fit_state"),
    # Callbacks; batch sizing within the device limits (which micro-batch one pass fits).
    ("py_in_browser.callbacks", "py_in_browser.batching"),
    ("py_in_browser.replay",),
    ("py_in_browser.forward_replay",),  # predict's passes, by replay's rules
    ("py_in_browser.training",),
    ("py_in_browser.checkpoint", "py_in_browser.model_file"),
    # Model interop converts model files (bytes): TF.js both ways (used by the model), and ONNX
    # out, which imports the onnx package and is imported only by the CLI and tests.
    ("py_in_browser.interop", "py_in_browser.interop.tfjs", "py_in_browser.interop.onnx_export"),
    # Pretrained TF.js graph models: the format read (on tfjs.py's weight decoding), the op
    # handlers, the converter, then the runtime GraphModel.
    ("py_in_browser.interop.graph_model_format",),
    ("py_in_browser.interop.graph_model_ops",),
    ("py_in_browser.interop.graph_model_convert",),
    ("py_in_browser.interop.graph_model",),
    # Which backbone a saved head reads, found again same-origin and checked by sha256.
    ("py_in_browser.interop.backbones",),
    # Recovery from a lost GPU device: host checkpoints during fit, restored on a new backend.
    # pib.debug's fault injection sits beside it.
    ("py_in_browser.recovery", "py_in_browser.debug"),
    ("py_in_browser.model",),
    # Data for models: preprocessing on the device, frames from the page, top-k predictions.
    ("py_in_browser.data.*",),
    # The public facade, then what consumes it: the browser worker and the shared test workloads.
    ("py_in_browser",),
    ("py_in_browser._worker", "py_in_browser.testing.*"),
    # The dev server serves the engine's files and never imports it; the benchmark drives both.
    ("server.*",),
    # The browsers' launchers (Chromium's path and GPU flags, WebKit's MiniBrowser through
    # WebKitWebDriver), shared by the e2e fixtures and the bench.
    ("tests_e2e.browsers", "tests_e2e.webkit"),
    ("bench.*",),
]


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool  # an __init__.py: its relative imports start from itself


def _module_of(path: Path) -> Module:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return Module(".".join(parts), path, is_package)


def _repository_modules() -> dict[str, Module]:
    modules = {}
    for top in FIRST_PARTY:
        for path in sorted((REPO / top).rglob("*.py")):
            if "node_modules" not in path.parts:
                module = _module_of(path)
                modules[module.name] = module
    return modules


MODULES = _repository_modules()


def _unit_of(module: str) -> tuple[int, str] | None:
    """(layer index, unit) of a module, or None where LAYERS does not place it."""
    for index, layer in enumerate(LAYERS):
        for unit in layer:
            package = unit.removesuffix(".*")
            if module == unit or (
                package != unit and (module == package or module.startswith(package + "."))
            ):
                return index, unit
    return None


def _resolve(module: Module, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    """The first-party modules one import statement names."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.name.split(".")
            if not module.is_package:
                package.pop()
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, *([base] if base else [])])
        if base == "__future__":
            return []
        targets = [
            f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
            for alias in node.names
        ]
    return [t for t in targets if t.split(".")[0] in FIRST_PARTY]


def imports_of(module: Module, source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) for every first-party import anywhere in `source`; a dynamic import
    (importlib.import_module, __import__), which ast cannot resolve, comes back as "<dynamic>"."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [(node.lineno, target) for target in _resolve(module, node, known)]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in ("__import__", "import_module"):
                found.append((node.lineno, "<dynamic>"))
    return sorted(found, key=lambda item: item[0])


def violations(module: Module, source: str, known: set[str]) -> list[str]:
    """What LAYERS forbids among the imports of `module`, one message each."""
    where = _unit_of(module.name)
    if where is None:
        return [f"{module.name} has no place in LAYERS (tests_unit/test_layering.py)"]
    layer, unit = where
    problems = []
    for line, target in imports_of(module, source, known):
        at = f"{module.name}:{line} imports {target}"
        if target == "<dynamic>":
            problems.append(f"{at}: import by name, which the layering check cannot follow")
            continue
        if target not in known:
            problems.append(f"{at}, which does not exist")
            continue
        placed = _unit_of(target)
        if placed is None:
            problems.append(f"{at}, which has no place in LAYERS")
        elif placed[1] == unit:
            continue  # inside one unit: see test_imports_have_no_cycles
        elif placed[0] == layer:
            problems.append(
                f"{at}: peers in one layer ({unit}, {placed[1]}) do not import each other"
            )
        elif placed[0] > layer:
            problems.append(f"{at}, which sits in a higher layer ({placed[1]} above {unit})")
    return problems


def _checked_modules() -> list[Module]:
    """Every module of the placed packages, and the other modules LAYERS names."""
    named = {unit for layer in LAYERS for unit in layer if not unit.endswith(".*")}
    return [
        m for m in MODULES.values() if m.name.split(".")[0] in PLACED_PACKAGES or m.name in named
    ]


def test_every_import_points_down() -> None:
    checked = {m.name for m in _checked_modules()}
    # The walk reaches inside packages, the browser-side bench script and the named test module.
    assert {"py_in_browser.backends.webgpu.backend", "bench.web.pib_side", "server.main"} < checked
    assert "tests_e2e.browsers" in checked and "tests_e2e.conftest" not in checked
    problems = [
        problem
        for module in _checked_modules()
        for problem in violations(module, module.path.read_text(), set(MODULES))
    ]
    assert problems == [], "\n".join(problems)


def test_every_unit_in_layers_exists() -> None:
    """A unit left behind by a rename would otherwise place nothing and check nothing."""
    missing = [unit for layer in LAYERS for unit in layer if unit.removesuffix(".*") not in MODULES]
    assert missing == []


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph (module -> modules it imports), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for target in sorted(edges.get(name, ())):
            cycle = visit(target, [*path, name])
            if cycle:
                return cycle
        done.add(name)
        return None

    for name in sorted(edges):
        cycle = visit(name, [])
        if cycle:
            return cycle
    return None


def test_imports_have_no_cycles() -> None:
    """Across units imports only go down; inside a package unit they must not go round."""
    known = set(MODULES)
    edges = {
        m.name: {t for _, t in imports_of(m, m.path.read_text(), known) if t in known}
        for m in _checked_modules()
    }
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle)


# ---- the checker itself ------------------------------------------------------------------------


KNOWN = set(MODULES)


def _module(name: str, is_package: bool = False) -> Module:
    return Module(name, REPO / "synthetic.py", is_package)


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        # A late import inside a function is an import like any other.
        ("py_in_browser.ops", "def f():\n    from .tensor import apply_op\n", "higher layer"),
        # So is one only for type checking.
        (
            "py_in_browser.callbacks",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .model import Sequential\n",
            "higher layer",
        ),
        # Absolute, and three levels up from a backend.
        ("py_in_browser.fusion", "import py_in_browser.functional as F\n", "higher layer"),
        ("py_in_browser.backends.webgpu.backend", "from ... import runtime\n", "higher layer"),
        # `from package import name` of a module is an import of that module.
        ("py_in_browser.backends.cpu", "from . import webgl2\n", "peers in one layer"),
        ("py_in_browser.events", "import importlib\nimportlib.import_module('x')\n", "by name"),
        ("py_in_browser.ops", "from .nowhere import x\n", "does not exist"),
        ("py_in_browser.not_placed", "", "no place in LAYERS"),
    ],
)
def test_the_checker_catches(name: str, source: str, expected: str) -> None:
    found = violations(_module(name), source, KNOWN)
    assert len(found) == 1 and expected in found[0], found


def test_the_cycle_finder_finds_a_cycle_inside_a_unit() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(edges) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_checker_allows_imports_down_and_inside_a_unit() -> None:
    source = (
        "import numpy as np\n"
        "from ... import events, fusion\n"  # lower layers, from a backend
        "from .. import OutSpec\n"  # a name of the backends package: the package itself
        "from . import codegen\n"  # inside the webgpu unit
        "def f():\n    from ...events import record_event\n"
    )
    module = _module("py_in_browser.backends.webgpu.kernels")
    assert imports_of(module, source, KNOWN) == [
        (2, "py_in_browser.events"),
        (2, "py_in_browser.fusion"),
        (3, "py_in_browser.backends"),
        (4, "py_in_browser.backends.webgpu.codegen"),
        (6, "py_in_browser.events"),
    ]
    assert violations(module, source, KNOWN) == []
    # A package's own relative imports start from the package, not from its parent.
    package = _module("py_in_browser.backends.webgl2", is_package=True)
    assert imports_of(package, "from .backend import WebGL2Backend\n", KNOWN) == [
        (1, "py_in_browser.backends.webgl2.backend")
    ]
