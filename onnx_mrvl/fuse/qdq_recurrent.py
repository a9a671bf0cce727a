"""A QDQ LSTM / GRU / RNN as an **int8 recurrent layer** (``precision="int8_in"``, docs/fusion.md
"int8 recurrent layers"; attributes and reference body in ``opset_recurrent_int8.py``):

    DQ(x_q) -> LSTM | GRU | RNN (DQ(W_q), DQ(R_q) [, B or DQ(B_q)] ...) -> Y (float)

X is quantized with its DequantizeLinear's scale and zero point (the layer quantizes its float
input, QuantizeLinear's semantics; the Q -> DQ pair in front is absorbed when it feeds this layer
alone), W and R keep their int8 codes with one scale and zero point per (direction, gate row): a
scalar, one per direction (axis 0) or one per gate row (axis 1; or ``Reshape(DQ([D*G*H, K] codes, axis 0),
[D, G*H, K])`` for a bidirectional layer's per-row scales); uint8 codes ``q`` become the int8
codes ``q - 128`` with zero point ``z - 128`` (the same ``q - z``, exactly; onnxruntime's quantizer
writes uint8 W / R with U8 activations). A dequantized bias or initial state
(onnxruntime's quantizer writes DQ(int8) for them too) is the fp32 value DequantizeLinear computes.
Checks are the float pattern's (``recurrent.build`` on the dequantized weights). Y stays float: a
Q -> DQ pair after it is a Requantize layer or the next int8 layer's input, as for any fp16 output.

``build`` returns None when X or W / R has no DequantizeLinear (the fp16 layer, as before), or the
reason it is not int8 (the fp16 layer on the dequantized weights then takes it). A Q -> DQ pair
that alone reads Y (onnxruntime's quantizer writes one when the recurrent op is quantized) is
absorbed when Y_h / Y_c are not read: the layer (``precision="int8"``) writes Y's codes, each
quantized from the step's fp32 ``h_t`` as onnxruntime quantizes its fp32 Y; the state stays fp16.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..opset_recurrent import CELLS
from ..opset_recurrent_int8 import INT8, PRECISION
from ..target import Target
from .groups import Group
from .qconst import dequantized_const
from .qdq import Dequantized, activation_dq, output_pair, pair_in, qparams
from .recurrent import PATTERN_ANCHORS, RecurrentGroup, build as build_recurrent

ANCHORS = PATTERN_ANCHORS
NOTE = ("int8 recurrent layer (X quantized at scale {s:g}, int8 W and R: int8 x int8 input projection, "
        "fp16 state times the int8 R codes, fp32 gates, fp16 Y)")
NOTE_OUT = ("int8 recurrent layer (X quantized at scale {s:g}, int8 W and R: int8 x int8 input projection, "
            "fp16 state times the int8 R codes, fp32 gates; Y written as int8 codes at scale {so:g}, "
            "quantized from the fp32 state)")


def _codes(g: GraphIndex, dq: onnx.NodeProto, dirs: int, rows: int) -> Union[Tuple, str]:
    """(int8 codes [D, rows, K], scales [D*rows] float32, zero points [D*rows] int32) of a
    DQ(constant) weight, or the reason it cannot be the layer's int8 weight. The codes are
    ``[D, rows, K]``, or ``[D*rows, K]`` quantized per row (axis 0) and reshaped after the DQ (per-gate-
    row scales of a bidirectional layer: no one DequantizeLinear of a 3-D tensor writes them)."""
    q = np.asarray(g.const(dq.input[0]))
    merged = q.ndim == 2 and q.shape[0] == dirs * rows
    if q.dtype not in (np.int8, np.uint8) or not (merged or (q.ndim == 3 and q.shape[:2] == (dirs, rows))):
        return f"weights '{dq.output[0]}' are {q.dtype} {list(q.shape)}, not int8 [{dirs}, {rows}, K]"
    s = np.asarray(g.const(dq.input[1]), np.float32).reshape(-1)
    z = np.asarray(g.const(dq.input[2])).astype(np.int32).reshape(-1) if len(dq.input) > 2 and dq.input[2] \
        else np.zeros(1, np.int32)
    axis = int(attr(dq, "axis", 1)) % q.ndim
    q = q.reshape(dirs, rows, -1)

    def per_row(v):
        if v.size == 1:
            return np.full(dirs * rows, v[0], v.dtype)
        if merged and axis == 0 and v.size == dirs * rows:
            return v
        if not merged and axis == 0 and v.size == dirs:
            return np.repeat(v, rows)
        if not merged and axis == 1 and v.size == rows:
            return np.tile(v, dirs)
        return None
    s, z = per_row(s), per_row(z)
    if s is None or z is None:
        return f"weights '{dq.output[0]}' are quantized along axis {axis}, not per direction or per gate row"
    if not (np.isfinite(s).all() and np.all(s > 0)):
        return f"weights '{dq.output[0]}' have scales that are not positive and finite"
    if q.dtype == np.uint8:   # int8 codes q - 128 with zero point z - 128: the same q - z, exactly
        return (q.astype(np.int32) - 128).astype(np.int8), s, z - 128
    return q, s, z


def _dq_const(g: GraphIndex, t: str) -> Optional[onnx.NodeProto]:
    dq = g.producer.get(t) if t else None
    if dq is None or dq.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq.input if i):
        return None
    return dq


def _weight_nodes(g: GraphIndex, t: str):
    """(the DequantizeLinear of constants, the constant-shape Reshape after it or None) writing ``t``, or None."""
    p = g.producer.get(t) if t else None
    if p is not None and p.op_type == "Reshape" and g.is_const(p.input[1]) and \
            len(g.consumers.get(p.input[0], [])) == 1:
        dq = _dq_const(g, p.input[0])
        return (dq, p) if dq is not None else None
    dq = _dq_const(g, t)
    return (dq, None) if dq is not None else None


def _dequantized(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed):
    """(the float recurrent group on the dequantized weights, the weight DQs it absorbs) or a reason."""
    consts, absorbed = {}, []
    for k, t in enumerate(n.input[1:], 1):
        found = _weight_nodes(g, t)
        if found is None:
            continue
        dq, move = found
        c = dequantized_const(g, dq)   # fp32 as onnxruntime's DequantizeLinear computes it
        if c is None or dq.name in claimed or (move is not None and move.name in claimed):
            return f"input {k} '{t}' is a DequantizeLinear the recurrent layer cannot read"
        if move is not None:
            shape = [int(v) for v in np.asarray(g.const(move.input[1])).reshape(-1)]
            if 0 in shape or int(np.prod([v for v in shape if v != -1])) == 0:
                return f"input {k} '{t}' is a Reshape of a DequantizeLinear to shape {shape}"
            c = c.reshape(shape)
        consts[t] = c
        if len(g.consumers.get(t, [])) == 1:
            absorbed += [dq] + ([move] if move is not None else [])
    grp = build_recurrent(Dequantized(g, consts), n, target)
    return (grp, absorbed) if isinstance(grp, RecurrentGroup) else grp


def build_dequantized(g: GraphIndex, n: onnx.NodeProto, target: Target, why: str, claimed=frozenset()):
    """The fp16 recurrent layer on the dequantized W / R of a QDQ recurrent node that cannot be int8
    (``why``), or None."""
    if _weight_nodes(g, n.input[1]) is None and _weight_nodes(g, n.input[2]) is None:
        return None
    found = _dequantized(g, n, target, claimed)
    if isinstance(found, str):
        return None
    grp, absorbed = found
    grp.nodes = grp.nodes + absorbed
    grp.note = f"fp16 layer with dequantized weights (not int8: {why})"
    return grp


def build(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    """The int8 recurrent group anchored at ``n``, None (no QDQ recurrent layer) or a reason."""
    dq_x = activation_dq(g, n.input[0])
    src_w, src_r = _weight_nodes(g, n.input[1]), _weight_nodes(g, n.input[2])
    if src_w is None or src_r is None:
        return None
    dq_w, dq_r = src_w[0], src_r[0]
    if dq_x is None:
        return f"input X '{n.input[0]}' is not dequantized (no DequantizeLinear in front: no input scale)"
    qin = qparams(g, dq_x)
    if isinstance(qin, str):
        return qin
    if g.opset < 13:
        return "an int8 recurrent layer needs opset >= 13 (its reference body)"
    found = _dequantized(g, n, target, claimed)
    if isinstance(found, str):
        return found
    grp, absorbed = found
    _, dirs, _, hid = grp.dims
    rows = CELLS[n.op_type][0] * hid
    w, r = _codes(g, dq_w, dirs, rows), _codes(g, dq_r, dirs, rows)
    for v in (w, r):
        if isinstance(v, str):
            return v
    x, in_front = pair_in(g, n, 0, qin, claimed)
    grp.inputs[0] = x
    grp.nodes = grp.nodes + in_front + absorbed
    grp.weights.update(W=w[0], R=r[0])
    grp.attrs.update(precision=PRECISION, in_scale=qin[0], in_zero_point=qin[1], in_type=qin[2],
                     kernel_scales=[float(v) for v in w[1]], kernel_zero_points=[int(v) for v in w[2]],
                     recurrence_scales=[float(v) for v in r[1]], recurrence_zero_points=[int(v) for v in r[2]])
    grp.note = NOTE.format(s=qin[0])
    out = output_pair(g, n.output[0], claimed) if n.output[0] and grp.y_read and not (grp.y_h or grp.y_c) \
        and not grp.y_shape else None
    if isinstance(out, tuple):   # Y -> Q -> DQ: the layer writes Y's codes (quantized from the fp32 h_t)
        q_out, dq_out, qout = out
        grp.nodes += [q_out, dq_out]
        grp.output = dq_out.output[0]
        grp.attrs.update(precision=INT8, out_scale=qout[0], out_zero_point=qout[1], out_type=qout[2])
        grp.note = NOTE_OUT.format(s=qin[0], so=qout[0])
    return grp


FLOAT_IN_QDQ = ("fp16 layer of a QDQ model's float {op} (its weights are not quantized: onnxruntime runs it in "
                "fp32 between DequantizeLinear and QuantizeLinear); W, R, x and each step's state are fp16 here, "
                "so the codes after it agree with onnxruntime's on about 90-99% of the elements, less for stacked "
                "layers and long sequences (docs/quantize.md, 'Float recurrent layers in QDQ models')")


def float_in_qdq_note(g: GraphIndex, grp: Group) -> str:
    """The note of an fp16 recurrent layer on float weights in a model with QuantizeLinear nodes ("" otherwise)."""
    if grp.op not in CELLS or grp.attrs.get("precision") or grp.note:
        return ""
    has_q = g.__dict__.get("_has_quantize")
    if has_q is None:
        has_q = g.__dict__["_has_quantize"] = any(n.op_type == "QuantizeLinear" for n in g.nodes)
    return FLOAT_IN_QDQ.format(op=grp.op) if has_q else ""
