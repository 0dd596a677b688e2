"""Pretrained TF.js graph models on every backend: `await pib.load_graph_model(source)`.

The files are read (graph_model_format.py: weights dequantized), the GraphDef converted into
steps over the op table (graph_model_convert.py, graph_model_ops.py), once, at load; calls then
run those steps on the active backend. The model is frozen: its constants are Variables that no
optimizer sees (layers.Pretrained(trainable=True) trains copies of its own), uploaded once per
backend on first use there. `GraphModel.host_weights` keeps their host copies (numpy, by tensor
reference "node:0"), which the model's resilience.DeviceState holds too: a call is guarded, and
after a device loss the weights of the lost backend are uploaded again, in place, to the one
that replaced it (the same Variables, so a frozen layers.Pretrained built on them goes on
reading them). `release(backend)` forgets one backend's copies.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from .. import autograd, replay, resilience
from .. import functional as F
from ..backends import Backend
from ..forward_replay import ForwardReplayer
from ..runtime import current_backend, tidy, use_backend
from ..tensor import Tensor, Variable, tensor
from . import tfjs
from .graph_model_convert import Program, convert, ref_of
from .graph_model_format import GRAPH_MODEL, read_graph

Outputs = Tensor | list[Tensor]

# The tensors of handlandmark-lite (MediaPipe's hand landmark model, as @vladmandic/human ships
# it) by role: the global average pool that feeds its dense heads is the embedding a classifier
# head trains on; landmarks are 21 (x, y, z) in input pixels, world_landmarks the same in metres,
# hand_score the chance a hand is there. Its input is a (batch, 224, 224, 3) RGB crop of the hand
# scaled to [0, 1] (human's handtrack.ts divides the crop by 255).
HAND_NODES = {
    "embedding": "model_1/model/global_average_pooling2d/Mean:0",
    "landmarks": "Identity:0",
    "hand_score": "Identity_1:0",
    "handedness": "Identity_2:0",
    "world_landmarks": "Identity_3:0",
}


def _describe(endpoint: Any, any_batch: bool) -> dict[str, Any]:
    shape = None if endpoint.shape is None else list(endpoint.shape)
    if shape and any_batch and shape[0] in (1, -1):
        shape[0] = None  # the batch: any size
    return {"name": endpoint.name, "shape": shape, "dtype": endpoint.dtype}


class _ShapesOnly(Backend):
    """A backend without data: the op table's shape and dtype rules run, no kernel does. Output
    shapes come from running a graph on it (no device work, nothing to free on a real one)."""

    name = "shapes"

    def upload(self, array: np.ndarray) -> None:
        return None

    def free(self, handle: Any) -> None:
        return None

    def run(self, op: str, inputs: list[Any], attrs: dict[str, Any], out: Any) -> None:
        return None


class _OneOutput:
    """A GraphModel computing one tensor, as ForwardReplayer reads a model: the pass, the weights
    it reads as the recording's state, and no layer state."""

    def __init__(self, gm: GraphModel, ref: str) -> None:
        self.gm, self.ref = gm, ref
        self.layers: list[Any] = []
        self.weights = list(gm.weights().values())

    def __call__(self, x: Any, training: bool = False) -> Tensor:
        out = self.gm.run(x, self.ref)
        assert isinstance(out, Tensor)
        return out


class GraphModel:
    """A TF.js graph model converted to the engine's ops (see load_graph_model).

    `await gm(x)` gives its signature outputs (a Tensor, or a list in signature order when it has
    several); `await gm(x, output="node/name")` any node's value, a list of names a list. `x` is
    a Tensor or an array (cast to the input's dtype); a model with several inputs takes a list
    in signature order or a dict by input name. `inputs` and `outputs` describe the signature as
    [{"name", "shape", "dtype"}] (shape None where unknown; the batch None when any batch runs).

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> gm = await pib.load_graph_model(graph_models.tiny_graph_model())
        >>> gm.inputs
        [{'name': 'x:0', 'shape': [None, 3], 'dtype': 'float32'}]
        >>> await (await gm(np.ones((2, 3)))).numpy()
        array([[0.5],
               [0.5]], dtype=float32)
        >>> (await gm(np.ones((1, 3)), output="h")).shape
        (1, 2)
    """

    def __init__(self, program: Program, name: str = "graph_model") -> None:
        self.program = program
        self.name = name
        self.host_weights: dict[str, np.ndarray] = program.weights
        # One set of weights per backend it was used on; a set follows its Variables' storage
        # (a rebuild after a loss moves it to the backend that replaced the lost one).
        self._uploaded: list[dict[str, Variable]] = []
        self._replayers: dict[tuple[int, str], tuple[_OneOutput, ForwardReplayer]] = {}
        self.device_state = _device_state(self)

    @property
    def inputs(self) -> list[dict[str, Any]]:
        """The signature's inputs: [{"name": "node:0", "shape", "dtype"}] (batch None: any)."""
        return [_describe(e, self.program.any_batch) for e in self.program.inputs]

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The signature's outputs, in the order a call returns them, described as `inputs`."""
        return [_describe(e, self.program.any_batch) for e in self.program.outputs]

    def weights(self, backend: Backend | None = None) -> dict[str, Variable]:
        """The model's constants on `backend` (default: the active one), uploaded on first use
        there as non-trainable Variables named "<model>/<node>"."""
        backend = backend or current_backend()
        for uploaded in self._uploaded:
            if _backend_of(uploaded) is backend:
                return uploaded
        if backend is not current_backend():
            raise ValueError("GraphModel.weights: upload happens on the active backend only")
        uploaded = {
            ref: Variable(
                array,
                trainable=False,
                name=f"{self.name}/{ref.split(':')[0]}",
                dtype=str(array.dtype) if array.dtype != np.bool_ else "bool",
            )
            for ref, array in self.host_weights.items()
        }
        if uploaded:
            self._uploaded.append(uploaded)
            # Host copies for a rebuild after a loss: the arrays it was made from, no readback.
            self.device_state.keep([(v, self.host_weights[r]) for r, v in uploaded.items()])
        return uploaded

    def _device_variables(self) -> list[Variable]:
        """The weights a rebuild after a loss uploads: the sets on the active backend or on a
        lost or retired one (those move to the active backend); a set on another working
        backend (pib.init switched away from it) stays where it is."""
        current = current_backend()
        variables: list[Variable] = []
        for uploaded in self._uploaded:
            where = _backend_of(uploaded)
            if where is not None and (where is current or where.retired or where.is_lost()):
                variables.extend(uploaded.values())
        return variables

    def output_shape(
        self, input_shape: Sequence[int], output: str | None = None
    ) -> tuple[int, ...]:
        """The shape (without the batch axis) of `output` (default: the first signature output)
        for inputs of `input_shape` (without the batch axis), by the op table's shape rules
        alone: nothing runs on a device."""
        previous = current_backend()
        use_backend(_ShapesOnly())
        try:
            with tidy():
                weights = {ref: tensor(a, dtype=None) for ref, a in self.host_weights.items()}
                x = F.zeros((1, *input_shape), self.program.inputs[0].dtype)
                out = self.run(x, output or self.program.outputs[0].name, weights)
                assert isinstance(out, Tensor)
                return tuple(out.shape[1:])
        finally:
            use_backend(previous)

    def release(self, backend: Backend | None = None) -> None:
        """Frees the device copies of the weights on `backend` (default: every backend)."""
        self._drop_replayers(lambda held: backend is None or held is backend)
        kept = []
        for uploaded in self._uploaded:
            if backend is None or _backend_of(uploaded) is backend:
                for t in uploaded.values():
                    t.dispose()
            else:
                kept.append(uploaded)
        self._uploaded = kept

    def _drop_replayers(self, which: Callable[[Backend], bool]) -> None:
        """Closes the recorded passes of the backends `which(backend)` picks."""
        for key, (_, replayer) in list(self._replayers.items()):
            if which(replayer.backend):
                replayer.close()
                del self._replayers[key]

    def _inputs(self, x: Any) -> dict[str, Tensor]:
        endpoints = self.program.inputs
        if isinstance(x, Mapping):
            given = [x[e.name] if e.name in x else x[e.name.split(":")[0]] for e in endpoints]
        elif isinstance(x, list | tuple) and len(endpoints) > 1:
            given = list(x)
        else:
            given = [x]
        if len(given) != len(endpoints):
            raise ValueError(f"{self.name}: expected {len(endpoints)} inputs, got {len(given)}")
        feeds: dict[str, Tensor] = {}
        for endpoint, value in zip(endpoints, given, strict=True):
            t = value if isinstance(value, Tensor) else tensor(value, dtype=endpoint.dtype)
            t = F.cast(t, endpoint.dtype)
            if not self.program.any_batch and t.shape and t.shape[0] != 1:
                raise ValueError(
                    f"{self.name}: this graph runs batch 1 only ({self.program.fixes_batch[0]}); "
                    f"got a batch of {t.shape[0]}"
                )
            want = endpoint.shape
            if want is not None:
                fits = len(t.shape) == len(want) and all(
                    w in (-1, s) or (i == 0 and self.program.any_batch)
                    for i, (w, s) in enumerate(zip(want, t.shape, strict=True))
                )
                if not fits:
                    raise ValueError(
                        f"{self.name}: input {endpoint.name!r} expects shape {list(want)}"
                        f"{' (any batch)' if self.program.any_batch else ''}, got {list(t.shape)}"
                    )
            feeds[ref_of(endpoint.name)] = t
        return feeds

    def _wanted(self, output: str | Sequence[str] | None) -> list[str]:
        if output is None:
            return [ref_of(e.name) for e in self.program.outputs]
        names = [output] if isinstance(output, str) else list(output)
        refs = [ref_of(n) for n in names]
        for name, ref in zip(names, refs, strict=True):
            if not self.program.known(ref):
                raise KeyError(f"{self.name}: no node value {name!r} in this graph")
        return refs

    def run(
        self,
        x: Any,
        output: str | Sequence[str] | None = None,
        weights: Mapping[str, Tensor] | None = None,
    ) -> Outputs:
        """The synchronous form of a call, without a tidy scope (a layer's forward pass runs it
        inside the tape); `weights` replaces the model's own (layers.Pretrained's copies)."""
        wanted = self._wanted(output)
        env: dict[str, Tensor] = dict(self._inputs(x))
        reads = self.weights() if weights is None else weights
        steps = self.program.steps
        for index in self.program.plan(wanted):
            step = steps[index]
            result = step.run(*(env[r] if r in env else reads[r] for r in step.inputs))
            for k, value in enumerate(result if isinstance(result, list) else [result]):
                env[f"{step.node}:{k}"] = value
        values = [
            env[r]
            if r in env
            else tensor(self.program.folded.get(r, self.host_weights.get(r)), dtype=None)
            for r in wanted
        ]
        single = (output is None and len(values) == 1) or isinstance(output, str)
        return values[0] if single else values

    async def __call__(self, x: Any, output: str | Sequence[str] | None = None) -> Outputs:
        """Runs the model on `x` in a tidy scope (see the class); one requested tensor runs
        through recorded passes where the backend replays inference (predict's rule,
        forward_replay.py), so a model called per camera frame costs one backend call. The call
        is guarded (resilience.py): a device lost before or during it is recovered, the weights
        rebuilt from their host copies and the call run again."""
        wanted = self._wanted(output)
        return await resilience.guarded(
            lambda: self._call(x, output, wanted), self.device_state, inputs=(x,)
        )

    async def _call(self, x: Any, output: str | Sequence[str] | None, wanted: list[str]) -> Outputs:
        backend = current_backend()
        # Passes recorded on a retired backend name its lost buffers: never replayed again.
        self._drop_replayers(lambda held: held.retired)
        if (
            len(wanted) == 1
            and backend.replays_inference
            and replay.ENABLED
            and not autograd.active_tapes
        ):
            key = (id(backend), wanted[0])
            if key not in self._replayers or self._replayers[key][1].backend is not backend:
                adapter = _OneOutput(self, wanted[0])
                self._replayers[key] = (adapter, ForwardReplayer(cast(Any, adapter), backend))
            out = self._replayers[key][1](x if isinstance(x, Tensor) else np.asarray(x))
            result: Outputs = [out] if isinstance(output, list | tuple) else out
        else:
            result = tidy(lambda: self.run(x, output))()
        # As predict does after each batch: a loss during the call (WebGPU reports a destroyed
        # device a little later) is reported before the guard looks, so it runs the call again.
        await asyncio.sleep(0)
        return result

    def replayed(self) -> int:
        """How many calls ran as a replayed recording (on backends that replay inference)."""
        return sum(replayer.replayed for _, replayer in self._replayers.values())

    def __repr__(self) -> str:
        return (
            f"GraphModel({self.name!r}, {len(self.program.steps)} steps, "
            f"{sum(a.size for a in self.host_weights.values()):,} weights)"
        )


async def load_graph_model(source: tfjs.Files | str | Path, name: str | None = None) -> GraphModel:
    """A TF.js graph model (format "graph-model") as a frozen GraphModel.

    `source`: the files as a dict ({"model.json": text or bytes, "<shard>": bytes}), the URL of
    its model.json (shards fetched beside it), or in CPython a folder or model.json path. The
    graph is converted here, once: unsupported ops are refused by name (FormatError), quantized
    weights dequantized; docs/interop.rst lists the supported ops.

    Example:
        >>> from py_in_browser.testing import graph_models
        >>> gm = await pib.load_graph_model(graph_models.tiny_graph_model())
        >>> gm.outputs
        [{'name': 'y:0', 'shape': [None, 1], 'dtype': 'float32'}]
    """
    files = await tfjs.read_source(source, GRAPH_MODEL)
    return GraphModel(convert(read_graph(files)), name or _name_of(source))


def _backend_of(uploaded: dict[str, Variable]) -> Backend | None:
    """The backend a set of weights lives on (None: released)."""
    storage = next(iter(uploaded.values()))._storage
    return None if storage is None else storage.backend


def _device_state(gm: GraphModel) -> resilience.DeviceState:
    owner = weakref.ref(gm)  # the state must not keep its model alive

    def variables() -> list[Variable]:
        alive = owner()
        return alive._device_variables() if alive is not None else []

    return resilience.DeviceState(variables)


def _name_of(source: tfjs.Files | str | Path) -> str:
    """A model's default name: its model.json's folder, or the json file's stem."""
    if not isinstance(source, str | Path):
        return "graph_model"
    path = Path(str(source).split("?")[0])
    if path.suffix != ".json":
        return path.name or "graph_model"
    return path.parent.name if path.name == tfjs.MODEL_JSON else path.stem
