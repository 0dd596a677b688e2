"""Builds the cpu backend's WebAssembly SIMD kernels (a side module), again whenever they change.

The C sources live beside their Python binding (py_in_browser/backends/cpu_simd/native/); the
compiler is the clang and wasm-ld that PyPI's `ziglang` ships, so set-up needs no system
toolchain. The result is a PIC side module (dylink.0 section) that Pyodide's dynamic linker loads
through ctypes.CDLL into its own memory, so kernels work on numpy arrays in place. It is cached as
<cache>/simd/<digest>/kernels.wasm, the digest covering sources, flags and compiler version; a
failed build is cached too (failed.txt), so the server does not retry it on every request.
A second build of the same sources, kernels-relaxed.wasm, adds relaxed SIMD (simd.h's fused
multiply-add); the page loads it where the browser validates relaxed SIMD (loader.py).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from server.settings import Paths

# Not ".so": Python would take that for an extension module shadowing kernels.py.
MODULE_NAME = "kernels.wasm"
RELAXED_MODULE_NAME = "kernels-relaxed.wasm"
# gemm.c alone, for the helper workers of large products (cpu_simd/threads.py): a plain module
# (not a side module) on a shared memory the engine's worker copies operands into.
HELPER_MODULE_NAME = "gemm-helper.wasm"
# Where the binding expects the modules inside the engine package (and so inside the wheel).
PACKAGE_FOLDER = "backends/cpu_simd"
PACKAGE_PATH = f"{PACKAGE_FOLDER}/{MODULE_NAME}"
RELAXED_PACKAGE_PATH = f"{PACKAGE_FOLDER}/{RELAXED_MODULE_NAME}"
HELPER_PACKAGE_PATH = f"{PACKAGE_FOLDER}/{HELPER_MODULE_NAME}"
COMMON_FLAGS = ("-O3", "-msimd128", "-fvisibility=hidden", "-ffreestanding", "-nostdlib")
COMPILE_FLAGS = ("--target=wasm32-unknown-emscripten", "-fPIC", *COMMON_FLAGS, "-Wall", "-Werror")
LINK_FLAGS = ("--experimental-pic", "-shared", "--no-entry")
RELAXED_FLAGS = ("-mrelaxed-simd",)
# The helper computes rows of the relaxed build's products, so it does the same arithmetic
# (threads.py uses helpers only where the relaxed build runs); atomics for a shared memory.
HELPER_COMPILE_FLAGS = (
    "--target=wasm32-unknown-unknown",
    *COMMON_FLAGS,
    *RELAXED_FLAGS,
    "-matomics",
    "-mbulk-memory",
    "-Wall",
    "-Werror",
)
HELPER_STACK_BYTES = (
    1 << 20
)  # at the start of its memory (--stack-first); threads.py lays out the rest
HELPER_LINK_FLAGS = (
    "--no-entry",
    "--import-memory",
    "--shared-memory",
    "--max-memory=2147483648",
    "--stack-first",
    f"-zstack-size={HELPER_STACK_BYTES}",
    "--export=gemm",
    "--export=gemm_work_floats",
)


@dataclass(frozen=True)
class SimdModule:
    path: Path  # WebAssembly SIMD (simd128) only
    relaxed_path: Path  # the same kernels with relaxed SIMD's fused multiply-add
    helper_path: Path  # the relaxed gemm for helper workers
    digest: str

    def package_files(self) -> list[tuple[str, Path]]:
        """(path inside the engine package, built file) of every build."""
        return [
            (PACKAGE_PATH, self.path),
            (RELAXED_PACKAGE_PATH, self.relaxed_path),
            (HELPER_PACKAGE_PATH, self.helper_path),
        ]


class SimdBuildError(RuntimeError):
    """The toolchain is missing or the sources do not compile; the message says which."""


def native_sources(paths: Paths) -> list[Path]:
    folder = paths.engine_src / "backends" / "cpu_simd" / "native"
    return sorted(p for p in folder.iterdir() if p.suffix in (".c", ".h"))


def _toolchain_version() -> str:
    try:
        return metadata.version("ziglang")
    except metadata.PackageNotFoundError as exc:
        raise SimdBuildError(
            "the ziglang package (clang + wasm-ld for wasm32) is not installed: "
            "pip install -e . installs it"
        ) from exc


def module_digest(paths: Paths, toolchain: str) -> str:
    flags = f"{COMPILE_FLAGS}\0{RELAXED_FLAGS}\0{LINK_FLAGS}\0{HELPER_COMPILE_FLAGS}\0{HELPER_LINK_FLAGS}"
    digest = hashlib.sha256(f"{toolchain}\0{flags}\0".encode())
    for path in native_sources(paths):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _zig(*args: str) -> list[str]:
    return [sys.executable, "-m", "ziglang", *args]


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise SimdBuildError(f"'{' '.join(cmd)}' failed:\n{(done.stderr or done.stdout).strip()}")


def _compile(
    sources: list[Path], out: Path, compile_flags: tuple[str, ...], link_flags: tuple[str, ...]
) -> None:
    import ziglang  # the package carries clang's headers (wasm_simd128.h) in its lib folder

    resource_dir = Path(ziglang.__file__).parent / "lib"
    with tempfile.TemporaryDirectory(prefix="pib-simd-") as tmp:
        objects = []
        for source in sources:
            obj = Path(tmp) / (source.stem + ".o")
            _run(
                _zig(
                    "clang",
                    *compile_flags,
                    f"-resource-dir={resource_dir}",
                    "-c",
                    str(source),
                    "-o",
                    str(obj),
                )
            )
            objects.append(str(obj))
        _run(_zig("wasm-ld", *link_flags, "-o", str(out), *objects))


def _dylink_section(module: Path) -> bytes:
    """The leading dylink.0 custom section: the static memory and table slots a build asks of the
    dynamic linker. A snapshot's relink swaps one build for the other (shared-libraries.js), which
    is sound only where they ask the same."""
    data = module.read_bytes()
    size, at, shift = 0, 9, 0
    while True:  # the section's size, a LEB128 after the magic, version and section id
        byte = data[at]
        size |= (byte & 0x7F) << shift
        at, shift = at + 1, shift + 7
        if byte < 0x80:
            return data[8 : at + size]


def ensure_simd_module(paths: Paths) -> SimdModule:
    """Every build for the current sources, compiled only when they changed; raises
    SimdBuildError (also for a build that failed before with the same sources)."""
    digest = module_digest(paths, _toolchain_version())
    folder = paths.cache / "simd" / digest
    built = SimdModule(
        folder / MODULE_NAME, folder / RELAXED_MODULE_NAME, folder / HELPER_MODULE_NAME, digest
    )
    failure = folder / "failed.txt"
    if all(path.is_file() for _, path in built.package_files()):
        return built
    if failure.is_file():
        raise SimdBuildError(failure.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    c_files = [path for path in native_sources(paths) if path.suffix == ".c"]
    builds = (
        (built.relaxed_path, c_files, (*COMPILE_FLAGS, *RELAXED_FLAGS), LINK_FLAGS),
        (built.path, c_files, COMPILE_FLAGS, LINK_FLAGS),
        (
            built.helper_path,
            [p for p in c_files if p.name == "gemm.c"],
            HELPER_COMPILE_FLAGS,
            HELPER_LINK_FLAGS,
        ),
    )
    for module, sources, compile_flags, link_flags in builds:
        partial = module.with_name(module.name + ".partial")
        try:
            _compile(sources, partial, compile_flags, link_flags)
        except (SimdBuildError, OSError, subprocess.TimeoutExpired) as exc:
            failure.write_text(str(exc))
            raise SimdBuildError(str(exc)) from exc
        partial.replace(module)
    if _dylink_section(built.path) != _dylink_section(built.relaxed_path):
        message = "the two builds' dylink.0 sections differ: a snapshot could not relink either"
        failure.write_text(message)
        raise SimdBuildError(message)
    for stale in folder.parent.iterdir():
        if stale != folder:
            shutil.rmtree(stale, ignore_errors=True)
    return built
