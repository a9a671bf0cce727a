"""``DynamicQuantizeLSTM`` with calibration as an int8 recurrent layer (the option
``quantize_options={"recurrent": "int8"}``; docs/quantize.md "Dynamic int8 models").

onnxruntime's kernel quantizes X (all timesteps at once) and, per timestep, ``h_{t-1}`` to uint8 with
their run-time min / max, multiplies by the int8 W / R codes and scales in fp32. The option writes
the QDQ form ``fuse/qdq_recurrent.py`` imports:

    Q(x; calibrated uint8 scale) -> DQ -> LSTM(DQ(W_q^T), DQ(R_q^T), B, ...)

W_q ``[D, I, 4H]`` -> ``[D, 4H, I]`` (the codes as they are), scales per direction (DequantizeLinear
axis 0) or per gate row (axis 1; two directions: ``Reshape(DQ([2*4H, I] codes, axis 0), [2, 4H, I])``,
which fuse reads through); uint8 codes ``q`` as the int8 codes ``q - 128``
with zero point ``z - 128`` (the same ``q - z``). The recurrent product runs on the fp16 state (no calibrated state scale: measured
no closer to either reference than the fp16 state). Default ("fp16"): the LSTM stays the fp16 layer
with dequantized weights (legalize's ``dynamic_lstm``): an int8 recurrent layer with a calibrated
static input scale measured farther from onnxruntime's dynamic run and from fp32 on every model of
``benchmarks/bench_dynamic_lstm.py``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple, Union

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .dynamic_layers import MS, Graph, dom

RECURRENT = ("fp16", "int8")   # quantize_options "recurrent", the default first
LSTM_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size",
              "input_forget", "layout")


@dataclass
class Lstm:
    node: onnx.NodeProto
    x: str
    w: Tuple   # (codes [D, 4H, I] int8, scales, DequantizeLinear axis or -1, int8 zero points or None)
    r: Tuple


def _inp(n, k: int) -> str:
    return n.input[k] if len(n.input) > k else ""


def _codes(g: Graph, n, q_idx: int, s_idx: int, z_idx: int) -> Union[Tuple, str]:
    """(int8 codes [D, 4H, K], scales, DequantizeLinear axis (-1: per tensor), zero points) or a reason."""
    q, s = g.const(_inp(n, q_idx)), g.const(_inp(n, s_idx))
    z = g.const(_inp(n, z_idx)) if _inp(n, z_idx) else None
    if q is None or s is None or (_inp(n, z_idx) and z is None):
        return f"input {q_idx} or its scale / zero point is not a constant"
    if q.dtype not in (np.int8, np.uint8) or q.ndim != 3:
        return f"weights {q.dtype} {list(q.shape)} (int8 [D, K, 4H] expected)"
    d, _, rows = q.shape
    s = np.asarray(s, np.float32).reshape(-1)
    z = np.zeros(s.size, np.int32) if z is None else np.asarray(z).astype(np.int32).reshape(-1)
    if s.size == 1:
        axis = -1
    elif s.size == d:
        axis = 0
    elif s.size == d * rows:
        axis = 1   # per gate row (a bidirectional layer: codes [D*4H, K], axis 0, then a Reshape)
    else:
        return f"scales of shape {list(np.shape(g.const(_inp(n, s_idx))))} (per tensor, direction or gate row expected)"
    if not (np.isfinite(s).all() and np.all(s > 0)):
        return "weight scales that are not positive and finite"
    if z.size not in (1, d, d * rows):
        return f"{z.size} weight zero points for {d} direction(s) of {rows} gate rows"
    if q.dtype == np.int8 and np.any(z != 0):
        return f"int8 weights with zero point(s) {z[:4].tolist()} (onnxruntime's kernel takes 0)"
    if q.dtype == np.uint8:   # int8 codes q - 128, zero point z - 128: the same q - z, exactly
        if np.unique(z).size != 1:
            return "uint8 weights with different zero points"
        zq = np.full(s.shape, int(z[0]) - 128, np.int8)
        return (q.transpose(0, 2, 1).astype(np.int32) - 128).astype(np.int8), s, axis, zq
    return np.ascontiguousarray(q.transpose(0, 2, 1)), s, axis, None


def take(g: Graph, fp16_layers) -> Tuple[List[Lstm], Dict[str, Tuple[str, List[str]]]]:
    """The DynamicQuantizeLSTM nodes made int8 recurrent layers, and why the others stay fp16."""
    out, reasons = [], {}
    keep = set(fp16_layers or ())
    for n in g.model.graph.node:
        if (dom(n), n.op_type) != (MS, "DynamicQuantizeLSTM"):
            continue
        why = "fp16_layers names it" if n.name in keep or n.op_type in keep else None
        w = r = None
        if why is None:
            w, r = _codes(g, n, 1, 8, 9), _codes(g, n, 2, 10, 11)
            why = next((f"DynamicQuantizeLSTM: {v}" for v in (w, r) if isinstance(v, str)), None)
        if why is None and g.producer.get(n.input[0]) is None and n.input[0] not in {i.name for i in g.model.graph.input}:
            why = f"its input '{n.input[0]}' is no computed tensor"
        if why:
            reasons[n.name] = (why, [n.name])
            continue
        out.append(Lstm(n, n.input[0], w, r))
    return out, reasons


def _init(graph, name: str, arr: np.ndarray) -> str:
    have = {t.name for t in graph.initializer} | {o for x in graph.node for o in x.output}
    base, k = name, 1
    while name in have:
        name, k = f"{base}_{k}", k + 1
    graph.initializer.append(numpy_helper.from_array(arr, name))
    return name


def rewrite(model: onnx.ModelProto, layers: List[Lstm], qp: Dict[str, Tuple]) -> None:
    """Replaces each DynamicQuantizeLSTM of ``model`` (in place) by its QDQ LSTM (module docstring)."""
    graph = model.graph
    by_name = {L.node.name: L for L in layers}
    nodes: List[onnx.NodeProto] = []
    for n in graph.node:
        L = by_name.get(n.name)
        if L is None:
            nodes.append(n)
            continue
        s, z = qp[L.x]
        base = n.name
        sn, zn = _init(graph, f"{base}/x_scale", np.asarray(s, np.float32)), \
            _init(graph, f"{base}/x_zero_point", np.asarray(z, np.uint8))
        nodes += [helper.make_node("QuantizeLinear", [L.x, sn, zn], [f"{base}/x_q"], name=f"{base}/input"),
                  helper.make_node("DequantizeLinear", [f"{base}/x_q", sn, zn], [f"{base}/x_dq"], name=f"{base}/input_dq")]
        ins = [f"{base}/x_dq"]
        for role, (codes, scales, axis, zp) in (("W", L.w), ("R", L.r)):
            merged = axis == 1 and codes.shape[0] > 1   # per gate row of two directions: [D*4H, K] codes
            qn = _init(graph, f"{base}/{role}_q", codes.reshape(-1, codes.shape[2]) if merged else codes)
            scn = _init(graph, f"{base}/{role}_scale", scales if axis >= 0 else scales.reshape(()))
            zpn = [] if zp is None else [_init(graph, f"{base}/{role}_zero_point", zp if axis >= 0 else zp.reshape(()))]
            kw = {"axis": 0 if merged else axis} if axis >= 0 else {}
            out = f"{base}/{role}_rows" if merged else f"{base}/{role}"
            nodes.append(helper.make_node("DequantizeLinear", [qn, scn] + zpn, [out], name=f"{base}/{role}_dq", **kw))
            if merged:
                shn = _init(graph, f"{base}/{role}_shape", np.array(codes.shape, np.int64))
                nodes.append(helper.make_node("Reshape", [out, shn], [f"{base}/{role}"], name=f"{base}/{role}_reshape"))
            ins.append(f"{base}/{role}")
        rest = [_inp(n, k) for k in range(3, 8)]
        while rest and not rest[-1]:
            rest.pop()
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute if a.name in LSTM_ATTRS}
        nodes.append(helper.make_node("LSTM", ins + rest, list(n.output), name=n.name, **attrs))
    del graph.node[:]
    graph.node.extend(nodes)


def records(layers: List[Lstm], qp, ranges, samples: int) -> List[dict]:
    """``report.quantization["layers"]`` entries of the int8 recurrent layers."""
    out = []
    for L in layers:
        s, z = qp[L.x]
        out.append({"layer": L.node.name, "op_type": "DynamicQuantizeLSTM", "precision": "int8 in, fp16 out",
                    "input": L.x, "input_scale": float(s), "input_zero_point": int(z),
                    "weights": f"int8 W / R, {'per gate row' if L.w[2] == 1 else 'per direction' if L.w[2] == 0 else 'per tensor'}"
                               f" (as quantize_dynamic wrote them)",
                    "replaces": [L.node.name],
                    "reason": f"dynamic int8 -> int8 recurrent layer with a calibrated input scale: input '{L.x}' "
                              f"scale {float(s):.4g} zero point {int(z)} (range {ranges[L.x][0]:.4g}.."
                              f"{ranges[L.x][1]:.4g} over {samples} samples); fp16 state, fp16 Y"})
    return out


__all__ = ["RECURRENT", "Lstm", "take", "rewrite", "records"]
