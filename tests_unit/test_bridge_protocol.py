"""Python and the bridges agree on every number and layout across the JS boundary: each bridge.js
runs under Node on a fake GL context / GPU device, takes its protocol from Python as the real
start-up does, and is fed commands Python built; what it asks of the fake must be what Python
meant (opcodes, field and word orders, input slots, uniform names, requested limits)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from py_in_browser.backends import OutSpec
from py_in_browser.backends.webgl2 import wire
from py_in_browser.backends.webgl2.backend import WebGL2Backend
from py_in_browser.backends.webgpu import backend as webgpu_backend
from py_in_browser.backends.webgpu import commands as webgpu_commands

HARNESS = Path(__file__).with_name("js")
TEXTURE0 = 0x84C0  # what the harness's fake GL numbers TEXTURE0 as


def run_bridge(harness: str, bridge: Path, data: dict[str, Any], tmp_path: Path) -> Any:
    node = shutil.which("node")
    assert node is not None, "node is part of the set-up (npm fetches the runtime); install Node.js"
    path = tmp_path / "input.json"
    path.write_text(json.dumps(data))
    done = subprocess.run(
        [node, str(HARNESS / harness), str(bridge), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ---- webgl2 -------------------------------------------------------------------------------------


class CapturingEngine:
    """Stands in for bridge.js while Python queues: keeps each flush's payload for Node."""

    def __init__(self) -> None:
        self.payloads: list[tuple[str, list[float]]] = []

    def run(self, payload: str, staging: np.ndarray) -> str:
        self.payloads.append((payload, staging.tolist()))
        return "ok"


def test_webgl2_bridge_draws_what_python_queued(tmp_path: Path) -> None:
    backend = WebGL2Backend({"max_texture_size": 4096})
    engine = CapturingEngine()
    backend.queue.engine = engine
    backend.memory.max_side = 4096
    # Nine inputs: one draw more than a draw samples, so concat runs as a full group of
    # MAX_INPUTS_PER_DRAW, a group of one, and a concat of the groups.
    arrays = [np.full((k + 1, 4), k, np.float32) for k in range(wire.MAX_INPUTS_PER_DRAW + 1)]
    handles = [backend.upload(a) for a in arrays]
    spec = OutSpec((45, 4), "float32", tuple(a.shape for a in arrays), ("float32",) * 9)
    backend.run("concat", handles, {"axis": 0}, spec)
    backend.flush()
    commands = [c for payload, _ in engine.payloads for c in json.loads(payload)["commands"]]
    draws = [c for c in commands if c[0] == wire.DRAW]
    full_group = f"concat:{wire.MAX_INPUTS_PER_DRAW}"
    assert [d[1] for d in draws] == [full_group, "concat:1", "concat:2"]

    bridge = Path(wire.__file__).with_name("bridge.js")
    protocol = json.loads(wire.protocol())
    log = run_bridge(
        "webgl2_bridge.mjs", bridge, {"protocol": protocol, "payloads": engine.payloads}, tmp_path
    )

    textures = [c for c in commands if c[0] == wire.TEXTURE]
    storage = [call for call in log if call[0] == "texStorage2D"]
    assert [call[4:] for call in storage] == [[c[2], c[3]] for c in textures]  # width, height
    assert all(call[3] == "RGBA32F" for call in storage)  # 4 channels, not half
    uploads = [c for c in commands if c[0] == wire.UPLOAD]
    sub_images = [call for call in log if call[0] == "texSubImage2D"]
    assert [call[-1] for call in sub_images] == [c[2] for c in uploads]  # staging offsets
    assert sum(call[0] == "drawArrays" for call in log) == len(draws)

    # The full group's draw: every input slot filled from its draw input's fields.
    first = log[: next(i for i, call in enumerate(log) if call[0] == "drawArrays")]
    values = {call[1]: call[2] for call in first if call[0].startswith("uniform")}
    names = wire.UNIFORMS
    for k, (texture, lo, size, repeat) in enumerate(draws[0][wire.DRAW_INPUTS]):
        layout = next(c for c in textures if c[1] == texture)
        assert lo == -1 and values[f"{names['input_layout']}{k}"] == [
            layout[2],  # width
            layout[4],  # channels
            size,
            repeat,
        ]
    target = next(c for c in textures if c[1] == draws[0][wire.DRAW_FIELDS.index("target")])
    assert values[names["target_layout"]] == [target[2], target[4]]
    assert values[names["target_size"]] == [draws[0][wire.DRAW_FIELDS.index("size")]]
    for name, _, uniform in draws[0][wire.DRAW_FIELDS.index("uniforms")]:
        assert values[name] == uniform
    # Samplers: input k on unit k (a program sampling no float16 low part: bridge.js puts input
    # k on unit 2k only where it does), bound to the texture Python named for it.
    bound: dict[int, str] = {}
    unit = -1
    for call in first:
        if call[0] == "activeTexture":
            unit = call[1] - TEXTURE0
        elif call[0] == "bindTexture" and unit >= 0:
            bound[unit] = call[2]
    inputs = draws[0][wire.DRAW_INPUTS]
    assert {u: bound[u] for u in range(len(inputs))} == {
        k: f"texture{entry[0]}" for k, entry in enumerate(inputs)
    }


def test_webgl2_protocol_names_what_the_shaders_declare() -> None:
    """The uniform names bridge.js sets from the protocol are the ones shaders.py declares."""
    from py_in_browser.backends.webgl2 import shaders

    names = wire.UNIFORMS
    source = shaders.program_source(f"concat:{wire.MAX_INPUTS_PER_DRAW}")
    paired = shaders.program_source("binary:add+pair")
    assert f"uniform ivec2 {names['target_layout']};" in source
    assert f"uniform int {names['target_size']};" in source
    for k in range(wire.MAX_INPUTS_PER_DRAW):
        assert f"uniform sampler2D {names['input']}{k};" in source
        assert f"uniform ivec4 {names['input_layout']}{k};" in source
    for k in range(2):
        assert f"uniform sampler2D {names['input']}{k}{names['low_part']};" in paired
        assert f"uniform int {names['input_has_low_part']}{k};" in paired


# ---- webgpu -------------------------------------------------------------------------------------


def test_webgpu_bridge_reads_the_command_words_python_wrote(tmp_path: Path) -> None:
    c = webgpu_commands
    stream = c.CommandList()
    stream.create(1, 64)
    stream.create(2, 64)
    stream.write(1, b"\x01" * 12)
    stream.params(0, b"\x02" * 8)
    label = 1 << c.LABEL_SHIFT  # the op name a profile shows, packed with the pipeline id
    stream.dispatch(c.dispatch_record(0 | label, 0, (3, 2, 1), [(1, 64), (2, 32)]))
    stream.copy(1, 2, 64)
    stream.replay(7)
    stream.destroy(2)
    words, blob = stream.take()
    recorded = c.dispatch_record(0, -1, (5, 1, 1), [(2, 16)])

    bridge = Path(webgpu_commands.__file__).with_name("bridge.js")
    data = {
        "protocol": json.loads(webgpu_backend.bridge_protocol()),
        "pipelines": [[0, "kernel0"]],
        "labels": [[1, "relu"]],
        "recordings": [[7, recorded]],
        "flushes": [[words.tolist(), blob.tolist()]],
    }
    out = run_bridge("webgpu_bridge.mjs", bridge, data, tmp_path)
    log = [call for call in out["log"] if call[0] != "submit"]
    storage = 128 | 4 | 8  # STORAGE | COPY_SRC | COPY_DST as the harness numbers them
    assert log == [
        ["createBuffer", "buffer1", 64, storage],
        ["createBuffer", "buffer2", 64, storage],
        ["writeBuffer", "buffer1", 0, 0, 12],
        ["createBuffer", "buffer3", 16, 64 | 8],  # params: UNIFORM | COPY_DST, at least 16
        ["writeBuffer", "buffer3", 0, 12, 8],
        ["setPipeline", "kernel0"],
        ["setBindGroup", 0, [[0, "buffer1", 64], [1, "buffer2", 32], [2, "buffer3", None]]],
        ["dispatchWorkgroups", 3, 2, 1],
        ["copyBufferToBuffer", "buffer1", 0, "buffer2", 0, 64],
        ["setPipeline", "kernel0"],
        ["setBindGroup", 0, [[0, "buffer2", 16]]],
        ["dispatchWorkgroups", 5, 1, 1],
        ["destroy", "buffer2"],
    ]
    # bridge.js asks the adapter for the limits Python reads back from info().
    limits = out["info"]["limits"]
    assert list(limits) == list(webgpu_backend.REQUESTED_LIMITS)
    assert {*webgpu_backend._LIMIT_NAMES.values(), "maxBufferSize"} <= set(limits)
