"""The layers of a dynamic-int8 model (onnxruntime's ``quantize_dynamic``) that
``dynamic_calibrated.py`` rewrites as static int8 QDQ layers, and why the others stay dynamic
(legalize then gives them fp16 with dequantized weights). See docs/quantize.md "Dynamic int8 models".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import MrvlError

MS = "com.microsoft"
FAMILY = {("", "DynamicQuantizeLinear"), ("", "MatMulInteger"), ("", "ConvInteger"), (MS, "DynamicQuantizeMatMul"),
          (MS, "MatMulIntegerToFloat"), (MS, "DynamicQuantizeLSTM"), (MS, "QAttention")}
MIN_OPSET = 13
LAYER_OPS = {("", "MatMulInteger"), ("", "ConvInteger"), (MS, "DynamicQuantizeMatMul"), (MS, "MatMulIntegerToFloat")}


LSTM_FP16_REASON = ("DynamicQuantizeLSTM: fp16 with dequantized weights, no int8 recurrent layer by default (one "
                    "with a calibrated input scale measured farther from onnxruntime's dynamic run and from fp32; "
                    "quantize_options={'recurrent': 'int8'} makes it one)")


def dom(n) -> str:
    return "" if n.domain in ("", "ai.onnx") else n.domain


def is_dynamic(model: onnx.ModelProto) -> bool:
    """Whether ``model`` holds a node of onnxruntime's dynamic-int8 family."""
    return any((dom(n), n.op_type) in FAMILY for n in model.graph.node)


@dataclass
class Layer:
    node: onnx.NodeProto                        # MatMulInteger / ConvInteger / MatMulIntegerToFloat / DynamicQuantizeMatMul
    conv: bool
    x: str = ""                                 # the float input
    dql: Optional[onnx.NodeProto] = None        # its DynamicQuantizeLinear (None for DynamicQuantizeMatMul)
    removed: List[onnx.NodeProto] = field(default_factory=list)
    wq: Optional[np.ndarray] = None             # int8 weights
    ws: Optional[np.ndarray] = None             # float32 scale(s)
    wz: Optional[np.ndarray] = None             # int32 weight zero point(s) in the int8 range (None: 0)
    y: str = ""                                 # the float result the dynamic model computes (x * W, scaled)
    bias: Optional[np.ndarray] = None           # float32 [O]: int32 into a Conv / an Add after a fused MatMul
    add: Optional[onnx.NodeProto] = None        # the bias Add after a MatMul (kept, or folded into a Gemm)
    add_bias: Optional[np.ndarray] = None       # its constant [N]
    gemm: bool = False                          # a 2-D MatMul + bias written as one Gemm with an int32 bias
    points: List[str] = field(default_factory=list)   # float tensors quantized after the layer
    reason: Optional[str] = None


class Graph:
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
            elif p is not None and p.op_type == "Reshape" and dom(p) == "":
                a, s = self.const(p.input[0]), self.const(p.input[1])
                if a is not None and s is not None and 0 not in s.tolist():
                    v = a.reshape([int(d) for d in s])
        self.consts[name] = v
        return v

    def only_user(self, t: str, op: str) -> Optional[onnx.NodeProto]:
        u = self.users.get(t, [])
        if len(u) == 1 and t not in self.outputs and u[0].op_type == op and dom(u[0]) == "":
            return u[0]
        return None


def _inp(n, k: int) -> str:
    return n.input[k] if len(n.input) > k else ""


def _weights(g: Graph, L: Layer, w: str, wz: str, scale: np.ndarray) -> Optional[str]:
    """Sets ``L.wq`` (int8 codes), ``L.ws`` and, for weights whose ``W_q - z`` needs 9 bits,
    ``L.wz`` (their zero points), or returns why not."""
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
    if v.min() >= -128 and v.max() <= 127:   # recoded exactly: symmetric int8 codes
        L.wq, L.ws = v.astype(np.int8), s
        return None
    # W_q - z beyond int8 (quantize_dynamic's asymmetric QUInt8 weights): int8 codes with a weight
    # zero point (uint8 as q - 128 with z - 128), which the int8 layer takes (docs/fusion.md "int8")
    off = 128 if q.dtype == np.uint8 else 0
    L.wq, L.ws, L.wz = (q.astype(np.int32) - off).astype(np.int8), s, (zz - off).astype(np.int32)
    return None


def _dql_of(g: Graph, n, q_idx: int, zp_idx: int):
    p = g.producer.get(_inp(n, q_idx))
    if p is None or p.op_type != "DynamicQuantizeLinear" or dom(p) or p.output[0] != n.input[q_idx]:
        return None
    if _inp(n, zp_idx) != (p.output[2] if len(p.output) > 2 else ""):
        return None
    return p


def _parse(g: Graph, n) -> Layer:
    L = Layer(n, conv=n.op_type == "ConvInteger")
    L.reason = _parse_reason(g, L)
    return L


def _parse_reason(g: Graph, L: Layer) -> Optional[str]:
    n = L.node
    if n.op_type in ("MatMulInteger", "ConvInteger"):
        acc, old = n.output[0], None
        add = g.only_user(acc, "Add") if L.conv else None
        if add is not None:   # onnxruntime's first quantizer: an integer bias added to the accumulator
            old = old_int_bias(g, add, acc)
            if old is None:
                return "its accumulator is read by an Add that is not the run-time integer bias of the old quantizer"
            acc = add.output[0]
        cast = g.only_user(acc, "Cast")
        mul = g.only_user(cast.output[0], "Mul") if cast is not None else None
        if mul is None or helper.get_attribute_value(next(a for a in cast.attribute if a.name == "to")) != 1:
            return "not followed by Cast(float) -> Mul(scale) alone (the quantize_dynamic form)"
        L.dql = _dql_of(g, n, 0, 2)
        if L.dql is None and g.const(n.input[0]) is not None:
            return "its input A is a constant (a product of constants: legalize folds it)"
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
        if old is not None:
            bias, chain, divisor = old
            dp = g.producer.get(divisor)
            if frozenset(dp.input if dp is not None and dp.op_type == "Mul" else [divisor]) != frozenset(sm.input):
                return "its integer bias is divided by another scale than the accumulator's"
            L.removed += [add] + chain + ([dp] if dp is not None and dp.op_type == "Mul" and
                                          len(g.users.get(divisor, [])) == 1 else [])
            L.bias = bias
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
        add = g.only_user(L.y, "Add") if L.bias is None else None
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
                L.add, L.add_bias = add, np.asarray(b, np.float32).reshape(-1)
                L.points.append(L.y)
                out = add.output[0]
    act = g.users.get(out, [])
    while len(act) == 1 and out not in g.outputs and act[0].op_type in ("Relu", "Clip") and dom(act[0]) == "" and \
            all(g.const(i) is not None for i in act[0].input[1:] if i):
        out = act[0].output[0]
        act = g.users.get(out, [])
    L.points.append(out)
    return None


def old_int_bias(g: Graph, add, acc: str):
    """(float bias [O], its nodes, the divisor tensor) when ``add`` adds to ``acc`` the run-time
    integer bias of onnxruntime's first quantizer, ``[Reshape](Cast(int32)(Floor | Round(Div(B,
    divisor))))`` (docs/legalize.md "dynamic_int_bias"), else None."""
    t = add.input[1] if add.input[0] == acc else add.input[0]
    chain = []
    p = g.producer.get(t)
    if p is not None and p.op_type == "Reshape" and dom(p) == "" and g.const(p.input[1]) is not None:
        chain.append(p)
        p = g.producer.get(p.input[0])
    if p is None or p.op_type != "Cast" or dom(p) or \
            helper.get_attribute_value(next(a for a in p.attribute if a.name == "to")) != onnx.TensorProto.INT32:
        return None
    chain.append(p)
    p = g.producer.get(p.input[0])
    if p is None or p.op_type not in ("Floor", "Round") or dom(p):
        return None
    chain.append(p)
    div = g.producer.get(p.input[0])
    b = g.const(div.input[0]) if div is not None and div.op_type == "Div" and dom(div) == "" else None
    if b is None or b.dtype != np.float32 or any(len(g.users.get(c.output[0], [])) != 1 for c in chain):
        return None
    return np.asarray(b, np.float32).reshape(-1), chain + [div], div.input[1]


def qparams(lo: float, hi: float) -> Tuple[np.float32, np.uint8]:
    """uint8 scale and zero point of the range [lo, hi] as DynamicQuantizeLinear computes them (fp32)."""
    lo, hi = np.float32(min(lo, 0.0)), np.float32(max(hi, 0.0))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.clip(np.float32(0) - lo / scale, 0, 255)
    return scale, np.uint8(np.rint(zp))


def take(g: Graph, fp16_layers: Sequence[str]) -> Tuple[List[Layer], Dict[str, str]]:
    """The layers to rewrite, and node name -> why a dynamic node stays fp16."""
    layers = [_parse(g, n) for n in g.model.graph.node if (dom(n), n.op_type) in LAYER_OPS]
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
        if (dom(n), n.op_type) == (MS, "DynamicQuantizeLSTM"):
            reasons[n.name] = (LSTM_FP16_REASON, [n.name])
    return [L for L in layers if L.reason is None], reasons


def prepared(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` at opset >= 13 whose nodes all have unique names (an unnamed node gets
    ``<op_type>_<index>``, as legalize names it): the rewrite and the decisions go by node names."""
    m = _opset13(model)
    if m is model:
        m = onnx.ModelProto()
        m.CopyFrom(model)
    taken = {n.name for n in m.graph.node if n.name}
    seen = set()
    for i, n in enumerate(m.graph.node):
        if not n.name or n.name in seen:
            base = n.name or f"{n.op_type}_{i}"
            name, k = base, 1
            while name in taken:
                name, k = f"{base}_{k}", k + 1
            n.name = name
            taken.add(name)
        seen.add(n.name)
    return m


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




DATA_MOVES = ("Flatten", "Reshape", "Squeeze", "Unsqueeze")
POOLS = ("GlobalAveragePool", "GlobalMaxPool", "MaxPool", "AveragePool")


def pool_points(g: Graph, layers: List[Layer]) -> List[str]:
    """``pool -> Flatten / Reshape -> layer`` (a CNN head): the pool's output and input get pairs too
    (the pool reads and writes int8 codes: an int8 layer, not an fp16 one between int8 layers)."""
    io = {i.name for i in g.model.graph.input} | {o.name for o in g.model.graph.output}
    removed = {n.name for L in layers for n in L.removed}
    out = []
    for L in layers:
        p = g.producer.get(L.x)
        if p is None or p.op_type not in DATA_MOVES or dom(p) or L.x in io:
            continue
        u = p.input[0]
        src = g.producer.get(u)
        if src is None or src.op_type not in POOLS or dom(src) or u in io or len(g.users.get(u, [])) != 1:
            continue
        v = src.input[0]
        for t, w in ((u, src), (v, g.producer.get(v))):
            if w is not None and w.name not in removed and t not in io and t not in out:
                out.append(t)
    return out


__all__ = ["MS", "FAMILY", "LAYER_OPS", "Layer", "Graph", "dom", "is_dynamic", "pool_points", "prepared", "qparams", "take"]
