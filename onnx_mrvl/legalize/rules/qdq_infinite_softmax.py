"""``Q_p(Softmax(DQ(q, s = inf)))`` -> ``Q_p(Mul(x, 0))``: the attention probabilities of a QDQ
model whose masked scores onnxruntime's calibrator gave an infinite scale, as onnxruntime computes
them (docs/legalize.md rule 1e''''').

quantize_static on a TorchScript export's ``Where(pad, -inf, 0)`` mask gives the mask's and the
masked scores' Q / DQ an infinite scale. Every element of ``DQ(q, inf, z) = (q - z) * inf`` is NaN
(``q = z``) or +-inf. Where onnxruntime runs the Softmax as its float op (S8 activations), every
row is NaN (the max is +-inf or NaN and ``x - max`` is NaN), and its QuantizeLinear of NaN is the
type's lowest code (MLAS clamps with ``max(x, lo)``: NaN gives ``lo``, as sim/int8.py's
``quantize``). Where it fuses ``DQ -> Softmax -> Q`` into its QLinearSoftmax (U8 activations), the
table of the infinite scale is 0 below its last entry and NaN at it, every row's sum NaN and every
code the build's cast of NaN (``ort_probe`` asks onnxruntime: 0 on x86-64; on uint8 codes where
its S8 -> U8 rewrite turned an int8 model's pairs, ``ort_plan.ort_u8_softmaxes``). When that code is
the Q's zero point (onnxruntime's quantizer: the probabilities' range starts at 0) the probabilities
are exactly 0 whatever the input: the same codes as ``Q_p`` of ``x * 0``, ``x`` a finite tensor of
the Softmax's shape the graph already computes (the dequantized scores next to the mask); another
code ``c`` is ``Q_p(x * 0 + v)``, v its value (checked to round back to ``c`` in fp32 and fp16). The mask
path and the Softmax then have no reader left and go; the block stays in one region with
onnxruntime's numbers (which hold no attention: it was destroyed by the calibration; the remedy is
``nodes_to_exclude``, which the decision of the Q names).

Checks: every scale of the DQ infinite, onnxruntime writes one code (float Softmax per
``ort_plan``, else its QLinearSoftmax, probed), one QuantizeLinear alone reads the Softmax, a static
shape, a finite dequantized tensor of the same shape feeding the op that wrote the DQ's Q input.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ... import ort_plan, ort_probe
from .base import Match

NAME = "qdq_infinite_softmax"
OPS = ("Softmax",)
REPORT_SKIPS = "infinite-scale Softmax"
LOWEST = {np.dtype(np.int8): -128, np.dtype(np.uint8): 0}
QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or not node.input:
        return None
    dq = g.producer.get(node.input[0])
    if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 2 or not g.is_const(dq.input[1]):
        return None
    s = np.asarray(g.const(dq.input[1]), np.float64)
    if s.size == 0 or not np.all(np.isposinf(s)):
        return None
    return Match([node], {"dq": dq})


def _finite_source(g, dq, shape) -> Optional[str]:
    """A float tensor of ``shape`` that the op writing the DQ's quantized input reads from a
    DequantizeLinear of finite scales (the scores next to the mask), or None."""
    q = g.producer.get(dq.input[0])
    if q is None or q.op_type != "QuantizeLinear":
        return None
    op = g.producer.get(q.input[0])
    for t in (op.input if op is not None else []):
        src = g.producer.get(t)
        if src is None or src.op_type != "DequantizeLinear" or len(src.input) < 2 or not g.is_const(src.input[1]):
            continue
        if np.all(np.isfinite(np.asarray(g.const(src.input[1]), np.float64))) and g.shape(t) == shape:
            return t
    return None


def _qparam(g, node, i, default):
    """Input ``i`` of a Q / DQ as a one-element constant (the zero point's default: uint8 0), or None."""
    if len(node.input) <= i or not node.input[i]:
        return default
    v = g.const(node.input[i])
    return None if v is None or np.asarray(v).size != 1 else np.asarray(v).reshape(-1)[0]


def _written_code(m: Match, g, qp, shape) -> tuple:
    """(the one code onnxruntime writes for the probabilities, or None; why not): its float
    Softmax of NaN rows quantized (MLAS: the type's lowest), or its QLinearSoftmax of the NaN
    table, asked of onnxruntime (``ort_probe``: a cast of NaN, the build's)."""
    zp = _qparam(g, qp, 2, np.uint8(0))
    if zp is None or np.asarray(zp).dtype not in LOWEST:
        return None, "the probabilities' zero point is no uint8 / int8 constant"
    if m.node.name in ort_plan.ort_float_nodes(g.model, "Softmax"):
        return LOWEST[np.asarray(zp).dtype], "Q(NaN), the type's lowest code"
    dq = m.data["dq"]
    xs, xz, ys = _qparam(g, dq, 1, None), _qparam(g, dq, 2, np.uint8(0)), _qparam(g, qp, 1, None)
    if xs is None or xz is None or ys is None or np.asarray(xz).dtype != np.asarray(zp).dtype:
        return None, "onnxruntime's QLinearSoftmax: per-tensor scales and one code type in and out needed"
    axis = int(next((a.i for a in m.node.attribute if a.name == "axis"), 1 if g.opset < 13 else -1))
    # on uint8 codes where onnxruntime's S8 -> U8 rewrite turned an int8 model's pairs (zero points + 128)
    shift = 128 if np.asarray(zp).dtype == np.int8 and m.node.name in ort_plan.ort_u8_softmaxes(g.model) else 0
    dt = np.dtype(np.uint8) if shift else np.asarray(zp).dtype
    codes = ort_probe.qlinear_softmax_codes(float(xs), int(xz) + shift, float(ys), int(zp) + shift, dt,
                                            shape, axis, g.opset)
    if codes is None or len(codes) != 1:
        return None, f"onnxruntime's QLinearSoftmax of the infinite scale writes codes {codes} (probed), not one code"
    return int(codes[0]) - shift, f"onnxruntime's {dt.name} QLinearSoftmax of a NaN table (probed)"


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    users = g.users(node.output[0])
    if len(users) != 1 or users[0].op_type != "QuantizeLinear" or node.output[0] in g.outputs:
        return "the Softmax is read by other nodes than one QuantizeLinear"
    qp = users[0]
    shape = g.shape(node.input[0])
    if shape is None or any(not isinstance(d, (int, np.integer)) or d < 1 for d in shape):
        return "the Softmax's input shape is not static"
    code, how = _written_code(m, g, qp, shape)
    if code is None:
        return how
    zp, sp = int(_qparam(g, qp, 2, np.uint8(0))), _qparam(g, qp, 1, None)
    if sp is None or not np.isfinite(sp) or sp <= 0:
        return "the probabilities' scale is no positive finite constant"
    value = np.float32((code - zp) * np.float32(sp))   # the value Q_p writes as `code` (0 at the zero point)
    lo, hi = QRANGE[np.asarray(_qparam(g, qp, 2, np.uint8(0))).dtype]
    for v in (np.float32(value), np.float32(np.float16(value))):   # fp32, and fp16 in a region
        if int(np.clip(np.rint(v / np.float32(sp)) + zp, lo, hi)) != code:
            return f"onnxruntime writes code {code} ({how}), which Q_p of {float(value)} does not give in fp16"
    src = _finite_source(g, m.data["dq"], shape)
    if src is None:
        return "no finite dequantized tensor of the Softmax's shape next to the mask to take the zeros from"
    m.data.update(qp=qp, src=src, how=how, value=value, code=code)
    return None


def rewrite(m: Match, g) -> str:
    node, qp = m.node, m.data["qp"]
    zero = g.add_const(f"{node.name}/zero", np.zeros((), np.float32))
    out = g.fresh(f"{node.output[0]}/zeros")
    g.make("Mul", [m.data["src"], zero], [out], near=node, origin=[node.name], name=f"{node.name}/zeros")
    g.set_shape(out, g.shape(node.input[0]))
    what = "the zero point -> Q(x * 0) (exact; every attention weight is 0"
    if m.data["value"] != 0:   # a code off the zero point: Q(x * 0 + its value)
        value = g.add_const(f"{node.name}/value", np.array(m.data["value"], np.float32))
        filled = g.fresh(f"{node.output[0]}/filled")
        g.make("Add", [out, value], [filled], near=node, origin=[node.name], name=f"{node.name}/filled")
        g.set_shape(filled, g.shape(node.input[0]))
        out = filled
        what = (f"code {m.data['code']} -> Q(x * 0 + {float(m.data['value']):.6g}) (exact; every attention weight is "
                f"{float(m.data['value']):.6g} whatever the input")
    g.set_input(qp, 0, out)
    g.remove(node)
    return (f"Softmax of a DequantizeLinear of infinite scale (NaN / inf everywhere): onnxruntime writes "
            f"{m.data['how']} = {what} in onnxruntime too: quantize again with the mask's Where, Add and this "
            "Softmax in nodes_to_exclude)")
