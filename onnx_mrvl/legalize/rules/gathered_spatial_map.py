"""A constant affine map of each image plane written as gathers -> one MatMul with a constant:

    x [N, C, H, W] -> Transpose -> GatherND(constant windows) -> Transpose / Where(constant mask)
      / Gather(constant) / Add / Mul, Div by constants / ReduceSum, ReduceMean ... -> y [N, C, ...]
    ->  Reshape(x, [N, C, H*W]) -> MatMul(A [H*W, K]) (-> Add(b)) -> Reshape(y's shape)

The dynamo exporter decomposes ``adaptive_avg_pool2d`` whose output size does not divide the input
(PSPNet / UperNet pyramid pooling at the usual 512 input: bins 3 and 6 of a 16 x 16 map) into a
GatherND of the largest window at every output position, a masked_fill of the positions beyond
each window, sums over the window axes and a division by each window's size: 6-D tensors and a
GatherND no accelerator op takes, left on the CPU between the backbone and the decoder (a region
cut per pyramid level). Every op of that subgraph is linear in x with constant coefficients, the
same for every (n, c) plane, so the subgraph is ``y[n, c] = A @ x[n, c] + b``.

A and b are measured by running the subgraph (onnxruntime) on basis images and on zeros, and the
result is checked on a random input before the rewrite (an op mixing planes, or not affine, keeps
the original). Rules: float tensors with static shapes, x 4-D, y's first two axes x's, every other
input of the subgraph constant, a Mul of two subgraph tensors refused (not linear), H*W and the
output size bounded (``MAX_IN`` / ``MAX_OUT``). Exact up to the order of the sums (fp32 here)."""
from __future__ import annotations

from typing import Dict, Optional, Set

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .base import Match, origin_of, reshape

NAME = "gathered_spatial_map"
OPS = ("GatherND",)
MAX_IN = 4096          # H * W of the image plane
MAX_OUT = 4096         # output elements per plane
MAX_NODES = 2048      # torch 2.13 unrolls each window offset: PSPNet at 256 (32 x 32, bin 3) ~300 nodes
MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten")
# op -> input indices that must be constant (the data input comes from the subgraph)
CONST_INPUTS = {"GatherND": (1,), "Gather": (1,), "Where": (0,), "Div": (1,), "Slice": (1, 2, 3, 4),
                "ReduceSum": (1,), "ReduceMean": (1,), "Reshape": (1,), "Squeeze": (1,), "Unsqueeze": (1,)}
LINEAR = MOVES + ("GatherND", "Gather", "Where", "Add", "Sub", "Mul", "Div", "Neg", "ReduceSum", "ReduceMean",
                  "Slice", "Concat")


def match(node, g) -> Optional[Match]:
    if node.op_type != "GatherND" or node.domain not in ("", "ai.onnx") or not g.is_const(node.input[1]):
        return None
    t = g.producer.get(node.input[0])
    if t is None or t.op_type != "Transpose":
        return None
    sx = g.shape(t.input[0])
    if sx is None or len(sx) != 4:
        return None
    return Match([node, t])


def _linear(n, inside: Set[str], g) -> bool:
    """``n`` reads subgraph tensors and constants only, linearly."""
    if n.op_type not in LINEAR or n.domain not in ("", "ai.onnx"):
        return False
    ins = [i for i in n.input if i]
    if any(i not in inside and not g.is_const(i) for i in ins):
        return False
    if any(k < len(n.input) and n.input[k] and not g.is_const(n.input[k]) for k in CONST_INPUTS.get(n.op_type, ())):
        return False
    live = [i for i in ins if i in inside]
    if n.op_type == "Mul" and len(live) != 1:
        return False
    return bool(live)


def _subgraph(m: Match, g):
    """(nodes in order, output tensor) of the linear subgraph from the GatherND, or a reason."""
    start = m.node
    nodes, inside, member = [start], {start.output[0]}, {id(start)}
    frontier = [start.output[0]]
    while frontier and len(nodes) <= MAX_NODES:   # a node joins once all its inputs are inside
        grown = []
        for t in frontier:
            for u in g.users(t):
                if id(u) not in member and _linear(u, inside, g):
                    nodes.append(u)
                    member.add(id(u))
                    outs = [o for o in u.output if o]
                    inside.update(outs)
                    grown += outs
        frontier = grown if grown else []
    if len(nodes) > MAX_NODES:
        return f"more than {MAX_NODES} nodes in the linear subgraph"
    outs = [t for t in inside if t in g.pinned or any(id(u) not in member for u in g.users(t))]
    if len(outs) != 1:
        return f"the linear subgraph has {len(outs)} results read outside it (one expected)"
    order = [n for n in g.toposort() if id(n) in member]
    return order, outs[0]


def check(m: Match, g, target) -> Optional[str]:
    t = m.nodes[1]
    x = t.input[0]
    if g.dtype(x) != onnx.TensorProto.FLOAT:
        return "not a float32 tensor"
    got = _subgraph(m, g)
    if isinstance(got, str):
        return got
    nodes, y = got
    sx, sy = g.shape(x), g.shape(y)
    if sy is None or any(d is None for d in sy) or any(d is None for d in sx):
        return "a shape is unknown"
    if len(sy) < 2 or tuple(sy[:2]) != tuple(sx[:2]):
        return f"the result {list(sy)} does not keep x's first two axes {list(sx[:2])}"
    hw, k = sx[2] * sx[3], int(np.prod(sy[2:], dtype=np.int64))
    if hw > MAX_IN or k > MAX_OUT:
        return f"planes of {hw} -> {k} values exceed the bounds ({MAX_IN} / {MAX_OUT})"
    amap = _measure(g, t, nodes, x, y)
    if isinstance(amap, str):
        return amap
    m.data.update(nodes=nodes, y=y, a=amap[0], b=amap[1])
    return None


def _run(g, t, nodes, x, y, feeds: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    consts: Dict[str, np.ndarray] = {}
    for n in [t] + nodes:
        for i in n.input:
            if i and i != x and g.is_const(i):
                consts[i] = g.const(i)
    body = []
    for n in [t] + nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        del c.metadata_props[:]
        body.append(c)
    graph = helper.make_graph(body, "spatial_map", [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=list(g.model.opset_import), ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return np.stack([sess.run(None, {x: f})[0] for f in feeds])


def _measure(g, t, nodes, x, y):
    """(A [K, H*W], b [K]) of ``y[n, c] = A @ x[n, c] + b``, or a reason."""
    n, c, h, w = g.shape(x)
    planes, hw = n * c, h * w
    runs = -(-hw // planes)
    probes = np.zeros((runs + 2, planes, hw), np.float32)
    for j in range(hw):
        probes[j // planes, j % planes, j] = 1.0
    rng = np.random.default_rng(0)
    probes[runs + 1] = rng.standard_normal((planes, hw)).astype(np.float32)
    try:
        out = _run(g, t, nodes, x, y, probes.reshape(runs + 2, n, c, h, w)).reshape(runs + 2, planes, -1)
    except Exception as exc:   # noqa: BLE001 - onnxruntime refuses the subgraph: keep it
        return f"the subgraph does not run alone ({type(exc).__name__})"
    zero = out[runs]
    b = zero[0]
    if not np.array_equal(zero, np.broadcast_to(b, zero.shape)):
        return "the constant part differs between planes"
    cols = out[:runs].reshape(runs * planes, -1)[:hw] - b
    a = np.ascontiguousarray(cols.T)
    want, got = out[runs + 1], probes[runs + 1] @ a.T + b
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5 * (1.0 + float(np.abs(want).max()))):
        return "not one affine map of each plane (the subgraph mixes planes or is not linear)"
    return a, b


def rewrite(m: Match, g) -> str:
    t, nodes, y = m.nodes[1], m.data["nodes"], m.data["y"]
    x = t.input[0]
    n, c, h, w = g.shape(x)
    sy, a, b = g.shape(y), m.data["a"], m.data["b"]
    origin = origin_of(t, *nodes)
    anchor = m.node
    for nd in nodes:
        g.remove(nd)
    flat = reshape(g, x, [n, c, h * w], near=anchor, origin=origin, tag="planes")
    mm = g.fresh(f"{y}/map")
    g.make("MatMul", [flat, g.add_const(f"{anchor.name}/map", a.T.astype(np.float32))], [mm], near=anchor,
           origin=origin, name=f"{anchor.name}/map")
    g.set_shape(mm, [n, c, a.shape[0]], g.dtype(x))
    if np.any(b):
        mb = g.fresh(f"{y}/bias")
        g.make("Add", [mm, g.add_const(f"{anchor.name}/bias", b.astype(np.float32))], [mb], near=anchor,
               origin=origin, name=f"{anchor.name}/bias")
        g.set_shape(mb, [n, c, a.shape[0]], g.dtype(x))
        mm = mb
    reshape(g, mm, list(sy), near=anchor, origin=origin, out=y, tag="unplanes")
    if not g.users(t.output[0]) and t.output[0] not in g.pinned:
        g.remove(t)
    return f"{len(nodes)} nodes -> MatMul by a constant [{h * w}, {a.shape[0]}]"
