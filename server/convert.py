"""`py-in-browser convert IN OUT`: between the engine's model file, a TF.js Layers folder and ONNX.

Formats are told apart by path: IN is a TF.js model when it is a folder or a .json file, else a
model file (read and validated); OUT is ONNX when it ends in .onnx, a model file when it ends in
.pib, else a TF.js folder (created). Every conversion passes through the model file, so a model
file -> TF.js -> model file round trip gives the same bytes.
"""

from __future__ import annotations

from pathlib import Path

from py_in_browser.interop import tfjs
from py_in_browser.model_file import ModelFileError, read_header


class ConvertError(Exception):
    """A conversion that cannot be done; the message is one line for the user."""


def _read_model_file(source: Path) -> bytes:
    if source.is_dir() or source.suffix == ".json":
        return tfjs.to_model_file(tfjs.read_folder(source))
    if not source.is_file():
        raise ConvertError(f"{source} does not exist")
    data = source.read_bytes()
    read_header(data)
    return data


def convert(
    source: Path, target: Path, quantize: str | None = None, opset: int | None = None
) -> str:
    """Converts `source` into `target`; returns what was written, for the user."""
    if quantize and (target.suffix in (".onnx", ".pib")):
        raise ConvertError("--quantize applies to TF.js output only")
    if opset is not None and target.suffix != ".onnx":
        raise ConvertError("--opset applies to ONNX output only")
    try:
        data = _read_model_file(source)
        if target.suffix == ".onnx":
            from py_in_browser.interop import onnx_export  # onnx is needed for this output only

            options = {} if opset is None else {"opset": opset}
            target.write_bytes(onnx_export.from_model_file(data, **options))
            return f"ONNX model {target}"
        if target.suffix == ".pib":
            target.write_bytes(data)
            return f"model file {target}"
        if target.exists() and not target.is_dir():
            raise ConvertError(f"{target} exists and is not a folder (a TF.js model is a folder)")
        model_json = tfjs.write_folder(tfjs.from_model_file(data, quantize=quantize), target)
        return f"TF.js Layers model {model_json}"
    except (ModelFileError, OSError) as exc:
        raise ConvertError(" ".join(str(exc).split())) from exc
