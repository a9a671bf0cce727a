"""Dynamic-int8 models with calibration data: ``convert(dynamic_model, calibration=...)``.

A model of onnxruntime's ``quantize_dynamic`` computes each activation's scale at run time
(``DynamicQuantizeLinear``), which the accelerator's int8 layers (a fixed ``in_scale``) cannot
take. With calibration samples the run-time ranges are measured instead: the model runs in
onnxruntime with every ``DynamicQuantizeLinear`` input and every layer's float result as extra
outputs (min / max over all samples), and the scale and zero point are computed the way
``DynamicQuantizeLinear`` computes them (uint8, range widened to include 0, ``scale = (max - min) /
255`` (1 for an empty range), ``zp = saturate(round_half_even(-min / scale))``). Each layer then
becomes the QDQ form ``fuse/qdq.py`` imports as an int8 layer (docs/quantize.md "Dynamic int8
models"):

``DynamicQuantizeLinear(x) -> MatMulInteger / ConvInteger(W_q) -> Cast -> Mul(s_x * s_w) [-> Add(b)]
[-> Relu/Clip]`` (also com.microsoft ``MatMulIntegerToFloat`` / ``DynamicQuantizeMatMul``) ->
``Q(x) -> DQ -> MatMul / Conv(DQ(W_q int8, s_w)[, DQ(b int32, s_x * s_w)]) [-> Relu/Clip] -> Q -> DQ``.

The int8 weights are kept as they are (per tensor or per output channel); uint8 weights only when
``W_q - z_w`` fits int8 (then recoded exactly: the accelerator takes symmetric int8 weights). The
int8 layer writes int8 codes, so its float result gets a calibrated quantization too (the dynamic
model has none there: the one added rounding). A MatMul's bias ``Add`` stays an ``Add`` with its own
calibrated output quantization (an int8 Sum2D, as ``quantize_static`` writes a MatMul + bias); a
Conv's bias goes into the layer as int32 ``round(b / (s_x s_w))``. What this module does not take
stays for legalize's ``dynamic_int8`` / ``dynamic_lstm`` (an fp16 layer with dequantized weights),
with the reason in ``report.quantization["layers"]`` and in the node's decision.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import MrvlError, UsageError
from .calibration import load_calibration

log = logging.getLogger(__name__)
MS = "com.microsoft"
FAMILY = {("", "DynamicQuantizeLinear"), ("", "MatMulInteger"), ("", "ConvInteger"), (MS, "DynamicQuantizeMatMul"),
          (MS, "MatMulIntegerToFloat"), (MS, "DynamicQuantizeLSTM")}
LAYER_OPS = {("", "MatMulInteger"), ("", "ConvInteger"), (MS, "DynamicQuantizeMatMul"), (MS, "MatMulIntegerToFloat")}
MIN_OPSET = 13
NOTE_INT8 = "dynamic int8 -> int8 with calibrated activation scales"
NOTE_FP16 = "dynamic int8: {precision} with dequantized weights (no calibration)"


def _dom(n) -> str:
    return "" if n.domain in ("", "ai.onnx") else n.domain


def is_dynamic(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds a node of onnxruntime's dynamic-int8 family."""
    return any((_dom(n), n.op_type) in FAMILY for n in model.graph.node)


@dataclass
class Layer:
    node: onnx.NodeProto                        # MatMulInteger / ConvInteger / MatMulIntegerToFloat / DynamicQuantizeMatMul
    conv: bool
    x: str = ""                                 # the float input
    dql: Optional[onnx.NodeProto] = None        # its DynamicQuantizeLinear (None for DynamicQuantizeMatMul)
    removed: List[onnx.NodeProto] = field(default_factory=list)
    wq: Optional[np.ndarray] = None             # int8 weights
    ws: Optional[np.ndarray] = None             # float32 scale(s)
    y: str = ""                                 # the float result the dynamic model computes (x * W, scaled)
    bias: Optional[np.ndarray] = None           # float32 [O]: int32 into a Conv / an Add after a fused MatMul
    add: Optional[onnx.NodeProto] = None        # the bias Add a MatMul keeps
    points: List[str] = field(default_factory=list)   # float tensors quantized after the layer
    reason: Optional[str] = None


class _Graph:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.model = model
        self.inits = {t.name: t for t in g.initializer}
        self.consts: Dict[str, np.ndarray] = {}
        self.producer = {o: n for n in g.node for o in n.output if o}
        self.users: Dict[str, List[onnx.NodeProto]] = {}
        for n in g.node:
            for i in n.input:
                if i:
                    self.users.setdefault(i, []).append(n)
        self.outputs = {o.name for o in g.output}

    def const(self, name: str) -> Optional[np.ndarray]:
        if not name:
            return None
        if name in self.consts:
            return self.consts[name]
        v = None
        if name in self.inits:
            v = numpy_helper.to_array(self.inits[name])
        else:
            p = self.producer.get(name)
            if p is not None and p.op_type == "Constant" and p.attribute and p.attribute[0].name == "value":
                v = numpy_helper.to_array(p.attribute[0].t)
            elif p is not None and p.op_type == "Reshape" and _dom(p) == "":
                a, s = self.const(p.input[0]), self.const(p.input[1])
                if a is not None and s is not None and 0 not in s.tolist():
                    v = a.reshape([int(d) for d in s])
        self.consts[name] = v
        return v

    def only_user(self, t: str, op: str) -> Optional[onnx.NodeProto]:
        u = self.users.get(t, [])
        if len(u) == 1 and t not in self.outputs and u[0].op_type == op and _dom(u[0]) == "":
            return u[0]
        return None


def _inp(n, k: int) -> str:
    return n.input[k] if len(n.input) > k else ""


def _weights(g: _Graph, L: Layer, w: str, wz: str, scale: np.ndarray) -> Optional[str]:
    """Sets ``L.wq`` (int8, zero point 0) and ``L.ws``, or returns why not."""
    q, z = g.const(w), (g.const(wz) if wz else None)
    if q is None or (wz and z is None):
        return "its weights or their zero point are not constants"
    if q.dtype not in (np.int8, np.uint8):
        return f"weights of type {q.dtype}"
    if not L.conv and q.ndim != 2:
        return f"{q.ndim}-D weights (a 2-D [K, N] is the FC form)"
    axis = 0 if L.conv else 1
    s = np.asarray(scale, np.float32).reshape(-1)
    zz = np.zeros(1, np.int32) if z is None else np.asarray(z).astype(np.int32).reshape(-1)
    for v in (s, zz):
        if v.size not in (1, q.shape[axis]):
            return f"weight scale / zero point of {v.size} values fit neither one nor one per output channel"
    if not np.isfinite(s).all() or np.any(s <= 0):
        return "weight scales that are not positive and finite"
    shape = [-1 if i == axis else 1 for i in range(q.ndim)]
    v = q.astype(np.int32) - (zz.reshape(shape) if zz.size > 1 else zz[0])
    if v.min() < -128 or v.max() > 127:
        return (f"{q.dtype} weights with zero point(s) {zz[:4].tolist()}: W_q - z spans [{v.min()}, {v.max()}], "
                f"beyond int8 (the accelerator's int8 layers take symmetric int8 weights)")
    L.wq, L.ws = v.astype(np.int8), s
    return None


def _dql_of(g: _Graph, n, q_idx: int, zp_idx: int):
    p = g.producer.get(_inp(n, q_idx))
    if p is None or p.op_type != "DynamicQuantizeLinear" or _dom(p) or p.output[0] != n.input[q_idx]:
        return None
    if _inp(n, zp_idx) != (p.output[2] if len(p.output) > 2 else ""):
        return None
    return p


def _parse(g: _Graph, n) -> Layer:
    L = Layer(n, conv=n.op_type == "ConvInteger")
    L.reason = _parse_reason(g, L)
    return L


def _parse_reason(g: _Graph, L: Layer) -> Optional[str]:
    n = L.node
    if n.op_type in ("MatMulInteger", "ConvInteger"):
        cast = g.only_user(n.output[0], "Cast")
        mul = g.only_user(cast.output[0], "Mul") if cast is not None else None
        if mul is None or helper.get_attribute_value(next(a for a in cast.attribute if a.name == "to")) != 1:
            return "not followed by Cast(float) -> Mul(scale) alone (the quantize_dynamic form)"
        L.dql = _dql_of(g, n, 0, 2)
        if L.dql is None:
            return "its input A is not the output of a DynamicQuantizeLinear (with its zero point)"
        other = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
        sm = g.producer.get(other)
        if sm is None or sm.op_type != "Mul" or L.dql.output[1] not in sm.input:
            return f"Mul '{mul.name}' does not scale by DynamicQuantizeLinear's scale x a constant weight scale"
        ws = g.const(sm.input[1] if sm.input[0] == L.dql.output[1] else sm.input[0])
        if ws is None:
            return "its weight scale is not a constant"
        L.removed = [n, cast, mul] + ([sm] if len(g.users.get(sm.output[0], [])) == 1 else [])
        L.x, L.y = L.dql.input[0], mul.output[0]
        why = _weights(g, L, n.input[1], _inp(n, 3), ws)
    elif n.op_type == "DynamicQuantizeMatMul":   # (A float, B, b_scale, b_zp, bias)
        ws = g.const(_inp(n, 2))
        if ws is None:
            return "its weight scale is not a constant"
        L.removed, L.x, L.y = [n], n.input[0], n.output[0]
        why = _weights(g, L, n.input[1], _inp(n, 3), ws)
        bias = _inp(n, 4)
    else:   # MatMulIntegerToFloat(A, B, a_scale, b_scale, a_zp, b_zp, bias)
        L.dql = _dql_of(g, n, 0, 4)
        if L.dql is None or _inp(n, 2) != L.dql.output[1]:
            return "its input A is not the output of a DynamicQuantizeLinear (with its scale and zero point)"
        ws = g.const(_inp(n, 3))
        if ws is None:
            return "its weight scale is not a constant"
        L.removed, L.x, L.y = [n], L.dql.input[0], n.output[0]
        why = _weights(g, L, n.input[1], _inp(n, 5), ws)
        bias = _inp(n, 6)
    if why:
        return why
    if g.producer.get(L.x) is None and L.x not in {i.name for i in g.model.graph.input}:
        return f"its input '{L.x}' is no computed tensor"
    out = L.y
    if n.op_type in ("DynamicQuantizeMatMul", "MatMulIntegerToFloat"):
        if bias:   # its output includes the bias: the MatMul writes '<name>/matmul', an Add the output
            b = g.const(bias)
            if b is None or b.size != L.wq.shape[1]:
                return "its bias is not a constant of one value per output"
            L.bias = np.asarray(b, np.float32).reshape(-1)
            L.points.append(f"{n.name}/matmul")
    elif L.conv:
        add = g.only_user(L.y, "Add")
        if add is not None:
            c = add.input[1] if add.input[0] == L.y else add.input[0]
            b = g.const(c)
            o = L.wq.shape[0]
            if b is not None and b.dtype == np.float32 and b.size == o and list(b.shape) in ([1, o, 1, 1], [o, 1, 1]):
                L.bias, out = b.reshape(-1).astype(np.float32), add.output[0]
                L.removed.append(add)
                p = g.producer.get(c)
                if p is not None and p.op_type == "Reshape" and len(g.users.get(c, [])) == 1:
                    L.removed.append(p)
    else:
        add = g.only_user(L.y, "Add")
        if add is not None and len(add.input) == 2:
            c = add.input[1] if add.input[0] == L.y else add.input[0]
            b = g.const(c)
            if b is not None and b.dtype == np.float32 and b.size == L.wq.shape[1] and b.shape[-1] == b.size:
                L.add = add
                L.points.append(L.y)
                out = add.output[0]
    act = g.users.get(out, [])
    while len(act) == 1 and out not in g.outputs and act[0].op_type in ("Relu", "Clip") and _dom(act[0]) == "" and \
            all(g.const(i) is not None for i in act[0].input[1:] if i):
        out = act[0].output[0]
        act = g.users.get(out, [])
    L.points.append(out)
    return None


def _qparams(lo: float, hi: float) -> Tuple[np.float32, np.uint8]:
    """uint8 scale and zero point of the range [lo, hi] as DynamicQuantizeLinear computes them (fp32)."""
    lo, hi = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.clip(np.float32(0) - lo / scale, 0, 255)
    return scale, np.uint8(np.rint(zp))


def _take(g: _Graph, fp16_layers: Sequence[str]) -> Tuple[List[Layer], Dict[str, str]]:
    """The layers to rewrite, and node name -> why a dynamic node stays fp16."""
    layers = [_parse(g, n) for n in g.model.graph.node if (_dom(n), n.op_type) in LAYER_OPS]
    keep = set(fp16_layers or ())
    for L in layers:
        if L.reason is None and (L.node.name in keep or L.node.op_type in keep):
            L.reason = "fp16_layers names it"
    while True:   # a DynamicQuantizeLinear is rewritten only when every node reading it is
        ok = {id(n) for L in layers if L.reason is None for n in L.removed}
        changed = False
        for L in layers:
            if L.reason is None and L.dql is not None:
                readers = [u for o in L.dql.output for u in g.users.get(o, [])]
                bad = [u for u in readers if id(u) not in ok]
                if bad or any(o in g.outputs for o in L.dql.output):
                    who = ", ".join(sorted({f"{u.op_type} '{u.name}'" for u in bad})) or "a graph output"
                    L.reason = f"its DynamicQuantizeLinear '{L.dql.name}' is also read by {who}, which stays dynamic"
                    changed = True
        if not changed:
            break
    reasons = {L.node.name: (L.reason, [n.name for n in L.removed] + ([L.dql.name] if L.dql is not None else []))
               for L in layers if L.reason}
    for n in g.model.graph.node:
        if (_dom(n), n.op_type) == (MS, "DynamicQuantizeLSTM"):
            reasons[n.name] = ("DynamicQuantizeLSTM: the accelerator has no int8 recurrent layer; the LSTM runs "
                               "in fp16 with dequantized weights", [n.name])
    return [L for L in layers if L.reason is None], reasons


def _ranges(model: onnx.ModelProto, tensors: List[str], samples, derived: Dict[str, Tuple[str, np.ndarray]]
            ) -> Tuple[Dict[str, Tuple[float, float]], list]:
    """min / max of ``tensors`` over ``samples`` (onnxruntime, the tensors as extra outputs), and the
    model outputs of every sample. ``derived``: name -> (tensor, bias): the range of tensor - bias
    (a fused MatMul's result before its bias)."""
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in tensors
                          if t not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    n_out = len(model.graph.output)
    lo = {t: math.inf for t in tensors}
    hi = {t: -math.inf for t in tensors}
    outs = []
    for feed in samples:
        res = dict(zip(names, sess.run(None, feed)))
        outs.append([res[o.name] for o in model.graph.output[:n_out]])
        for t in tensors:
            v = res[t]
            if v.size and not np.isfinite(v).all():
                raise UsageError(f"tensor '{t}' holds NaN/inf on a calibration sample",
                                 hint="calibrate on inputs the model computes finite values for")
            if v.size:
                lo[t], hi[t] = min(lo[t], float(v.min())), max(hi[t], float(v.max()))
        for t, (base, bias) in derived.items():
            v = (res[base] - bias).astype(np.float32)
            if v.size:
                lo[t], hi[t] = min(lo.get(t, math.inf), float(v.min())), max(hi.get(t, -math.inf), float(v.max()))
    return {t: (lo[t], hi[t]) for t in list(tensors) + list(derived)}, outs


def _consts(graph, name: str, arr: np.ndarray) -> str:
    graph.initializer.append(numpy_helper.from_array(arr, name))
    return name


def _rewrite(model: onnx.ModelProto, g: _Graph, layers: List[Layer], qp: Dict[str, Tuple]) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    graph = m.graph
    removed = {n.name for L in layers for n in L.removed + ([L.dql] if L.dql is not None else [])}
    new_at: Dict[str, List[onnx.NodeProto]] = {}    # the name of a removed node -> the nodes written in its place
    dq_of: Dict[str, str] = {}                       # float input -> its dequantized tensor

    def pair(t: str, src: str, dst: str, name: str) -> List[onnx.NodeProto]:
        s, z = qp[t]
        sn = _consts(graph, f"{name}/scale", np.asarray(s, np.float32))
        zn = _consts(graph, f"{name}/zero_point", np.asarray(z, np.uint8))
        return [helper.make_node("QuantizeLinear", [src, sn, zn], [f"{name}/q"], name=name),
                helper.make_node("DequantizeLinear", [f"{name}/q", sn, zn], [dst], name=f"{name}/dq")]

    points = {t for L in layers for t in L.points}
    dq_of.update({t: t for t in points})   # an input another layer's output pair writes: already dequantized
    for L in layers:
        n, out = L.node, []
        if L.x not in dq_of:
            head = L.dql if L.dql is not None else n
            qname = L.dql.name if L.dql is not None else f"{n.name}/input"
            dq_of[L.x] = f"{qname}/dequantized"
            new_at.setdefault(head.name, []).extend(pair(L.x, L.x, dq_of[L.x], qname))
        axis = 0 if L.conv else 1
        wn = _consts(graph, f"{n.name}/weight_q", L.wq)
        sn = _consts(graph, f"{n.name}/weight_scale", L.ws if L.ws.size > 1 else L.ws.reshape(()))
        zn = _consts(graph, f"{n.name}/weight_zero_point", np.zeros(L.ws.shape if L.ws.size > 1 else (), np.int8))
        kw = {"axis": axis} if L.ws.size > 1 else {}
        out.append(helper.make_node("DequantizeLinear", [wn, sn, zn], [f"{n.name}/weight"], name=f"{n.name}/weight_dq",
                                    **kw))
        ins = [dq_of[L.x], f"{n.name}/weight"]
        if L.conv:
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            target = L.y
            if L.bias is not None:
                add = next(r for r in L.removed if r.op_type == "Add")
                target = add.output[0]
                bs = (np.float32(qp[L.x][0]) * L.ws).astype(np.float32)
                bq = np.clip(np.round(L.bias / bs), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
                bsn = _consts(graph, f"{n.name}/bias_scale", bs if bs.size > 1 else bs.reshape(()))
                bzn = _consts(graph, f"{n.name}/bias_zero_point", np.zeros(bs.shape if bs.size > 1 else (), np.int32))
                bqn = _consts(graph, f"{n.name}/bias_q", np.broadcast_to(bq, (L.wq.shape[0],)).astype(np.int32))
                out.append(helper.make_node("DequantizeLinear", [bqn, bsn, bzn], [f"{n.name}/bias"],
                                            name=f"{n.name}/bias_dq", **({"axis": 0} if bs.size > 1 else {})))
                ins.append(f"{n.name}/bias")
            out.append(helper.make_node("Conv", ins, [target], name=n.name, **attrs))
        elif L.bias is not None:   # a fused MatMul's bias input: an Add, as quantize_dynamic writes it
            bn = _consts(graph, f"{n.name}/bias_f", L.bias)
            out.append(helper.make_node("MatMul", ins, [f"{n.name}/matmul"], name=n.name))
            out.append(helper.make_node("Add", [f"{n.name}/matmul", bn], [L.y], name=f"{n.name}/bias"))
        else:
            out.append(helper.make_node("MatMul", ins, [L.y], name=n.name))
        new_at[n.name] = out
    nodes = []
    for n in graph.node:
        nodes.extend(new_at.get(n.name, []))
        if n.name not in removed:
            nodes.append(n)
    # the quantization points after the layers: the writer writes '<t>/float', Q -> DQ writes t
    producer = {o: k for k, n in enumerate(nodes) for o in n.output}
    tails: Dict[int, List[onnx.NodeProto]] = {}
    for L in layers:
        for t in L.points:
            k = producer[t]
            w = nodes[k]
            w.output[list(w.output).index(t)] = f"{t}/float"
            tails.setdefault(k, []).extend(pair(t, f"{t}/float", t, f"{t}/output_q"))
    final = []
    for k, n in enumerate(nodes):
        final.append(n)
        final.extend(tails.get(k, []))
    # the Add of a fused MatMul's bias reads the pair after the MatMul, written after it
    final = _toposort(final)
    del graph.node[:]
    graph.node.extend(final)
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output} | _subgraph_reads(graph)
    keep = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    keep_vi = [v for v in graph.value_info if v.name not in {t for L in layers for t in L.points}]
    del graph.value_info[:]
    graph.value_info.extend(keep_vi)
    return m


def _subgraph_reads(graph) -> set:
    out = set()
    for n in graph.node:
        for a in n.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                out |= {i for x in sub.node for i in x.input} | _subgraph_reads(sub)
    return out


def _toposort(nodes: List[onnx.NodeProto]) -> List[onnx.NodeProto]:
    """``nodes`` in an order where each reads what is written before it, the given order kept where
    it is one already (Kahn's algorithm, earliest ready node first)."""
    import heapq
    writer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{writer[i] for i in n.input if i in writer and writer[i] != k} for k, n in enumerate(nodes)]
    readers: Dict[int, List[int]] = {}
    for k, d in enumerate(deps):
        for j in d:
            readers.setdefault(j, []).append(k)
    count = [len(d) for d in deps]
    ready = [k for k, c in enumerate(count) if c == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        k = heapq.heappop(ready)
        out.append(nodes[k])
        for r in readers.get(k, []):
            count[r] -= 1
            if count[r] == 0:
                heapq.heappush(ready, r)
    if len(out) != len(nodes):
        raise MrvlError("the calibrated dynamic-int8 rewrite made a cycle", hint="report this model")
    return out


def _opset13(model: onnx.ModelProto) -> onnx.ModelProto:
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), MIN_OPSET)
    if opset >= MIN_OPSET:
        return model
    from onnx import version_converter
    try:
        out = version_converter.convert_version(model, MIN_OPSET)
    except Exception as exc:  # noqa: BLE001 - the converter raises several kinds
        raise MrvlError(f"the dynamic-int8 model is opset {opset}; per-channel QuantizeLinear needs opset "
                        f">= {MIN_OPSET} and onnx's version converter failed ({type(exc).__name__}: {exc})",
                        hint="re-export the float model at opset 13 or later before quantize_dynamic") from None
    out.ir_version = max(out.ir_version, 8)
    return out


def _snr(ref: np.ndarray, got: np.ndarray) -> float:
    num, den = float(np.sum(ref.astype(np.float64) ** 2)), float(np.sum((ref.astype(np.float64) - got) ** 2))
    return math.inf if den == 0 else (10 * math.log10(num / den) if num > 0 else -math.inf)


def calibrate(model: onnx.ModelProto, calibration, *, calibration_method: str = "minmax",
              fp16_layers: Sequence[str] = (), input_shapes=None):
    """The static QDQ model of the dynamic-int8 ``model`` with activation scales from ``calibration``,
    and ``info`` for ``report.quantization``. Returns ``quantize.Quantized``."""
    from . import Quantized
    if calibration_method != "minmax":
        raise UsageError(f"calibration_method='{calibration_method}' on a dynamic-int8 model: its layers quantize "
                         f"with the run-time min / max, which the calibration replaces by the min / max over the "
                         f"samples", hint="leave calibration_method at 'minmax'")
    samples, source = load_calibration(calibration, model, input_shapes)
    g = _Graph(_opset13(model))
    layers, reasons = _take(g, fp16_layers)
    derived = {f"{L.node.name}/matmul": (L.y, L.bias) for L in layers if L.bias is not None and not L.conv}
    tensors = sorted(({L.x for L in layers} | {t for L in layers for t in L.points}) - set(derived))
    ranges, ref_outs = _ranges(g.model, tensors, samples, derived) if layers else ({}, [])
    qp = {t: _qparams(*r) for t, r in ranges.items()}
    static = _rewrite(g.model, g, layers, qp) if layers else g.model
    try:
        onnx.checker.check_model(static)
    except onnx.checker.ValidationError as exc:
        raise MrvlError(f"the calibrated dynamic-int8 rewrite wrote an invalid model: {exc}",
                        hint="report this model; convert it without calibration (fp16 layers)") from None
    out_snr = _output_snr(static, samples, ref_outs) if layers else {}
    records = []
    for L in layers:
        s, z = qp[L.x]
        outs = ", ".join(f"'{t}' {float(qp[t][0]):.4g} / {int(qp[t][1])}" for t in L.points)
        records.append({"layer": L.node.name, "op_type": L.node.op_type, "precision": "int8",
                        "input": L.x, "input_scale": float(s), "input_zero_point": int(z),
                        "weights": f"int8, {'per channel' if L.ws.size > 1 else 'per tensor'} (as quantize_dynamic "
                                   f"wrote them)",
                        "replaces": [n.name for n in L.removed] + ([L.dql.name] if L.dql is not None else []),
                        "reason": f"{NOTE_INT8}: input '{L.x}' scale {float(s):.4g} zero point {int(z)} "
                                  f"(range {ranges[L.x][0]:.4g}..{ranges[L.x][1]:.4g} over {len(samples)} "
                                  f"samples); output(s) {outs}"})
    for name, (why, nodes) in reasons.items():
        n = next(x for x in g.model.graph.node if x.name == name)
        records.append({"layer": name, "op_type": n.op_type, "precision": "fp16", "nodes": nodes or [name],
                        "reason": f"dynamic int8 kept as an fp16 layer with dequantized weights: {why}"})
    info = {"mode": "dynamic-calibrated", "method": "minmax", "samples": len(samples),
            "calibration": {"source": source, "samples": len(samples)},
            "activation_type": "uint8 (asymmetric, per tensor; DynamicQuantizeLinear's formula on the calibrated "
                               "range)",
            "weight_type": "int8 (the dynamic model's, per tensor or per channel)",
            "library": "onnx_mrvl.quantize.dynamic_calibrated (ranges: onnxruntime run of the dynamic model)",
            "fp16_layers": list(fp16_layers or ()), "rounds": 1,
            "int8_layers": len(layers), "layers_total": len(records),
            "output_snr_db": out_snr, "layers": records}
    return Quantized(static, info)


def _output_snr(static: onnx.ModelProto, samples, ref_outs) -> Dict[str, object]:
    """SNR (dB) of each output of the static model against the dynamic model's, over the samples."""
    import onnxruntime as ort
    sess = ort.InferenceSession(static.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in static.graph.output]
    num = {k: 0.0 for k in names}
    den = {k: 0.0 for k in names}
    for feed, ref in zip(samples, ref_outs):
        for k, r, y in zip(names, ref, sess.run(names, feed)):
            if np.asarray(r).dtype.kind != "f":
                continue
            r64 = np.asarray(r, np.float64)
            num[k] += float(np.sum(r64 ** 2))
            den[k] += float(np.sum((r64 - y) ** 2))
    return {k: ("inf" if den[k] == 0 else round(10 * math.log10(num[k] / den[k]), 2) if num[k] > 0 else None)
            for k in names}


def quantize_or_calibrate(model: onnx.ModelProto, *, quantize: str = "float16", calibration=None,
                          calibration_method: str = "minmax", fp16_layers: Sequence[str] = (),
                          snr_budget_db: float = 30.0, input_shapes=None):
    """The quantize step of ``convert()``: a dynamic-int8 model with ``calibration`` (and ``quantize``
    "float16" or "int8") -> ``calibrate``; anything else -> ``quantize.quantize_model`` (a dynamic
    model without calibration stays as it is: fp16 layers with dequantized weights)."""
    from . import quantize_model
    if calibration is not None and is_dynamic(model):
        if quantize not in ("float16", "int8"):
            raise UsageError(f"quantize='{quantize}' on a dynamic-int8 model (quantize_dynamic's "
                             f"DynamicQuantizeLinear / MatMulInteger / ConvInteger)",
                             hint="pass calibration=... alone (or quantize='int8'): its layers become int8 with "
                                  "calibrated activation scales; or quantize the float model instead")
        return calibrate(model, calibration, calibration_method=calibration_method, fp16_layers=fp16_layers,
                         input_shapes=input_shapes)
    return quantize_model(model, quantize=quantize, calibration=calibration, calibration_method=calibration_method,
                          fp16_layers=fp16_layers, snr_budget_db=snr_budget_db, input_shapes=input_shapes)


def annotate(decisions, info: dict) -> None:
    """The decisions of the rewritten layers say they are int8 with calibrated scales; those of
    dynamic layers left fp16 say why (instead of 'no calibration'). A layer made int8 that did
    not end as an int8 accelerator layer gets that in its record."""
    for r in info.get("layers", []):
        d = decisions.get(r["layer"])
        if r["precision"] == "int8":
            if d is None:
                continue
            if d.placement != "accelerator" or d.precision != "int8":
                r["precision"] = "fp16" if d.placement == "accelerator" else "cpu"
                r["reason"] = f"rewritten to int8 QDQ, but the int8 import did not take it: {d.reason}"
                continue
            if NOTE_INT8 not in d.reason:
                d.reason = f"{NOTE_INT8} (input scale {r['input_scale']:.4g}, zero point {r['input_zero_point']}); " \
                           f"{d.reason}"
        else:
            why = r["reason"].split(": ", 1)[1]
            for name in r.get("nodes", [r["layer"]]):
                dd = decisions.get(name)
                if dd is not None and "(no calibration)" in dd.reason:
                    dd.reason = dd.reason.replace("(no calibration)", f"(calibration given, kept: {why})")


__all__ = ["is_dynamic", "calibrate", "quantize_or_calibrate", "annotate", "NOTE_INT8"]
