"""ReduceMean over axes {2,3} of a 4-D tensor -> GlobalAveragePool (+ Reshape for keepdims=0).
Axes come as an attribute (opset < 18) or a constant input (opset >= 18); negative axes too.
Also through a Transpose (tf2onnx: NCHW -> NHWC, then ReduceMean axes 1,2): when the reduced axes
are the source's 2,3 and the kept axes keep their order, the mean reads the Transpose's input.
Axes {1,2} of a 4-D NHWC image that no such Transpose writes directly (tf2onnx keeps Keras'
BatchNorm Mul and the activation in NHWC between a conv's NCHW -> NHWC Transpose and the
squeeze-excite mean: MobileNetV3, EfficientNet; found by walking up element-wise ops to that
Transpose) ->
``Transpose(x, [0, 3, 1, 2])`` -> GlobalAveragePool -> Reshape to the mean's shape (``[N, C, 1, 1]``
and ``[N, 1, 1, C]`` hold the data in one order): exact; fuse stores the NHWC data as it is.
The time mean of channels-last tokens, ``ReduceMean([N, T, C], axes [1], keepdims=0)`` (Keras
GlobalAveragePooling1D, mean pooling of an encoder's tokens) -> ``Reshape [N, T, 1, C]`` (an NHWC
image) -> ``Transpose`` to NCHW -> GlobalAveragePool -> ``Reshape [N, C]``. With keepdims=1 (a
statistic broadcast back over T) the mean is left as it was.

In a QDQ model (onnxruntime's quantizer: ``DQ -> Transpose -> Q -> DQ -> ReduceMean -> Q``, the
Transpose's pair with its input's scale and zero point) the look-through passes an identity
``Q -> DQ`` pair (same scale and zero point: the codes come back unchanged). With keepdims=0 (or
keepdims=1 and data moves before it: tf2onnx's ``[N, 1, 1, C]`` mean Transposed to NCHW) and a
QuantizeLinear reading the mean, a copy of that Q -> DQ pair goes between the pool and the
Reshape, so the pool is a ``DQ -> GlobalAveragePool -> Q`` int8 pool and the Reshape moves codes
(``Q(reshape(y)) == reshape(Q(y))``; the original pair after it is then an identity). A mean
whose input is a DQ output (the token mean of a QDQ Keras encoder) gets an identity copy of that
pair after its Reshape / Transpose, so the pool reads a DQ: one int8 GlobalAvgPool2D (one int32 sum,
one requantization) instead of an fp16 pool whose rounding moved codes before the Q.

``ReduceMax`` over the same axes 2,3 (directly or through that Transpose: Keras'
GlobalMaxPooling2D, tf2onnx / keras2onnx ``ReduceMax(Transpose(relu, [0, 2, 3, 1]), axes [1, 2])``,
DNSMOS' heads) -> GlobalMaxPool the same way, when the pooled map comes from a feature-map op
(reduce_axis_to_pool.FEATURE_MAP: a max pool window of only -inf is not -inf in onnxruntime).
Exact; gmp_split cuts a large one into windows. Before, "no accelerator op for ReduceMax" split
the model before its dense head."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, axes_of, inp, reshape
from .qtensor import same_param
from .reduce_axis_to_pool import FEATURE_MAP

NAME = "reducemean_to_gap"
OPS = ("ReduceMean", "ReduceMax")
POOL = {"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    m = _match(node, g)
    if m is None or node.op_type == "ReduceMean":
        return m
    src = _through_identity_pair(g, g.producer.get(m.data["src"]))   # ReduceMax: a feature map only
    return m if not m.data.get("tokens") and not m.data.get("nhwc") and src is not None and \
        src.op_type in FEATURE_MAP else None


def _match(node, g) -> Optional[Match]:
    sx = g.shape(node.input[0])
    if sx is not None and len(sx) == 3 and axes_of(g, node, 1) in ([1], [-2]) and not attr(node, "keepdims", 1):
        return Match([node], {"sx": [sx[0], sx[2], sx[1], 1], "src": node.input[0], "sy": [sx[0], sx[2]],
                              "tokens": True})
    if sx is None or len(sx) != 4:
        return None
    axes = axes_of(g, node, 1)
    if not axes:
        return None
    axes = sorted(a % 4 for a in axes)
    if axes == [2, 3]:
        return Match([node], {"sx": sx, "src": node.input[0]})
    tr = _through_identity_pair(g, g.producer.get(node.input[0]))
    perm = attr(tr, "perm") if tr is not None and tr.op_type == "Transpose" else None
    if perm is None or len(perm) != 4 or g.shape(tr.input[0]) is None:
        sy = g.shape(node.output[0])
        if axes != [1, 2] or sy is None or not _nhwc_image(g, node.input[0]):
            return None
        return Match([node], {"sx": [sx[0], sx[3], sx[1], sx[2]], "src": node.input[0], "sy": sy, "nhwc": True})
    kept = [p for i, p in enumerate(perm) if i not in axes]
    sy = g.shape(node.output[0])
    if sorted(perm[a] for a in axes) != [2, 3] or kept != sorted(kept) or sy is None:
        return None
    return Match([node], {"sx": g.shape(tr.input[0]), "src": tr.input[0], "sy": sy})


ELEMENTWISE = ("Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Elu", "Mul", "Add",
               "Sub", "Div", "Max", "Min", "QuantizeLinear", "DequantizeLinear", "Identity")


def _nhwc_image(g, t: str, depth: int = 40) -> bool:
    """``t`` comes from an NCHW -> NHWC Transpose through element-wise ops of its shape (followed
    along their non-constant operands of that shape: ``x * HardSigmoid(x)`` reads x twice)."""
    shape, todo, seen = g.shape(t), [(t, 0)], set()
    while todo:
        t, d = todo.pop()
        p = g.producer.get(t)
        if p is None or d > depth or t in seen:
            continue
        seen.add(t)
        if p.op_type == "Transpose":
            if [int(v) for v in (attr(p, "perm") or [])] == [0, 2, 3, 1]:
                return True
            continue
        if p.op_type in ELEMENTWISE:
            n_data = len(p.input) if p.op_type in ("Mul", "Add", "Sub", "Div", "Max", "Min") else 1
            todo += [(i, d + 1) for i in p.input[:n_data] if i and not g.is_const(i) and g.shape(i) == shape]
    return False


def _activation_dq(g, dq) -> bool:
    """``dq`` dequantizes activations per tensor with constant parameters."""
    if dq is None or dq.op_type != "DequantizeLinear" or g.is_const(dq.input[0]) or g.const(inp(dq, 1)) is None:
        return False
    return g.const(inp(dq, 1)).size == 1 and (not inp(dq, 2) or g.const(inp(dq, 2)) is not None)


def _identity_pair(g, node, dq, t: str, shape) -> str:
    """``DQ(Q(t))`` with ``dq``'s scale and zero point (``t`` moves that DQ's values: exact)."""
    params = list(dq.input[1:])
    codes, back = g.fresh(f"{t}_QuantizeLinear"), g.fresh(f"{t}_DequantizeLinear")
    g.make("QuantizeLinear", [t] + params, [codes], near=node, origin=[dq.name],
           name=g.fresh_node_name(f"{node.name}/moved_QuantizeLinear"))
    g.set_shape(codes, shape, g.dtype(dq.input[0]))
    g.make("DequantizeLinear", [codes] + params, [back], near=node, origin=[dq.name],
           name=g.fresh_node_name(f"{node.name}/moved_DequantizeLinear"))
    g.set_shape(back, shape, g.dtype(t))
    return back


def _through_identity_pair(g, p):
    """The node before ``Q -> DQ`` when ``p`` is that pair's DQ with the Q's scale and zero point
    (else ``p``)."""
    if p is None or p.op_type != "DequantizeLinear":
        return p
    q = g.producer.get(p.input[0])
    if q is None or q.op_type != "QuantizeLinear" or len(g.users(q.output[0])) != 1 or \
            not same_param(g, inp(q, 1), inp(p, 1)) or not same_param(g, inp(q, 2), inp(p, 2)) or \
            attr(q, "axis", 1) != attr(p, "axis", 1):
        return p
    return g.producer.get(q.input[0])


MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _quantize_reader(g, node):
    """The QuantizeLinear that alone reads the mean, per tensor, directly or through a chain of data
    moves each alone reading the last (tf2onnx's keepdims mean ``[N, 1, 1, C]`` Transposed to NCHW
    for the squeeze-excite convs: ``Q(move(y)) == move(Q(y))``); else None."""
    q, t = None, node.output[0]
    for _ in range(4):
        q = g.only_consumer(t)
        if q is None or q.op_type not in MOVES or q.domain not in ("", "ai.onnx") or t in g.outputs:
            break
        t = q.output[0]
    if q is None or q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx"):
        return None
    sc = g.const(inp(q, 1))
    return q if sc is not None and sc.size == 1 else None


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    n, c = m.data["sx"][:2]
    keep = attr(node, "keepdims", 1)
    src = m.data["src"]
    g.remove(node)
    if m.data.get("tokens"):
        n_, c_, t_ = m.data["sx"][:3]
        src = reshape(g, src, [n_, t_, 1, c_], near=node, origin=m.origin, tag="tokens_nhwc")
    if m.data.get("nhwc") or m.data.get("tokens"):
        dq = g.producer.get(m.data["src"])
        t = g.fresh(f"{src}/nchw")
        g.make("Transpose", [src], [t], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/to_nchw"),
               perm=[0, 3, 1, 2])
        g.set_shape(t, m.data["sx"], g.dtype(src))
        src = t
        if _activation_dq(g, dq):   # the moved codes' own Q -> DQ (an identity): DQ -> GAP -> Q, an int8 pool
            src = _identity_pair(g, node, dq, src, m.data["sx"])
    q, pool = _quantize_reader(g, node), POOL[node.op_type]
    if keep and src == node.input[0] and (q is None or q.input[0] == node.output[0]):
        g.make(pool, [src], [node.output[0]], near=node,
               origin=m.origin, name=node.name)
    else:
        mid = g.fresh(f"{node.output[0]}/gap")
        g.make(pool, [src], [mid], near=node, origin=m.origin,
               name=node.name)
        g.set_shape(mid, [n, c, 1, 1], g.dtype(src))
        if q is not None:   # the pool's own Q -> DQ (the reader's scale and zero point)
            codes, back = g.fresh(f"{mid}_QuantizeLinear"), g.fresh(f"{mid}_DequantizeLinear")
            params = list(q.input[1:])
            g.make("QuantizeLinear", [mid] + params, [codes], near=node, origin=m.origin,
                   name=g.fresh_node_name(f"{node.name}/gap_QuantizeLinear"))
            g.set_shape(codes, [n, c, 1, 1], g.dtype(q.output[0]))
            g.make("DequantizeLinear", [codes] + params, [back], near=node, origin=m.origin,
                   name=g.fresh_node_name(f"{node.name}/gap_DequantizeLinear"))
            g.set_shape(back, [n, c, 1, 1], g.dtype(src))
            mid = back
        out = [n, c] if not keep else list(m.data.get("sy") or [n, c, 1, 1])   # keepdims (through a Transpose)
        reshape(g, mid, out, near=node, origin=m.origin, out=node.output[0], tag="squeeze")
    if m.data.get("tokens"):
        return "ReduceMean(axis 1 of [N, T, C]) -> Reshape [N, T, 1, C], Transpose, GlobalAveragePool, Reshape"
    if m.data.get("nhwc"):
        return "ReduceMean(axes 1,2) -> Transpose to NCHW, GlobalAveragePool, Reshape"
    return f"{node.op_type}(axes 2,3) -> {pool}" + ("" if keep else " + Reshape")
