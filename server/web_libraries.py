"""`py-in-browser setup` for the pages' browser libraries (uPlot, axe-core): npm pack at the
pinned version, sha256 of the tarball checked, the listed files cached and recorded in a manifest."""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from server.runtime_setup import MANIFEST, Log, SetupError, _run, sha256_of
from server.settings import WEB_LIBRARIES, Paths, WebLibrary


def library_folder(paths: Paths, library: WebLibrary) -> Path:
    return paths.web_libraries / library.npm_spec


def served_name(member: str) -> str:
    return PurePosixPath(member).name


def library_problems(paths: Paths, library: WebLibrary) -> list[str]:
    """What is missing or altered in one library's cache; empty when complete and intact."""
    return folder_problems(library, library_folder(paths, library))


def folder_problems(library: WebLibrary, folder: Path) -> list[str]:
    """What is missing or altered among `library`'s files cached in `folder`."""
    try:
        recorded: dict[str, str] = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return [f"no verified cache of {library.npm_spec} in {folder}"]
    problems = []
    for member in library.files:
        path = folder / served_name(member)
        if not path.is_file():
            problems.append(f"missing {library.npm_spec}/{path.name}")
        elif recorded.get(path.name) != sha256_of(path):
            problems.append(f"corrupted {library.npm_spec}/{path.name}")
    return problems


def web_library_problems(paths: Paths) -> list[str]:
    return [problem for library in WEB_LIBRARIES for problem in library_problems(paths, library)]


def ensure_web_libraries(paths: Paths, log: Log = print) -> None:
    for library in WEB_LIBRARIES:
        problems = library_problems(paths, library)
        if not problems:
            log(f"web: {library.npm_spec} cached and verified")
            continue
        log("web: " + "; ".join(problems) + " -> fetching")
        _fetch_library(paths, library, log)


def _fetch_library(paths: Paths, library: WebLibrary, log: Log) -> None:
    fetch_npm_files(library, library_folder(paths, library), log)


def fetch_npm_files(library: WebLibrary, folder: Path, log: Log) -> None:
    """npm pack `library`, check the tarball's sha256 and cache its listed files (by base name)
    in `folder` with a manifest of their sha256; `folder` is replaced only when all went well."""
    staging = folder.with_name(folder.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        with tempfile.TemporaryDirectory(prefix="pib-web-") as tmp:
            log(f"web: npm pack {library.npm_spec}")
            npm = shutil.which("npm") or "npm"
            _run(
                [npm, "pack", library.npm_spec, "--silent", "--pack-destination", tmp],
                f"fetching {library.npm_spec}",
                "Install Node.js and npm and make sure the npm registry is reachable; "
                "once cached, setup needs no network.",
            )
            tarball = next(Path(tmp).glob("*.tgz"), None)
            if tarball is None:
                raise SetupError(f"fetching {library.npm_spec}: npm pack wrote no tarball")
            actual = sha256_of(tarball)
            if actual != library.tarball_sha256:
                raise SetupError(
                    f"{tarball.name} has sha256 {actual}, expected {library.tarball_sha256}: "
                    f"the npm registry served a different {library.npm_spec}; refusing it."
                )
            with tarfile.open(tarball) as archive:
                for member in library.files:
                    data = archive.extractfile(f"package/{member}")
                    if data is None:
                        raise SetupError(f"{tarball.name} lacks package/{member}")
                    (staging / served_name(member)).write_bytes(data.read())
        manifest = {path.name: sha256_of(path) for path in sorted(staging.iterdir())}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1))
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"web: {library.npm_spec} cached and verified in {folder}")
