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

from ... import file_weights
from .base import Match, origin_of, reshape

NAME = "gathered_spatial_map"
OPS = ("GatherND",)
MAX_IN = 4096          # H * W of the image plane
MAX_OUT = 4096         # output elements per plane (all results)
MAX_RESULTS = 256      # results read outside the subgraph (each its own MatMul)
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
    t, pair = g.producer.get(node.input[0]), None
    if t is not None and t.op_type == "DequantizeLinear":   # a QDQ model: Transpose -> Q -> DQ -> GatherND
        q = g.producer.get(t.input[0])
        if q is None or q.op_type != "QuantizeLinear" or not _same_scalar_params(q, t, g):
            return None
        pair, t = (q, t), g.producer.get(q.input[0])
    if t is None or t.op_type != "Transpose":
        return None
    sx = g.shape(t.input[0])
    if sx is None or len(sx) != 4:
        return None
    return Match([node, t], data={"pair": pair})


def _same_scalar_params(q, dq, g) -> bool:
    """One per-tensor (scale, zero point), the same on the Q and its DQ: the pair commutes with any
    selection of elements, so it can be taken on x before the Transpose."""
    ins_q, ins_d = list(q.input) + [""] * (3 - len(q.input)), list(dq.input) + [""] * (3 - len(dq.input))
    for a, b in zip(ins_q[1:], ins_d[1:]):
        if bool(a) != bool(b) or (a and (not g.is_const(a) or not g.is_const(b))):
            return False
        if a and (np.size(g.const(a)) != 1 or not np.array_equal(g.const(a), g.const(b))
                  or g.const(a).dtype != g.const(b).dtype):
            return False
    return len(g.users(q.output[0])) == 1


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
    order = [n for n in g.toposort() if id(n) in member]
    outs = [o for n in order for o in n.output
            if o and (o in g.pinned or any(id(u) not in member for u in g.users(o)))]
    if not outs or len(outs) > MAX_RESULTS:
        return f"the linear subgraph has {len(outs)} results read outside it (1 - {MAX_RESULTS})"
    return order, outs


def check(m: Match, g, target) -> Optional[str]:
    t = m.nodes[1]
    x = t.input[0]
    if g.dtype(x) != onnx.TensorProto.FLOAT:
        return "not a float32 tensor"
    got = _subgraph(m, g)
    if isinstance(got, str):
        return got
    nodes, ys = got
    sx = g.shape(x)
    if sx is None or any(d is None for d in sx):
        return "a shape is unknown"
    ks = []
    for y in ys:
        sy = g.shape(y)
        if sy is None or any(d is None for d in sy):
            return "a shape is unknown"
        if len(sy) < 2 or tuple(sy[:2]) != tuple(sx[:2]):
            return f"the result {list(sy)} does not keep x's first two axes {list(sx[:2])}"
        ks.append(int(np.prod(sy[2:], dtype=np.int64)))
    hw, k = sx[2] * sx[3], sum(ks)
    if hw > MAX_IN or k > MAX_OUT:
        return f"planes of {hw} -> {k} values exceed the bounds ({MAX_IN} / {MAX_OUT})"
    bridge = m.data["pair"][1].output[0] if m.data.get("pair") else None
    amap = _measure(g, t, nodes, x, ys, bridge)
    if isinstance(amap, str):
        return amap
    m.data.update(nodes=nodes, ys=ys, maps=amap)
    return None


def _run(g, t, nodes, x, ys, feeds: np.ndarray, bridge: Optional[str]) -> np.ndarray:
    """The subgraph on each feed (onnxruntime), its results flattened per plane and concatenated;
    ``bridge``: the tensor the GatherND reads when a Q / DQ pair sits between it and the Transpose
    (measured without the pair: the map of the float values)."""
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
    if bridge:
        body.insert(1, helper.make_node("Identity", [t.output[0]], [bridge]))
    graph = helper.make_graph(body, "spatial_map", [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, None) for y in ys],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=list(g.model.opset_import), ir_version=8)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(file_weights.serialized(model), so, providers=["CPUExecutionProvider"])
    planes = feeds.shape[1] * feeds.shape[2]
    return np.stack([np.concatenate([r.reshape(planes, -1) for r in sess.run(None, {x: f})], axis=1)
                     for f in feeds])


def _measure(g, t, nodes, x, ys, bridge=None):
    """[(A [K, H*W], b [K]) per result] of ``y[n, c] = A @ x[n, c] + b``, or a reason."""
    n, c, h, w = g.shape(x)
    planes, hw = n * c, h * w
    runs = -(-hw // planes)
    probes = np.zeros((runs + 2, planes, hw), np.float32)
    for j in range(hw):
        probes[j // planes, j % planes, j] = 1.0
    rng = np.random.default_rng(0)
    probes[runs + 1] = rng.standard_normal((planes, hw)).astype(np.float32)
    try:
        out = _run(g, t, nodes, x, ys, probes.reshape(runs + 2, n, c, h, w), bridge)
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
    maps, k0 = [], 0
    for y in ys:
        k = int(np.prod(g.shape(y)[2:], dtype=np.int64))
        maps.append((a[k0:k0 + k], b[k0:k0 + k]))
        k0 += k
    return maps


def _map_weight(g, anchor, a: np.ndarray, tag: str, int8: bool) -> str:
    """The map's [H*W, K] MatMul operand. In a QDQ model, when each output sums its inputs with one
    coefficient (a selection: 1; a window mean: 1 / size), it is ``DequantizeLinear`` of 0 / 1 int8
    codes with that coefficient as the per-column scale: an int8 layer whose accumulator is the exact
    integer sum of ``q - z``, requantized to each result's Q as onnxruntime's float selection / mean
    and Q would (an fp16 layer would round ``(q - z) s`` to fp16 first, moving codes)."""
    w = a.T.astype(np.float32)
    coef = np.array([col[col != 0][0] if np.any(col) else 1.0 for col in w.T], np.float32)
    if int8 and np.all((w == 0) | (w == coef[None, :])) and np.all(coef > 0):
        codes = g.add_const(f"{anchor.name}/map{tag}_codes", (w != 0).astype(np.int8))
        dq = g.fresh(f"{anchor.name}/map{tag}")
        g.make("DequantizeLinear", [codes, g.add_const(f"{anchor.name}/map{tag}_scale", coef),
                                    g.add_const(f"{anchor.name}/map{tag}_zero", np.zeros(len(coef), np.int8))],
               [dq], near=anchor, origin=origin_of(anchor), name=f"{anchor.name}/map{tag}_dq", axis=1)
        g.set_shape(dq, list(w.shape), onnx.TensorProto.FLOAT)
        return dq
    return g.add_const(f"{anchor.name}/map{tag}", w)


def _result_quantizer(g, y: str):
    """The QuantizeLinear every reader of ``y`` is (one per-tensor scale / zero point), or None."""
    users = g.users(y)
    if not users or y in g.pinned or any(u.op_type != "QuantizeLinear" for u in users):
        return None
    q = users[0]
    params = [list(u.input[1:]) for u in users]
    if any(len(p) != len(params[0]) for p in params) or any(not g.is_const(i) for p in params for i in p if i):
        return None
    if any(not np.array_equal(g.const(i), g.const(j)) for p in params[1:] for i, j in zip(p, params[0])):
        return None
    return q if all(np.size(g.const(i)) == 1 for i in params[0] if i) else None


def rewrite(m: Match, g) -> str:
    t, nodes, ys, maps = m.nodes[1], m.data["nodes"], m.data["ys"], m.data["maps"]
    x = t.input[0]
    n, c, h, w = g.shape(x)
    pair = m.data.get("pair")
    origin = origin_of(t, *nodes, *(pair or ()))
    anchor = m.node
    for nd in nodes:
        g.remove(nd)
    if pair:   # the pair moves onto x (elementwise, one scale: it commutes with the selection)
        q, dq = pair
        xq, xd = g.fresh(f"{x}/q"), g.fresh(f"{x}/dq")
        g.make("QuantizeLinear", [x] + list(q.input[1:]), [xq], near=anchor, origin=origin, name=f"{anchor.name}/q")
        g.set_shape(xq, [n, c, h, w], g.dtype(q.output[0]))
        fq = reshape(g, xq, [n, c, h * w], near=anchor, origin=origin, tag="planes")   # codes: exact
        g.make("DequantizeLinear", [fq] + list(dq.input[1:]), [xd], near=anchor, origin=origin,
               name=f"{anchor.name}/dq")
        g.set_shape(xd, [n, c, h * w], g.dtype(x))
        flat = xd
    else:
        flat = reshape(g, x, [n, c, h * w], near=anchor, origin=origin, tag="planes")
    for j, (y, (a, b)) in enumerate(zip(ys, maps)):
        tag = "" if len(ys) == 1 else f"_{j}"
        mm = g.fresh(f"{y}/map")
        g.make("MatMul", [flat, _map_weight(g, anchor, a, tag, int8=bool(pair) and not np.any(b))], [mm],
               near=anchor, origin=origin, name=f"{anchor.name}/map{tag}")
        g.set_shape(mm, [n, c, a.shape[0]], g.dtype(x))
        if np.any(b):
            mb = g.fresh(f"{y}/bias")
            g.make("Add", [mm, g.add_const(f"{anchor.name}/bias{tag}", b.astype(np.float32))], [mb], near=anchor,
                   origin=origin, name=f"{anchor.name}/bias{tag}")
            g.set_shape(mb, [n, c, a.shape[0]], g.dtype(x))
            mm = mb
        qs = _result_quantizer(g, y) if pair and not np.any(b) else None
        if qs is not None:   # MatMul -> Q -> DQ -> Reshape: the layer ends in the result's own Q (Q(DQ(q)) = q)
            mq, md = g.fresh(f"{y}/map_q"), g.fresh(f"{y}/map_dq")
            g.make("QuantizeLinear", [mm] + list(qs.input[1:]), [mq], near=anchor, origin=origin,
                   name=f"{anchor.name}/map{tag}_q")
            g.set_shape(mq, [n, c, a.shape[0]], g.dtype(qs.output[0]))
            g.make("DequantizeLinear", [mq] + list(qs.input[1:]), [md], near=anchor, origin=origin,
                   name=f"{anchor.name}/map{tag}_dq2")
            g.set_shape(md, [n, c, a.shape[0]], g.dtype(x))
            mm = md
        reshape(g, mm, list(g.shape(y)), near=anchor, origin=origin, out=y, tag=f"unplanes{tag}")
    for nd in (pair[1], pair[0], t) if pair else (t,):
        if not any(g.users(o) for o in nd.output) and not any(o in g.pinned for o in nd.output):
            g.remove(nd)
    k = sum(a.shape[0] for a, _ in maps)
    return (f"{len(nodes)} nodes -> {len(ys)} MatMul by constants [{h * w}, {k}]"
            + (" (the Q / DQ pair taken on x)" if pair else ""))
