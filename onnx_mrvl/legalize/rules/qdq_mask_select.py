"""``Q_o(Where(cond, F, DQ_x(q)))`` (or ``Where(cond, DQ_x(q), F)``) whose Q_o rounds every value
``DQ_x`` can give to its zero point -> ``Q_o(Where(Expand(cond), F, 0))``: the codes onnxruntime
computes, without the scores (docs/legalize.md rule 1e-m).

A QDQ model's ``masked_fill(~mask, float32 lowest)`` of the attention scores (DeBERTa-v2's
XSoftmax) calibrated with padding gets a Q of scale lowest / 255 (~1.3e36): onnxruntime's float
Where then QuantizeLinear gives every kept score the zero point (|v| / 1.3e36 rounds to 0) and every
masked one the fill's code, so the codes are a function of the mask alone (the attention is a
uniform average over the kept keys whatever the input: the remedy is the quantizer's, the Where and
the Softmax in ``nodes_to_exclude``). Written as the mask's select of the two codes, the Where (on
the CPU: a boolean condition) reads only the mask, no longer the region's scores, so it stops
cutting the attention block; the dead score path goes. Exact: checked with onnxruntime's
QuantizeLinear arithmetic (``rne(v / s) + z``, saturated; also as ``v * (1 / s)``) on the two
extreme values of DQ_x (the rounding is monotonic) and on 0.

Checks: a run-time condition, a constant scalar fill, the other branch a DequantizeLinear of one
constant scale and zero point, the Where read by one QuantizeLinear of one constant scale and zero
point (not a graph output), a static output shape."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, shape_const

NAME = "qdq_mask_select"
OPS = ("Where",)
RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def _scalar_params(g, node):
    """(scale, zero point) of a Q / DQ of one constant scale and zero point, else None."""
    ins = [t for t in node.input[1:3] if t]
    if len(ins) != 2 or not all(g.is_const(t) and np.asarray(g.const(t)).size == 1 for t in ins):
        return None
    s, z = (np.asarray(g.const(t)) for t in ins)
    if z.dtype not in RANGES or s.dtype != np.float32:
        return None
    return np.float32(s.reshape(-1)[0]), z.reshape(-1)[0]


def _quantize(v: np.float32, s: np.float32, z, how: str) -> int:
    lo, hi = RANGES[np.asarray(z).dtype]
    with np.errstate(all="ignore"):
        r = np.float32(v / s) if how == "div" else np.float32(v * np.float32(np.float32(1) / s))
    if not np.isfinite(r):
        return lo if r < 0 else hi
    return int(np.clip(np.rint(r) + int(z), lo, hi))


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or len(node.input) != 3 or g.is_const(node.input[0]):
        return None
    a, b = node.input[1:]
    if g.is_const(a) == g.is_const(b):
        return None
    k = 1 if g.is_const(a) else 2                 # the fill's input index
    dq = g.producer.get(node.input[3 - k])
    users = g.users(node.output[0])
    if dq is None or dq.op_type != "DequantizeLinear" or len(users) != 1 or users[0].op_type != "QuantizeLinear":
        return None
    return Match([node], {"k": k, "dq": dq, "q": users[0]})


def check(m: Match, g, target) -> Optional[str]:
    node, k, dq, q = m.node, m.data["k"], m.data["dq"], m.data["q"]
    fill = np.asarray(g.const(node.input[k]))
    if fill.size != 1 or fill.dtype != np.float32:
        return "the fill is not a float32 scalar"
    px, po = _scalar_params(g, dq), _scalar_params(g, q)
    if px is None or po is None:
        return "the scores' DequantizeLinear or the QuantizeLinear has no single constant scale and zero point"
    if node.output[0] in g.outputs:
        return "the Where's result is a graph output"
    shape = g.shape(node.output[0])
    if shape is None:
        return "the Where's output shape is not static"
    lo, hi = RANGES[np.asarray(px[1]).dtype]
    values = [np.float32(np.float32(c - int(px[1])) * px[0]) for c in (lo, hi)] + [np.float32(0)]
    codes = {_quantize(v, *po, how) for v in values for how in ("div", "mul")}
    if codes != {int(po[1])}:
        return (f"the QuantizeLinear (scale {float(po[0]):.4g}) gives the scores codes {sorted(codes)}, not only its "
                f"zero point (the scores matter)")
    return None


def rewrite(m: Match, g) -> str:
    node, k = m.node, m.data["k"]
    shape = list(g.shape(node.output[0]))
    zero = g.add_const(f"{node.name}/zero", np.zeros((), np.float32))
    branches = [node.input[k], zero] if k == 1 else [zero, node.input[k]]
    cond = node.input[0]
    g.remove(node)
    if g.shape(cond) is None or list(g.shape(cond)) != shape:
        # the boolean condition widened on the CPU: the select's result is then the region's input as
        # the int8 layer reading it takes it (quantized on the host), not a float copy widened in fp16
        wide = g.fresh(f"{cond}/wide")
        g.make("Expand", [cond, shape_const(g, node, shape)], [wide], near=node, origin=m.origin,
               name=f"{node.name}/wide")
        g.set_shape(wide, shape, g.dtype(cond))
        cond = wide
    g.make("Where", [cond] + branches, [node.output[0]], near=node, origin=m.origin, name=node.name)
    g.set_shape(node.output[0], shape, g.dtype(zero))
    return ("a masked fill whose QuantizeLinear rounds every score to its zero point -> the mask's select of the "
            "two codes (exact; onnxruntime's attention here is uniform over the kept keys: quantize again with "
            "the Where and the Softmax in nodes_to_exclude)")
