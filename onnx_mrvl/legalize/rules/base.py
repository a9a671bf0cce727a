"""What every rule shares: the Match record and small tensor helpers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto

from ..graph import Graph, attr, origin_of, str_attr  # noqa: F401  (re-exported for the rules)
from ...graph_index import slice_bounds

FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


class Contradiction(str):
    """A check's reason that says the model is invalid at its shapes (the ONNX spec forbids the node
    there: a reflect pad as wide as its axis, a Reshape 0 copying an axis the input lacks). The node
    stays as it is; ``convert`` asks onnxruntime whether the input shapes the user pinned are the
    cause (shape_fit.py) and, when onnxruntime refuses them too, says so (``UsageError``)."""


@dataclass
class Match:
    """The nodes a rule matched (anchor first) and what it learnt while matching."""

    nodes: List[onnx.NodeProto]
    data: Dict[str, Any] = field(default_factory=dict)

    @property
    def node(self) -> onnx.NodeProto:
        return self.nodes[0]

    @property
    def origin(self) -> List[str]:
        return origin_of(*self.nodes)


def match_rank(node: onnx.NodeProto, g: Graph, ops, rank: int) -> Optional[Match]:
    """A standard-domain node of ``ops`` whose first input has a static shape of ``rank`` axes."""
    if node.op_type not in ops or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    return Match([node]) if sx is not None and len(sx) == rank else None


def inp(node: onnx.NodeProto, idx: int) -> str:
    """Input ``idx`` of ``node`` or "" when absent."""
    return node.input[idx] if len(node.input) > idx else ""


def const_input(g: Graph, node: onnx.NodeProto, idx: int) -> Optional[np.ndarray]:
    name = inp(node, idx)
    return g.const(name) if name else None


def is_float(g: Graph, name: str) -> bool:
    return g.dtype(name) in FLOAT_TYPES


def scalar(arr: Optional[np.ndarray]) -> Optional[float]:
    """The value of a one-element constant, else None."""
    if arr is None or arr.size != 1:
        return None
    return float(arr.reshape(-1)[0])


def ints(node: onnx.NodeProto, name: str, n: int, default: int) -> List[int]:
    v = attr(node, name)
    return [int(x) for x in v] if v else [default] * n


def axes_of(g: Graph, node: onnx.NodeProto, input_idx: int) -> Optional[List[int]]:
    """Axes given as attribute (old opsets) or as constant input (new ones); None when dynamic,
    [] when absent."""
    a = attr(node, "axes")
    if a is not None:
        return [int(x) for x in a]
    name = inp(node, input_idx)
    if not name:
        return []
    v = g.const(name)
    return None if v is None else [int(x) for x in v.reshape(-1)]


def shape_const(g: Graph, near: onnx.NodeProto, shape) -> str:
    return g.add_const(f"{near.name}/shape", np.asarray(list(shape), dtype=np.int64))


def reshape(g: Graph, x: str, shape, *, near, origin, out: Optional[str] = None,
            tag: str = "reshape") -> str:
    """Add ``Reshape(x, shape)`` with a static shape initializer; returns the output name."""
    out = out or g.fresh(f"{x}/{tag}")
    g.make("Reshape", [x, shape_const(g, near, shape)], [out], near=near, origin=origin,
           name=f"{near.name}/{tag}")
    g.set_shape(out, shape, g.dtype(x))
    return out


def negated(g: Graph, x: str, *, near, origin, dtype=None) -> str:
    """``Mul(x, -1)`` (the accelerator's negation: a Mul by a constant) named after ``near``; returns
    its output, shaped and typed as ``x``. The -1 has numpy ``dtype`` when given, else x's type;
    ``near`` may already be removed (its name and place are used)."""
    neg = g.add_const(f"{near.name}/minus_one", np.array(-1, dtype=dtype)) if dtype is not None else \
        g.scalar_like(f"{near.name}/minus_one", -1.0, x)
    t = g.fresh(f"{x}/neg")
    g.make("Mul", [x, neg], [t], near=near, origin=origin, name=f"{near.name}/neg")
    if g.shape(x) is not None:
        g.set_shape(t, g.shape(x), g.dtype(x))
    return t


def pad_chain(g: Graph, x: str, extra, limit: int, *, near, origin, suffix: str, pads_const: str,
              node_name: str) -> str:
    """``x`` (4-D) zero-padded by ``extra`` ([top, left, bottom, right]) as a chain of constant ``Pad``
    nodes of at most ``limit`` each (pad_to_conv runs each as a depthwise conv); each output named
    ``<its input>/<suffix>``, the pads constant ``pads_const``, the node ``node_name``."""
    left = list(extra)
    while any(left):
        step = [min(p, limit) for p in left]
        sx = g.shape(x)
        out = g.fresh(f"{x}/{suffix}")
        pv = [0, 0, step[0], step[1], 0, 0, step[2], step[3]]
        g.make("Pad", [x, g.add_const(pads_const, pv, np.int64)], [out], near=near, origin=origin,
               name=node_name, mode="constant")
        g.set_shape(out, [sx[0], sx[1], sx[2] + step[0] + step[2], sx[3] + step[1] + step[3]], g.dtype(x))
        x, left = out, [p - q for p, q in zip(left, step)]
    return x


def np_dtype(g: Graph, name: str):
    from onnx import helper
    return helper.tensor_dtype_to_np_dtype(g.dtype(name) or TensorProto.FLOAT)


def bypass_reason(m: Match, g: Graph) -> Optional[str]:
    """Why a pass-through node (input copied to output) cannot be removed, or None."""
    src, dst = m.node.input[0], m.node.output[0]
    if dst in g.pinned and (g.producer.get(src) is None or src in g.pinned):
        return "it copies a graph input, initializer or output to a graph output"
    return None


def dq_producer(g: Graph, t: str) -> Optional[onnx.NodeProto]:
    """The standard-domain DequantizeLinear that writes ``t``, or None (also for an empty name)."""
    n = g.producer.get(t) if t else None
    return n if n is not None and n.op_type == "DequantizeLinear" and n.domain in ("", "ai.onnx") else None


def read_outside(g: Graph, nodes, out: str) -> Optional[str]:
    """The first intermediate result of ``nodes`` (every output but ``out``, the group's result) that is
    pinned or read by a node outside the group, or None: a written-out form is replaced whole only
    when nothing else reads its inside."""
    inside = {id(n) for n in nodes}
    for n in nodes:
        if n.output[0] == out:
            continue
        if n.output[0] in g.pinned or any(id(u) not in inside for u in g.users(n.output[0])):
            return n.output[0]
    return None


def sum_kept(g, node) -> Optional[str]:
    """Why a ReduceSum keeps its form (``reducesum_to_mean``, ``last_axis_ones``, ``reduce_sum_split``):
    an empty input, a QDQ reduction (fuse's int8 patterns read it), or ``x / sum(x)``, a decomposed
    normalization kept in fp32."""
    x = node.input[0]
    if 0 in (g.shape(x) or ()):
        return "an empty tensor (a dimension of 0): the sum of no values stays onnxruntime's"
    p = g.producer.get(x)
    if p is not None and p.op_type == "DequantizeLinear":
        return "a QDQ reduction"
    if any(u.op_type == "QuantizeLinear" for u in g.users(node.output[0])):
        return "a QDQ reduction"
    if any(u.op_type == "Div" and x in u.input for u in g.users(node.output[0])):
        return "x / sum(x): a decomposed normalization, kept in fp32"
    return None


def slice_params(g, node, shape):
    """The cuts of an opset >= 10 Slice with constant parameters over an input of ``shape``: one
    ``(axis, start, end, step)`` per listed axis (axes default to 0..n-1, steps to 1; the axis taken
    modulo the rank, start and end clamped into the axis as ONNX does for a positive step), else
    the reason."""
    if len(node.input) < 3:
        return "opset < 10 Slice (attributes)"
    vals = [g.const(inp(node, i)) if inp(node, i) else None for i in range(1, 5)]
    if any(inp(node, i) and v is None for i, v in zip(range(1, 5), vals)):
        return "slice parameters are not constants"
    starts, ends, axes, steps = (None if v is None else [int(x) for x in v.reshape(-1)] for v in vals)
    axes = axes if axes is not None else list(range(len(starts)))
    cuts = []
    for s, e, ax, st in zip(starts, ends, axes, steps or [1] * len(starts)):
        ax %= len(shape)
        dim = shape[ax]
        s, e = slice_bounds(s, e, dim)
        cuts.append((ax, s, e, st))
    return cuts
