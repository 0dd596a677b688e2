"""A TF.js GraphDef converted, once at load, into a program over the engine's op table.

The converter walks the nodes in topological order with each value either a constant (numpy) or
a run-time value (graph_model_ops.Sym). Every op must have a handler in graph_model_ops.OPS:
the ones that do not are refused together, by name, before anything else happens, so an
unsupported graph fails at load and never halfway through a call. A node whose inputs are all
constants is folded on the host where its handler can (Reshape, Cast, Pack, arithmetic, ...);
attribute-like inputs (shapes, axes, sizes) are read as constants here and live in the steps'
closures, so a step's tensors are its run-time inputs and the weights it reads.

The program is data plus closures: `steps` in order, each with the references ("node:k") of its
tensor inputs; `weights`, the host copies of every constant a step reads (uploaded once per
backend by graph_model.GraphModel, and kept so a lost device can be given them again); the
folded constants by reference; and whether the graph runs any batch or only the batch of 1 its
signature was converted with (`fixes_batch` says which nodes require it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .graph_model_format import Endpoint, GraphDef, Node
from .graph_model_ops import OPS, Args, ConvertError, Lowered, Run, Sym, Value

# Ops the converter reads itself rather than through a handler.
SOURCES = ("Const", "Placeholder", "NoOp")


def ref_of(name: str) -> str:
    """A tensor reference in canonical form: "node" -> "node:0".

    Example:
        >>> from py_in_browser.interop.graph_model_convert import ref_of
        >>> ref_of("Identity"), ref_of("unstack:1")
        ('Identity:0', 'unstack:1')
    """
    node, _, index = name.partition(":")
    return f"{node}:{index or 0}"


@dataclass(frozen=True)
class Step:
    """One converted node: `run` over the tensors of `inputs` gives its `outputs` values."""

    node: str
    op: str
    run: Run
    inputs: tuple[str, ...]
    outputs: int


@dataclass
class Program:
    """The converted graph (see the module docstring)."""

    steps: list[Step]
    weights: dict[str, np.ndarray]
    folded: dict[str, np.ndarray]
    inputs: tuple[Endpoint, ...]
    outputs: tuple[Endpoint, ...]
    batched: dict[str, bool]
    fixes_batch: list[str]
    _plans: dict[tuple[str, ...], list[int]] = field(default_factory=dict)

    @property
    def any_batch(self) -> bool:
        """Whether a call may bring any batch size, not only the signature's 1."""
        return not self.fixes_batch

    def producer(self) -> dict[str, int]:
        return {f"{s.node}:{k}": i for i, s in enumerate(self.steps) for k in range(s.outputs)}

    def known(self, ref: str) -> bool:
        return ref in self.folded or ref in self.weights or ref in self.batched

    def plan(self, wanted: Sequence[str]) -> list[int]:
        """The indices of the steps computing `wanted`, in order (cached per request)."""
        key = tuple(wanted)
        if key not in self._plans:
            producers = self.producer()
            needed: set[int] = set()
            stack = [producers[r] for r in wanted if r in producers]
            while stack:
                index = stack.pop()
                if index in needed:
                    continue
                needed.add(index)
                stack.extend(producers[r] for r in self.steps[index].inputs if r in producers)
            self._plans[key] = sorted(needed)
        return self._plans[key]

    def op_counts(self) -> Counter[str]:
        """How many steps of each TF op the program runs."""
        return Counter(step.op for step in self.steps)


def _topological(nodes: Sequence[Node]) -> list[Node]:
    by_name = {node.name: node for node in nodes}
    order: list[Node] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for root in nodes:
        if root.name in state:
            continue
        stack = [(root, iter(root.inputs))]
        state[root.name] = 1
        while stack:
            node, pending = stack[-1]
            for ref in pending:
                child = by_name[ref.split(":")[0]]
                if state.get(child.name) == 1:
                    raise ConvertError(f"the graph has a cycle through node {child.name!r}")
                if child.name not in state:
                    state[child.name] = 1
                    stack.append((child, iter(child.inputs)))
                    break
            else:
                stack.pop()
                state[node.name] = 2
                order.append(node)
    return order


def _refuse_unsupported(nodes: Sequence[Node]) -> None:
    missing = Counter(n.op for n in nodes if n.op not in SOURCES and n.op not in OPS)
    if missing:
        listed = ", ".join(f"{op} ({count} nodes)" for op, count in sorted(missing.items()))
        raise ConvertError(
            f"the graph uses ops the importer does not support: {listed}; supported: "
            f"{', '.join(sorted(OPS))}"
        )


def _placeholder(node: Node) -> Sym:
    shape: list[int] = list(node.attrs.get("shape") or [])
    return Sym(batched=len(shape) > 0 and shape[0] in (1, -1))


def convert(graph: GraphDef) -> Program:
    """The program of a graph read by graph_model_format.read_graph; raises ConvertError naming
    every unsupported op, or the node whose settings cannot be converted."""
    nodes = _topological(graph.nodes)
    _refuse_unsupported(nodes)
    values: dict[str, Value] = {}
    steps: list[Step] = []
    fixes: list[str] = []
    for node in nodes:
        if node.op == "Const":
            values[f"{node.name}:0"] = np.asarray(graph.constants[node.name])
            continue
        if node.op == "Placeholder":
            values[f"{node.name}:0"] = _placeholder(node)
            continue
        if node.op == "NoOp":
            continue
        refs = [ref_of(r) for r in node.inputs]
        args = Args(node, [values[r] for r in refs])
        try:
            result = OPS[node.op](args)
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise ConvertError(f"node {node.name!r} ({node.op}): cannot convert: {exc!r}") from exc
        if not isinstance(result, Lowered):
            for k, array in enumerate(result):
                values[f"{node.name}:{k}"] = np.asarray(array)
            continue
        steps.append(
            Step(
                node.name,
                node.op,
                result.run,
                tuple(refs[i] for i in result.uses),
                len(result.batched),
            )
        )
        for k, batched in enumerate(result.batched):
            values[f"{node.name}:{k}"] = Sym(batched)
        if result.fixes_batch:
            fixes.append(result.fixes_batch)
    used = {r for step in steps for r in step.inputs}
    constants = {r: v for r, v in values.items() if isinstance(v, np.ndarray)}
    for endpoint in graph.outputs:
        if ref_of(endpoint.name) not in values:
            raise ConvertError(f"signature output {endpoint.name!r} names no node's value")
    return Program(
        steps=steps,
        weights={r: v for r, v in constants.items() if r in used},
        folded={r: v for r, v in constants.items() if r not in used},
        inputs=graph.inputs,
        outputs=graph.outputs,
        batched={r: v.batched for r, v in values.items() if isinstance(v, Sym)},
        fixes_batch=fixes,
    )
