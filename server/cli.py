"""The `py-in-browser` command: `setup` fetches and verifies the runtime, `serve` runs the dev server,
`convert` converts models (server/convert.py)."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from pathlib import Path

from server.engine_bundle import ensure_engine_bundle
from server.pretrained_models import ensure_pretrained_models
from server.runtime_setup import SetupError, ensure_runtime, runtime_problems
from server.runtime_snapshot import snapshots_offered
from server.settings import Paths
from server.simd_build import SimdBuildError, ensure_simd_module
from server.snapshot_maker import (
    SnapshotMakerError,
    find_chromium,
    find_minibrowser,
    make_runtime_snapshot,
    make_webkit_snapshot,
)
from server.web_libraries import ensure_web_libraries, web_library_problems


def setup(paths: Paths) -> None:
    ensure_runtime(paths)
    try:
        print(f"simd: cpu kernels built into {ensure_simd_module(paths).path}")
    except SimdBuildError as exc:
        print(f"simd: the cpu SIMD kernels did not build, the cpu backend will use numpy:\n{exc}")
    ensure_web_libraries(paths)
    ensure_pretrained_models(paths)
    bundle = ensure_engine_bundle(paths)
    print(f"engine: {bundle.path} (sources {bundle.digest})")
    _make_snapshot(paths)


def _make_snapshot(paths: Paths) -> None:
    """The snapshots first visits restore (server/snapshot_maker.py); optional: without them a
    first visit starts Python afresh."""
    chromium = find_chromium()
    if chromium is None:
        print("snapshot: no Chromium here (`make browsers`), so first visits start Python afresh")
    else:
        try:
            print(f"snapshot: {make_runtime_snapshot(paths, chromium)}")
        except SnapshotMakerError as exc:
            print(f"snapshot: not made, first visits start Python afresh: {exc}")
    minibrowser = find_minibrowser()
    if minibrowser is None:
        return  # no WebKitGTK here: first visits in WebKit start Python afresh
    try:
        print(f"snapshot: {make_webkit_snapshot(paths, minibrowser)}")
    except (SnapshotMakerError, RuntimeError) as exc:
        print(f"snapshot: none for WebKit, its first visits start Python afresh: {exc}")


def _check_port_free(host: str, port: int) -> None:
    """Fail before uvicorn starts, with a message that says what to do."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SystemExit(
                    f"error: port {port} on {host} is already in use; stop what is using it or pass "
                    f"--port with another number (for example --port {port + 1})."
                ) from exc
            raise SystemExit(f"error: cannot listen on {host}:{port}: {exc.strerror}") from exc


def serve(paths: Paths, host: str, port: int) -> None:
    import uvicorn

    from server.main import create_app

    if not 0 < port < 65536:
        raise SystemExit(f"error: --port must be between 1 and 65535, got {port}")
    _check_port_free(host, port)
    problems = runtime_problems(paths) + web_library_problems(paths)
    if problems:
        print(
            "serve: the runtime cache is incomplete ("
            + "; ".join(problems)
            + "), running setup first"
        )
        setup(paths)
    elif snapshots_offered():
        _make_snapshot(paths)  # after an engine edit, the snapshot set-up made is stale
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"serve: listening on {host}, beyond loopback; WebGPU needs a secure context there (https)."
        )
    print(f"serve: http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/")
    uvicorn.run(create_app(paths), host=host, port=port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="py-in-browser", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "setup",
        help="fetch and verify Pyodide + numpy and the pages' libraries, build the engine bundle",
    )
    serve_parser = commands.add_parser("serve", help="run the dev server (runs setup when needed)")
    serve_parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default loopback)"
    )
    serve_parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    convert_parser = commands.add_parser(
        "convert",
        help="convert a model: model file (.pib), TF.js Layers folder (or its model.json), ONNX (.onnx, out only)",
    )
    convert_parser.add_argument("source", type=Path, help="a .pib model file or a TF.js folder")
    convert_parser.add_argument("target", type=Path, help="NAME.onnx, NAME.pib or a TF.js folder")
    convert_parser.add_argument(
        "--quantize", choices=["float16"], help="TF.js output: store weights as float16"
    )
    convert_parser.add_argument(
        "--opset", type=int, help="ONNX output: the opset (default the newest, 28; 20 at least)"
    )
    args = parser.parse_args(argv)
    if args.command == "convert":
        from server.convert import ConvertError, convert

        try:
            print(f"convert: wrote {convert(args.source, args.target, args.quantize, args.opset)}")
        except ConvertError as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(1) from exc
        return
    paths = Paths.default()
    try:
        if args.command == "setup":
            setup(paths)
        else:
            serve(paths, args.host, args.port)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
