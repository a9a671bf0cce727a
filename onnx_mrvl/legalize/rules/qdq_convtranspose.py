"""A QDQ ConvTranspose (``DQ(x) -> ConvTranspose(DQ(W_q, axis 1), DQ(B_q)) -> [Relu/Clip] -> Q``;
onnxruntime's quantizer, torch exports: the weight ``[C_in, C_out, kh, kw]`` per channel on axis
1) -> ``convtranspose_phases``'s sub-pixel form with each phase Conv a QDQ layer:

    DQ(x) -> Conv_r(DQ(W_q sub-kernel r, s_w, axis 0), DQ(B_q)) -> Q(s_y, z_y) -> DQ -> interleave
          (Concat + reshapes) -> [Relu/Clip] -> the original Q -> DQ

so fuse makes each phase an int8 Conv2D (its integer sums are the ConvTranspose's: every output
pixel is one phase's sum). The pair after each phase has the output's scale and zero point; the
interleave moves grid values (their fp16 copies round back to the same code in the original Q),
and a Relu / Clip after a quantization with the output's zero point gives the codes it gives
before. onnxruntime runs a QDQ ConvTranspose in float: where every output pixel is one kernel tap
(kernel <= stride) the phase Convs are marked (ort_plan.mark_float_gemm) and fuse makes them
float-path layers with onnxruntime's sums, exact; with overlapping taps the integer sums may round a
near-tie the other way. Weights with a zero point (per tensor or per output channel, int8 or uint8:
codes q - 128 with z - 128) keep it in each phase's DQ (int8 layers with weight zero points). A QDQ
ConvTranspose this cannot take (a group, block-wise scales, implicit pads, no output Q, ...) gets its
weight and bias
dequantized in fp32 (onnxruntime's DequantizeLinear) for the float rules, and its decision says so.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from .base import Match, attr, dq_producer, inp
from ...ort_plan import mark_float_gemm
from .convtranspose_phases import interleave, plan_phases

NAME = "qdq_convtranspose"
OPS = ("ConvTranspose",)
QTYPES = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
NOTE = "{precision} with dequantized weights (a QDQ ConvTranspose: %s; legalize rewrites it on float weights)"


def match(node, g) -> Optional[Match]:
    dq_x, dq_w = dq_producer(g, node.input[0]), dq_producer(g, inp(node, 1))
    if node.domain not in ("", "ai.onnx") or dq_x is None or dq_w is None:
        return None
    if not all(g.is_const(i) for i in dq_w.input if i):
        return None
    dq_b = dq_producer(g, inp(node, 2))
    if inp(node, 2) and not g.is_const(node.input[2]) and (dq_b is None or not all(g.is_const(i) for i in dq_b.input if i)):
        return None
    return Match([node], {"dq_x": dq_x, "dq_w": dq_w, "dq_b": dq_b})


def _scalar_qparams(g, n) -> bool:
    s = g.const(inp(n, 1))
    z = g.const(inp(n, 2)) if inp(n, 2) else None
    return s is not None and s.size == 1 and (not inp(n, 2) or (z is not None and z.size == 1))


def _int8_reason(m: Match, g, target) -> Optional[str]:
    node, dq_x, dq_w, dq_b = m.node, m.data["dq_x"], m.data["dq_w"], m.data["dq_b"]
    sx, sy = g.shape(node.input[0]), g.shape(node.output[0])
    if sx is None or sy is None or len(sx) != 4 or None in sx or None in sy:
        return UNKNOWN
    if g.opset < 11:
        return f"opset {g.opset}"
    if attr(node, "group", 1) != 1 or any(d != 1 for d in (attr(node, "dilations") or [1, 1])):
        return "grouped or dilated"
    if attr(node, "output_shape") or (attr(node, "auto_pad", "NOTSET") or "NOTSET") != "NOTSET":
        return "implicit pads (output_shape / auto_pad)"
    codes = g.const(dq_w.input[0])
    ws = g.const(dq_w.input[1]).astype(np.float32).reshape(-1)
    cout = codes.shape[1] if codes.ndim == 4 else -1
    if codes.dtype not in (np.int8, np.uint8) or codes.ndim != 4:
        return f"weights are {codes.dtype}, not 4-D int8 / uint8"
    if attr(dq_w, "block_size", 0):
        return "weights with block-wise scales"
    if ws.size not in (1, cout) or (ws.size > 1 and attr(dq_w, "axis", 1) % 4 != 1):
        return "weight scales not per tensor or per output channel (axis 1)"
    # a zero point (per tensor or per output channel): each phase Conv's DQ keeps it (an int8
    # layer with weight zero points, docs/fusion.md "Asymmetric weights"); uint8 as q - 128, z - 128
    zw = g.const(dq_w.input[2]).astype(np.int32).reshape(-1) if inp(dq_w, 2) else np.zeros(1, np.int32)
    if zw.size not in (1, cout) or (zw.size > 1 and attr(dq_w, "axis", 1) % 4 != 1):
        return "weight zero points not per tensor or per output channel (axis 1)"
    if not np.all(np.isfinite(ws)) or np.any(ws <= 0):
        return "weight scales not positive"
    if not _scalar_qparams(g, dq_x):
        return "input quantized per axis"
    y = node.output[0]
    if y in g.pinned:
        return "its output is a model output"
    nxt = g.only_consumer(y)
    if nxt is not None and nxt.op_type in ("Relu", "Clip"):
        y = nxt.output[0]
        nxt = g.only_consumer(y)
    if nxt is None or nxt.op_type != "QuantizeLinear" or not _scalar_qparams(g, nxt) or \
            g.dtype(nxt.output[0]) not in QTYPES or y in g.pinned:
        return "its output is not quantized by one per-tensor int8/uint8 QuantizeLinear"
    if inp(node, 2) and not g.is_const(node.input[2]) and g.const(dq_b.input[0]).dtype != np.int32:
        return "bias is not an fp32 constant or a DequantizeLinear of int32"   # (fp32: qdq_float_bias)
    k = list(attr(node, "kernel_shape") or codes.shape[2:])
    s = list(attr(node, "strides") or [1, 1])
    pads = list(attr(node, "pads") or [0, 0, 0, 0])
    if list(codes.shape[2:]) != k or codes.shape[0] != sx[1]:
        return "kernel_shape / channels differ from the weight"
    phases = plan_phases(k, s, pads, sx, sy, target)
    if isinstance(phases, str):
        return phases
    off = 128 if codes.dtype == np.uint8 else 0
    m.data.update(q=nxt, s=s, phases=phases, ws=np.full(cout, ws[0], np.float32) if ws.size == 1 else ws,
                  per_axis=ws.size > 1, zw=np.broadcast_to(zw - off, (cout,)).astype(np.int8), offset=off)
    return None


UNKNOWN = "not a 2-D ConvTranspose with static shapes"


def check(m: Match, g, target) -> Optional[str]:
    why = _int8_reason(m, g, target)
    if why == UNKNOWN and _defer(m.node, g):
        # TorchScript's chunk / split: Slices of bounds computed from Shape, folded over the first
        # sweeps and inferred on the next: the int8 form then, not the float one now
        return "shapes not inferred yet (deferred while Shape arithmetic folds)"
    m.data["why"] = why   # either form applies
    return None


def _defer(node, g) -> bool:
    """Wait while the graph still has Shape / Size nodes (folding may make the shapes static), and
    one sweep more after they are gone (the next sweep's inference sees the folded bounds)."""
    if any(True for _ in g.nodes_of(("Shape", "Size"))):
        return True
    grace = g.__dict__.setdefault("qdq_convtranspose_grace", {})
    return grace.setdefault(node.name, g.shapes) is g.shapes   # the dict of this sweep (ids may be reused)


def _dequantize(g, dq) -> np.ndarray:
    q = g.const(dq.input[0])
    s = g.const(dq.input[1]).astype(np.float32)
    z = g.const(dq.input[2]) if inp(dq, 2) else np.zeros((), q.dtype)
    if s.size > 1:
        shape = [1] * q.ndim
        shape[attr(dq, "axis", 1) % q.ndim] = -1
        s, z = s.reshape(shape), z.reshape(shape)
    return ((q.astype(np.int64) - z.astype(np.int64)).astype(np.float32) * s).astype(np.float32)


def _bias(g, node, dq_b, origin, tag):
    """The phase Conv's bias: the fp32 constant, or its own DequantizeLinear of the int32 codes
    (each int8 layer absorbs its bias DQ)."""
    if not inp(node, 2):
        return []
    if dq_b is None:
        return [node.input[2]]
    out = g.fresh(f"{node.input[2]}/{tag}")
    g.make("DequantizeLinear", list(dq_b.input), [out], near=node, origin=origin,
           name=g.fresh_node_name(f"{node.name}/B_{tag}_dq"), **({"axis": 0} if g.const(dq_b.input[1]).size > 1 else {}))
    g.set_shape(out, g.shape(node.input[2]), onnx.TensorProto.FLOAT)
    return [out]


def rewrite(m: Match, g) -> str:
    node = m.node
    if m.data["why"]:
        g.set_input(node, 1, g.add_const(f"{node.input[1]}_dequantized", _dequantize(g, m.data["dq_w"])))
        if m.data["dq_b"] is not None:
            g.set_input(node, 2, g.add_const(f"{node.input[2]}_dequantized", _dequantize(g, m.data["dq_b"])))
        for o in m.origin:
            g.notes.setdefault(o, NOTE % m.data["why"])
        return f"QDQ ConvTranspose on dequantized weights ({m.data['why']})"
    origin = m.origin
    q, dq_w = m.data["q"], m.data["dq_w"]
    codes = g.const(dq_w.input[0])                                   # [Cin, Cout, kh, kw]
    codes = (codes.astype(np.int32) - m.data["offset"]).astype(np.int8)   # uint8: q - 128 (with z - 128)
    wc = codes.transpose(1, 0, 2, 3)                                  # Conv layout [Cout, Cin, kh, kw]
    scale = g.add_const(f"{node.name}/W_scale", m.data["ws"])
    zero = g.add_const(f"{node.name}/W_zero_point", m.data["zw"])
    (sh, sw), sy, x = m.data["s"], g.shape(node.output[0]), node.input[0]
    out = node.output[0]
    cout = wc.shape[0]
    shape = [sy[0], cout, sy[2] // sh, sy[3] // sw]
    qp = list(q.input[1:])
    g.remove(node)
    rows = []
    ph_h, ph_w = m.data["phases"]
    # every output pixel one kernel tap (kernel <= stride: DBNet's / U-Nets' 2x2 stride-2 upsampling):
    # onnxruntime's float ConvTranspose then sums, per output, the C_in products of one tap in channel
    # order (an SGEMM with A transposed; col2im adds it to 0), which the phase Conv reproduces as a
    # float-path layer (sim/int8_float_conv.py, gemm "conv_transpose"); else integer sums (near-ties
    # may round the other way)
    one_tap = all(len(t) == 1 for t, _, _ in ph_h) and all(len(t) == 1 for t, _, _ in ph_w)
    for rh, (th, bh, eh) in enumerate(ph_h):
        cols = []
        for rw, (tw, bw, ew) in enumerate(ph_w):
            tag = f"p{rh}{rw}"
            wsub = np.ascontiguousarray(wc[:, :, th][:, :, :, tw])
            wdq = g.fresh(f"{node.name}/W_{tag}")
            g.make("DequantizeLinear", [g.add_const(f"{node.name}/W_{tag}_quantized", wsub), scale, zero], [wdq],
                   near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/W_{tag}_dq"), axis=0)
            g.set_shape(wdq, wsub.shape, onnx.TensorProto.FLOAT)
            z = g.fresh(f"{out}/{tag}")
            conv = g.make("Conv", [x, wdq] + _bias(g, node, m.data["dq_b"], origin, tag), [z], near=node,
                          origin=origin, name=g.fresh_node_name(f"{node.name}/{tag}"), kernel_shape=list(wsub.shape[2:]),
                          strides=[1, 1], dilations=[1, 1], pads=[bh, bw, eh, ew], group=1)
            if one_tap:   # onnxruntime's sums: its float ConvTranspose's, one tap per output pixel
                mark_float_gemm(conv, "conv_transpose")
            g.set_shape(z, shape, onnx.TensorProto.FLOAT)
            zq, zd = g.fresh(f"{z}_QuantizeLinear_Output"), g.fresh(f"{z}_DequantizeLinear_Output")
            g.make("QuantizeLinear", [z] + qp, [zq], near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/{tag}_q"))
            g.set_shape(zq, shape, g.dtype(q.output[0]))
            g.make("DequantizeLinear", [zq] + qp, [zd], near=node, origin=origin,
                   name=g.fresh_node_name(f"{node.name}/{tag}_dq"))
            g.set_shape(zd, shape, onnx.TensorProto.FLOAT)
            cols.append(zd)
        rows.append(interleave(g, node, origin, cols, 3, shape, f"{out}/r{rh}", f"{node.name}/r{rh}",
                               final=out if sh == 1 else None))
    if sh > 1:
        shape[3] = sy[3]
        interleave(g, node, origin, rows, 2, shape, out, f"{node.name}/rows", final=out)
    elif len(rows) == 1 and rows[0] != out:    # stride 1 x 1: one phase
        g.make("Identity", [rows[0]], [out], near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/out"))
    return f"QDQ ConvTranspose stride {sh}x{sw} -> {sh * sw} QDQ phase Convs + Concat/reshape interleave"
