"""A QDQ Conv / Gemm / MatMul whose inputs are quantized but whose output is not (NVIDIA ModelOpt,
pytorch-quantization, TensorRT's "inputs only" placement: the conv before a residual Add, a conv
followed by a float BN / activation, the last FC) as an **int8-in / fp16-out layer**
(``precision="int8_in"``, docs/fusion.md "int8"):

    DQ(x_q) -> Conv/Gemm/MatMul(DQ(W_q int8, s_w, z 0) [, B]) [-> Add(c)] [-> activation] -> y (float)

The layer quantizes its float input with the DQ's scale and zero point (QuantizeLinear's
semantics), the MAC array sums ``(q_x - z_x) * q_w`` exactly in int32, and the epilogue computes
``y = fp32(acc) * fp32(s_x * s_w[o]) + b[o]`` in fp32 (``b``: the bias onnxruntime adds, the
dequantized int32 bias or an fp32 one, plus a folded bias Add), applies the activation in float
and stores fp16. onnxruntime computes the same layer as an fp32 Conv / Gemm on the dequantized
values, whose sum is the exact integer sum up to fp32 rounding: the two agree to the fp16 storage
of the output (docs/simulator.md "int8-in layers" has the bound).

Not taken (``None``: the fp16 fallback on dequantized weights, ``qdq_fallback.py``, runs as before):
an output pair (``_int8_output``: an int8 layer or its reason, the layer on the CPU as before) unless
float ops the int8 layer cannot fold come first (a float bias Add, a BN, an activation other than
Relu / Clip: NNCF's ``DQ -> MatMul -> Add(float bias) -> Q -> DQ``) and the pair's DQ is not a model
output: then the int8-in layer with that pair in its epilogue (below), which is onnxruntime's float
computation of the group;
activations of another width
(int16), weights that are not int8 with zero point 0 per tensor / per output channel. A
BatchNormalization or Mul after the layer that the float chain folds (a per-channel factor ``f`` on
the weights, ``b * f + shift`` on the bias) leaves the int8 codes as they are: ``f`` goes into the
layer's ``weight_scales`` (its dequantization multiplier ``s_w * f``, of either sign).

A Q -> DQ pair that alone reads the end of the float chain (NNCF placement: ``DQ -> Conv -> BN ->
HardSwish -> Q -> DQ -> next Conv``, the Q being the next layer's input quantizer) is applied in the
epilogue too: the layer quantizes and dequantizes its fp32 activation output (``outq_scale`` /
``_zero_point`` / ``_type``), as onnxruntime's QuantizeLinear does on its fp32 value, before the fp16
storage, which holds ``(q - z) * s`` closely enough that the pair's quantizer (the next layer's, which
still absorbs it, or a Requantize) gets ``q`` back exactly (|q - z| <= 255, fp16 keeps 11 bits:
relative error <= 2^-12, under half a code). Scalar Mul / Add / Sub / Div between the activation and
that Q (PP-LCNetV3's learnable affine block, ``_post_affine``) go into the epilogue too
(``post_ops`` / ``post_values``, each in fp32 in the model's order); a per-channel ``Q(axis=1) -> DQ(1)``
(legalize ``qdq_channel_input``) is the layer's own, a per-channel division (``qdq_channel_out.py``). Without it the
next layer quantized the fp16-rounded activation and codes at a rounding tie flipped (0.2% of the
codes, each flip a full code: up to 2% of the range after one 1x1 conv on the trained PP-OCR cls).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..ort_plan import ort_u8s8_sums
from ..provenance import get_origin
from ..target import Target
from .batch_matmul import build as build_matmul
from .groups import Group
from .patterns import build_conv, build_fc
from .qconst import dequantized_const
from .qdq_channel_out import channel_pair
from .int8_accumulator import accumulator_reason
from .qdq import Dequantized, activation_dq, kernel_oi, layer_weight, output_pair, pair_in, qparams

PRECISION = "int8_in"
NOTE = ("int8 in, fp16 out (output '{out}' is not quantized: the layer quantizes its input and multiplies "
        "int8 x int8, its fp32 result stored fp16)")
QUANTIZED = "; the Q -> DQ after it applied to its fp32 result in its epilogue (codes exact in fp16)"


def _int8_output(g: GraphIndex, t: str) -> bool:
    """``t`` is the layer's output pair: one QuantizeLinear alone reads it, directly or through a
    Relu / Clip (an int8 layer, or qdq.build's reason: it stays on the CPU, exactly as onnxruntime
    runs it), or through another one-input activation whose Q -> DQ is not the input quantization
    of weighted layers (a QDQ layer with an activation the int8 layer cannot fold: as before). An
    output with other readers, or an activation (LeakyRelu, Sigmoid, ...) whose Q -> DQ only the
    next Conv / Gemm / MatMul on DQ weights reads (inputs-only placement: the Q is that layer's input
    quantizer), is float in onnxruntime too: the int8-in layer takes it (and the activation)."""
    users = g.consumers.get(t, [])
    if len(users) != 1 or t in g.output_set:
        return False
    u = users[0]
    if u.op_type == "QuantizeLinear":
        return True
    if len([i for i in u.input if i and not g.is_const(i)]) != 1 or len(u.output) != 1:
        return False
    after = g.consumers.get(u.output[0], [])
    if len(after) != 1 or after[0].op_type != "QuantizeLinear" or u.output[0] in g.output_set:
        return False
    return u.op_type in ("Relu", "Clip") or not _next_layer_input(g, after[0])


def _next_layer_input(g: GraphIndex, q: onnx.NodeProto) -> bool:
    """The Q -> DQ of ``q`` is read only as the data input of Conv / Gemm / MatMul on DQ weights."""
    dqs = g.consumers.get(q.output[0], [])
    if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or dqs[0].output[0] in g.output_set:
        return False
    readers = g.consumers.get(dqs[0].output[0], [])
    return bool(readers) and all(
        r.op_type in ("Conv", "Gemm", "MatMul") and r.input[0] == dqs[0].output[0] and len(r.input) > 1 and
        getattr(g.producer.get(r.input[1]), "op_type", "") == "DequantizeLinear" for r in readers)


def _folded_factor(w: np.ndarray, folded: np.ndarray) -> Optional[np.ndarray]:
    """The per-output-channel factor the float chain folded into the weights (a BatchNormalization
    or Mul after the layer: ``folded[o] = fp32(w[o] * f[o])``), ones when none, or None when the
    weights are not ``w`` times a non-zero factor per channel (the int8 codes would change)."""
    if np.array_equal(w, folded):
        return np.ones(w.shape[0], np.float32)
    rows, frows = w.reshape(w.shape[0], -1), folded.reshape(w.shape[0], -1)
    k = np.abs(rows).argmax(axis=1)
    pick = rows[np.arange(rows.shape[0]), k]
    if np.any(pick == 0):
        return None
    f = (frows[np.arange(rows.shape[0]), k].astype(np.float64) / pick).astype(np.float32)
    if not np.all(np.isfinite(f)) or np.any(f == 0) or \
            not np.allclose(frows, rows * f[:, None].astype(np.float64), rtol=1e-6, atol=0):
        return None
    return f


def build_int8_in(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Optional[Group]:
    """The int8-in / fp16-out group anchored at QDQ layer ``n`` (its output not quantized), or None."""
    dq_in = activation_dq(g, n.input[0])
    if dq_in is None or len(n.input) < 2:
        return None
    int8_out = _int8_output(g, n.output[0])   # qdq.build's case (it failed when this runs)
    qin = qparams(g, dq_in)
    if isinstance(qin, str):
        return None
    opset = g.opset
    if opset < 13:
        return None
    w = layer_weight(g, n)
    if not isinstance(w, tuple):
        return None
    wq, ws, dq_w, axis, real, wz = w
    consts = {n.input[1]: real}
    absorbed = [dq_w] if len(g.consumers.get(n.input[1], [])) == 1 else []
    b = n.input[2] if len(n.input) > 2 and n.input[2] else ""
    if b and not g.is_const(b):
        dq_b = g.producer.get(b)
        if dq_b is None or dq_b.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq_b.input if i):
            return None
        c = dequantized_const(g, dq_b)   # fp32 as onnxruntime's DequantizeLinear computes it
        if c is None or dq_b.name in claimed:
            return None
        consts[b] = c.reshape(-1)
        absorbed += [dq_b] if len(g.consumers.get(b, [])) == 1 else []
    view = Dequantized(g, consts)
    if n.op_type == "Conv":   # the MAC array's multi-pass lowering, as an int8 layer's (int8_conv_passes)
        grp = build_conv(view, n, target, int8=True)
    else:
        grp = {"Gemm": build_fc}.get(n.op_type, build_matmul)(view, n, target)
    if not isinstance(grp, Group) or grp.op not in ("Conv2D", "FC"):
        return None
    wf = consts[n.input[1]] if n.op_type == "Conv" or axis == 0 else consts[n.input[1]].T
    factor = _folded_factor(wf, np.asarray(grp.weights["W"], np.float32))
    if factor is None:
        return None
    x, in_front = pair_in(g, n, 0, qin, claimed)
    weights = {"W": kernel_oi(n, wq, axis)}
    if "B" in grp.weights:
        weights["B"] = np.asarray(grp.weights["B"], np.float32).reshape(-1)
    if "slope" in grp.weights:
        weights["slope"] = grp.weights["slope"]
    attrs = dict(grp.attrs, precision=PRECISION, in_scale=qin[0], in_zero_point=qin[1], in_type=qin[2],
                 weight_scales=[float(v) for v in (ws * factor).astype(np.float32)])
    if wz is not None:   # asymmetric weights: the row-sum correction (docs/fusion.md "Asymmetric weights")
        if accumulator_reason(weights["W"], None, wz):
            return None
        attrs["weight_zero_points"] = [int(v) for v in wz]
    if ({n.name} | set(get_origin(n) or [])) & ort_u8s8_sums(g.model):
        attrs["int8_sums"] = "u8s8"   # onnxruntime's U8S8 integer kernel: int16 pairs without VNNI (sim/mlas_u8s8.py)
    chain, end, post = _post_affine(g, grp.output, claimed)
    pair = output_pair(g, end, claimed) if end not in g.output_set else None
    if not isinstance(pair, tuple) and end not in g.output_set:   # legalize qdq_channel_input's per-channel Q
        cp = channel_pair(g, end, claimed, len(attrs["weight_scales"]))
        if cp is not None:   # the layer writes the codes (scale 1): the pair is its own, its DQ the output
            pair, post, chain, end = cp[:3], post + [("div", cp[3])], chain + [cp[0], cp[1]], cp[1].output[0]
    if not isinstance(pair, tuple):
        chain, end, post = [], grp.output, []
        pair = output_pair(g, end, claimed) if end not in g.output_set else None
    if int8_out and not (isinstance(pair, tuple) and pair[1].output[0] not in g.output_set and
                         any(x.op_type not in ("Relu", "Clip") for x in grp.nodes[1:])):
        return None   # an int8 layer's reason stands (its pair at the model output: on the CPU as before)
    if isinstance(pair, tuple):   # the float chain ends in a Q -> DQ (NNCF: a BN, an activation between
        qout = pair[2]             # the layer and the next layer's input quantizer)
        attrs.update(outq_scale=qout[0], outq_zero_point=qout[1], outq_type=qout[2])
        if post:
            values = [v if isinstance(v, list) else [v] for _, v in post]
            attrs.update(post_ops=",".join(op for op, _ in post), post_values=[x for v in values for x in v])
            if any(len(v) != 1 for v in values):   # a per-channel division (qdq_channel_out.py)
                attrs["post_sizes"] = [len(v) for v in values]
    out = Group(grp.op, grp.composite, grp.nodes + chain + in_front + absorbed, [x], end, attrs, weights)
    out.note = NOTE.format(out=end) + (QUANTIZED if isinstance(pair, tuple) else "")
    return out


POST_OPS = {"Mul": "mul", "Add": "add", "Sub": "sub", "Div": "div"}


def _post_affine(g: GraphIndex, t: str, claimed):
    """The element-wise ops with one scalar constant operand that alone follow ``t`` (PP-LCNetV3's
    learnable affine block ``x * s + b`` after the activation; the constant second for Sub / Div):
    (their nodes, the last output, [(op, value)]), each computed in fp32 in the layer's epilogue as
    onnxruntime's kernels do (one rounding per op)."""
    from .qconst import constant_value
    nodes, post = [], []
    while True:
        users = g.consumers.get(t, [])
        if len(users) != 1 or t in g.output_set:
            break
        u = users[0]
        if u.op_type not in POST_OPS or len(u.input) != 2 or u.name in g.excluded or u.name in claimed:
            break
        k = 0 if u.input[1] == t else 1   # the constant's index
        if u.input[1 - k] != t or (k == 0 and u.op_type in ("Sub", "Div")):
            break
        c = constant_value(g, u.input[k])
        if c is None or c.size != 1 or c.dtype != np.float32 or not np.isfinite(c).all() or \
                g.elem_type(u.output[0]) not in (None, onnx.TensorProto.FLOAT):
            break
        nodes.append(u)
        post.append((POST_OPS[u.op_type], float(c.reshape(-1)[0])))
        t = u.output[0]
    return nodes, t, post
