"""Dynamic-int8 models -> float layers with dequantized weights (onnxruntime's
``quantize_dynamic``; docs/legalize.md "dynamic_int8").

``DynamicQuantizeLinear(x) -> MatMulInteger / ConvInteger(x_q, W_q, x_zp, W_zp) -> Cast(float)
-> Mul(x_scale * W_scale)`` becomes ``MatMul / Conv(x, W)`` with the fp32 constant
``W = (W_q - W_zp) * W_scale`` (per tensor, per column for MatMul, per output channel for Conv); a
following per-channel bias ``Add`` folds into the Conv. com.microsoft ``DynamicQuantizeMatMul`` and
``MatMulIntegerToFloat`` (onnxruntime's optimizer writes them) become ``MatMul`` (+ ``Add`` bias).

Without calibration data the activation scales are only known at run time, which the accelerator's
int8 layers cannot take: the layer runs in fp16 on the dequantized weights (the issue's documented
choice), and its decision says so (``provenance`` note, ``Decisions.annotate``). It then has no
activation-quantization error: it is closer to the fp32 model than onnxruntime's dynamic run.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr, inp, origin_of
from .qtensor import FLOAT, MS, domain

NAME = "dynamic_int8"
OPS = ("MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLinear",
       "QAttention")
REPORT_SKIPS = "dynamic int8"
NOTE = "dynamic int8: {precision} with dequantized weights (no calibration)"
CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def dequantize(q: np.ndarray, zp: Optional[np.ndarray], scale: np.ndarray, axis: int):
    """fp32 ``(q - zp) * scale``, zero point and scale per tensor or along ``axis``; None when
    their sizes fit neither."""
    shape = [1] * q.ndim
    s = np.asarray(scale, np.float32).reshape(-1)
    z = np.zeros(1, np.int32) if zp is None else np.asarray(zp).astype(np.int32).reshape(-1)
    for v in (s, z):
        if v.size not in (1, q.shape[axis]):
            return None
    shape[axis] = -1
    s = s.reshape(shape) if s.size > 1 else s.reshape(())
    z = z.reshape(shape) if z.size > 1 else z.reshape(())
    return ((q.astype(np.int32) - z).astype(np.float32) * s).astype(np.float32)


def _only(g, t: str, op: str):
    u = g.only_consumer(t)
    return u if u is not None and u.op_type == op and domain(u) == "" else None


def match(node, g) -> Optional[Match]:
    key = (domain(node), node.op_type)
    if key in (("", "MatMulInteger"), ("", "ConvInteger")):
        cast = _only(g, node.output[0], "Cast")
        mul = _only(g, cast.output[0], "Mul") if cast is not None else None
        nodes = [node] + [n for n in (cast, mul) if n is not None]
        return Match(nodes, {"kind": "integer", "cast": cast, "mul": mul})
    if key in ((MS, "DynamicQuantizeMatMul"), (MS, "MatMulIntegerToFloat")):
        return Match([node], {"kind": node.op_type})
    if key == (MS, "QAttention") or (key == ("", "DynamicQuantizeLinear") and any(g.users(o) for o in node.output)):
        return Match([node], {"kind": "refuse"})   # never rewritten here: only a reason for its decision
    return None


def _dql(g, node, q_idx: int, zp_idx: int):
    """The DynamicQuantizeLinear writing input ``q_idx`` (and its zero point at ``zp_idx``), or None."""
    p = g.producer.get(inp(node, q_idx))
    if p is None or p.op_type != "DynamicQuantizeLinear" or domain(p) or p.output[0] != inp(node, q_idx):
        return None
    if inp(node, zp_idx) and inp(node, zp_idx) != p.output[2]:
        return None
    return p


def check(m: Match, g, target) -> Optional[str]:
    node, kind = m.node, m.data["kind"]
    if kind == "refuse":
        if node.op_type == "QAttention":
            return f"QAttention '{node.name}' (onnxruntime's fused quantized attention) is not rewritten: quantize " \
                   f"the model before onnxruntime's Attention fusion to get MatMulInteger layers"
        readers = sorted({f"{u.op_type} '{u.name}'" for o in node.output for u in g.users(o)})
        return f"DynamicQuantizeLinear '{node.name}' is read by {', '.join(readers[:4])}, which the dynamic-int8 " \
               f"rewrite did not take (see their reasons)"
    if kind == "integer":
        if m.data["mul"] is None:
            return f"{node.op_type} '{node.name}' is not followed by Cast(float) -> Mul(scale) alone (the " \
                   f"quantize_dynamic form): its int32 result has no known scale"
        cast, mul = m.data["cast"], m.data["mul"]
        if attr(cast, "to") != FLOAT:
            return f"Cast '{cast.name}' after {node.op_type} '{node.name}' is not to float32"
        dql = _dql(g, node, 0, 2)
        if dql is None:
            return f"input A of {node.op_type} '{node.name}' is not a DynamicQuantizeLinear output"
        m.data["dql"] = dql
        other = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
        sm = g.producer.get(other)
        if sm is None or sm.op_type != "Mul" or dql.output[1] not in sm.input:
            return f"Mul '{mul.name}' does not scale by DynamicQuantizeLinear's scale x a constant weight scale"
        c = sm.input[1] if sm.input[0] == dql.output[1] else sm.input[0]
        if not g.is_const(c):
            return f"the weight scale '{c}' of {node.op_type} '{node.name}' is not a constant"
        m.data.update(scale=g.const(c), scale_mul=sm, x=dql.input[0])
        w, wz = inp(node, 1), inp(node, 3)
    elif kind == "DynamicQuantizeMatMul":
        w, wz = inp(node, 1), inp(node, 3)
        if not g.is_const(inp(node, 2)):
            return f"{node.op_type} '{node.name}': the weight scale is not a constant"
        m.data.update(scale=g.const(inp(node, 2)), x=node.input[0])
    else:   # MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp, bias)
        w, wz = inp(node, 1), inp(node, 5)
        dql = _dql(g, node, 0, 4)
        if dql is None or inp(node, 2) != dql.output[1]:
            return f"input A of {node.op_type} '{node.name}' is not a DynamicQuantizeLinear output"
        if not g.is_const(inp(node, 3)):
            return f"{node.op_type} '{node.name}': the weight scale is not a constant"
        m.data.update(scale=g.const(inp(node, 3)), x=dql.input[0], dql=dql)
    if not g.is_const(w) or (wz and not g.is_const(wz)):
        return f"{node.op_type} '{node.name}': the weights or their zero point are not constant"
    q = g.const(w)
    if q.dtype not in (np.int8, np.uint8):
        return f"{node.op_type} '{node.name}': weights of type {q.dtype}"
    if node.op_type != "ConvInteger" and q.ndim != 2:
        return f"{node.op_type} '{node.name}': {q.ndim}-D weights (a 2-D [K, N] is the FC form)"
    axis = 0 if node.op_type == "ConvInteger" else 1
    wf = dequantize(q, g.const(wz) if wz else None, m.data["scale"], axis)
    if wf is None:
        return f"{node.op_type} '{node.name}': weight scale / zero point sizes fit neither one value nor one " \
               f"per {'output channel' if axis == 0 else 'column'}"
    m.data["weight"] = wf
    if kind == "DynamicQuantizeMatMul" and inp(node, 4) and not g.is_const(inp(node, 4)):
        return f"{node.op_type} '{node.name}': the bias is not a constant"
    return None


def rewrite(m: Match, g) -> str:
    node, kind = m.node, m.data["kind"]
    extra = [x for x in (m.data.get("scale_mul"), m.data.get("dql")) if x is not None]
    origin = origin_of(*m.nodes, *extra)
    w = g.add_const(f"{node.name}/weight", m.data["weight"])
    x = m.data["x"]
    if kind == "integer":
        out = m.data["mul"].output[0]
        for n in m.nodes:
            g.remove(n)
    else:
        out = node.output[0]
        g.remove(node)
    bias = inp(node, 4) if kind == "DynamicQuantizeMatMul" else (inp(node, 6) if kind == "MatMulIntegerToFloat" else "")
    if node.op_type == "ConvInteger":
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.name in CONV_ATTRS}
        inputs, folded = [x, w], _conv_bias(g, out, m.data["weight"].shape[0])
        if folded is not None:
            add, b = folded
            inputs.append(g.add_const(f"{node.name}/bias", b))
            origin = origin + [n for n in [add.name] if n not in origin]
            g.remove(add)
            out = add.output[0]
        made = g.make("Conv", inputs, [out], near=node, origin=origin, name=node.name, **attrs)
    else:
        y = g.fresh(f"{out}/matmul") if bias else out
        made = g.make("MatMul", [x, w], [y], near=node, origin=origin, name=node.name)
        if bias:
            if g.shapes.get(out) is not None:
                g.set_shape(y, g.shapes[out], FLOAT)
            add = g.make("Add", [y, bias], [out], near=node, origin=origin, name=f"{node.name}/bias")
    g.notes.update({o: NOTE for o in origin})
    return f"{node.op_type} -> {made.op_type} with dequantized fp32 weights"


def _conv_bias(g, y: str, channels: int):
    """(the Add, its per-channel bias [O]) when ``y`` is read by one Add of a constant of shape
    [1, O, 1, 1] / [O, 1, 1] (quantize_dynamic's reshaped conv bias), else None."""
    add = g.only_consumer(y)
    if add is None or add.op_type != "Add" or domain(add) or len(add.input) != 2:
        return None
    c = add.input[1] if add.input[0] == y else add.input[0]
    v = g.const(c)
    if v is None or v.size != channels or v.dtype != np.float32:
        return None
    shape = [d for d in v.shape]
    if shape not in ([1, channels, 1, 1], [channels, 1, 1]):
        return None
    return add, v.reshape(-1).astype(np.float32)


__all__ = ["NAME", "OPS", "match", "check", "rewrite", "dequantize", "NOTE"]
