"""Float chains between int8 values and quantizers run in fp32 (docs/fusion.md "fp32 chains").

Toolkits that quantize only some tensors (Intel Neural Compressor's QDQ YOLOv8: the SiLU's
``Mul(DQ(conv), DQ(sigmoid))``, the C2f ``Split``, the residual ``Add`` and the ``Concat`` float, only
the Concat's output quantized; PP-OCRv4 det's ``Q(Concat(Resize(x + x * s)))``) leave short DAGs of
float element-wise and data-movement ops between DequantizeLinears and the next QuantizeLinears.
onnxruntime computes them in fp32 on the dequantized values and quantizes the result; as fp16 layers
the quantizer read fp16-rounded products and sums and codes at a near-tie flipped.

Rule: a float ``Mul2D`` / ``Sum2D`` (no activation, or one exact in fp32: Relu, Clip, LeakyRelu)
or ``Softmax`` (YOLOv8's DFL: the box head's bins of concatenated dequantized convs, a Softmax, then
the DFL conv's Q) and the data-movement layers around it (Slice2D, Concat, nearest Resize,
reshapes; MaxPool / GlobalMaxPool, which select values; Transposes fuse folds into the layout are
looked through) form a chain when every data input
of a chain layer is an int8 layer's output (its codes, dequantized exactly in fp32) or another chain
layer's, and every reader of a chain layer's output is another chain layer, a QuantizeLinear an
accelerator layer absorbed (an int8 layer's input quantization, a Requantize, an int8 Concat) or an
``int8_out`` layer (fp32 math, then its own Q: PP-LCNet's SE ``Q(x * HardSigmoid(se))``), never a
model output.
A ``Div`` of two tensors (fuse's Mul2D with ``divide`` = 1; INC's ``DQ(a) / (DQ(s) + 1)``) is a chain
layer like a product: IEEE division is correctly rounded, so the fp32 quotient is onnxruntime's bit for
bit; outside a chain it goes back to the CPU (the accelerator has no fp16 division).
The arithmetic layers of a chain get ``precision`` "fp32": fp32 math on the fp32 values, no fp16
rounding; their outputs and the data movement of them are float32 tensors (emit/compile.py), so the
quantizer reads exactly what onnxruntime quantizes. A float group of element-wise ops of ONE int8
layer's output and scalar constants (PP-OCRv4 det's ``HardSigmoid(DQ(se))``, an fp16 Mul2D with that
activation), also through other such groups (PP-LCNetV3's affine -> written-out HardSwish: those only
it reads join it), joins a chain as an fp32 **Lookup**: its float32 table [1, 256] holds onnxruntime's
float ops on each code's dequantized value (lookup_table.value_table), exact by construction.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ..graph_index import GraphIndex
from .groups import Group
from .lookup_table import value_table
from .qconst import constant_value
from .qdq import activation_dq, qparams
from .qdq_lookup import ELEMENTWISE

PRECISION = "fp32"
ARITH = ("Mul2D", "Sum2D", "Softmax")
MOVES = ("Slice2D", "Concat", "Resize", "Reshape", "Flatten", "Squeeze",   # copy values
         "MaxPool2D", "GlobalMaxPool2D")                                     # select one of them
# activations whose fp32 result is onnxruntime's bit for bit (a select, a clamp, one fp32 product):
# the simulator's fp32 chain applies them to the fp32 sum / product (int8_out_binary)
EXACT_ACTS = ("none", "relu", "clamp", "leaky_relu")
EXACT_OUT = ("int8", "int8_out")   # layers whose output holds int8 codes (dequantized exactly in fp32)
DIV_REASON = ("no accelerator op for Div of two tensors outside an fp32 chain (the Mul2D divide mode is fp32 only: "
              "int8 values in, its result quantized by an accelerator layer)")
NOTE = ("fp32 layer (float op between int8 values and quantizers: computed in fp32 as onnxruntime does, "
        "its result quantized by the reader)")


def _outputs(grp: Group) -> List[str]:
    """A group's output tensors (a Slice2D of a Split has one per slice)."""
    return [s[0] for s in grp.attrs["slices"]] if grp.attrs.get("slices") else [grp.output]


def _candidate(grp: Group) -> bool:
    a = grp.attrs
    if a.get("precision") or grp.weights and grp.op != "Mul2D" and grp.op != "Sum2D":
        return False   # int8 / int8-in / int8_out layers; a Concat or Resize with fp16 constants
    if grp.op == "Softmax":   # onnxruntime's fp32 Softmax (MLAS), not a LogSoftmax / a NaN fill
        return not a.get("log") and "nan_fill" not in a
    if a.get("activation", "none") not in EXACT_ACTS:
        return False
    return grp.op in ARITH or grp.op in MOVES and (grp.op != "Resize" or a.get("mode", "nearest") == "nearest")


def _code_source(g: GraphIndex, grp: Group, producer: Dict[str, Group], index: Dict[str, int], memo: dict):
    """(t, nodes) when ``grp``'s output is a function of one int8 layer's output ``t`` alone: the
    element-wise ONNX nodes (scalar constants only) of ``grp`` and of the float groups between ``t``
    and it, in graph order; else None."""
    if id(grp) in memo:
        return memo[id(grp)]
    memo[id(grp)] = None
    if grp.attrs.get("precision") or not grp.inputs:
        return None
    sources, nodes = set(), []
    for i in grp.inputs:
        src = producer.get(i)
        if src is not None and src.attrs.get("precision") in EXACT_OUT and i == src.output:
            sources.add(i)
            continue
        sub = _code_source(g, src, producer, index, memo) if src is not None else None
        if sub is None:
            return None
        sources.add(sub[0])
        nodes += [n for n in sub[1] if n not in nodes]
    if len(sources) != 1:
        return None
    t = sources.pop()
    inside = {t} | {n.output[0] for n in nodes}
    own = sorted(grp.nodes, key=lambda n: index.get(n.name, -1))
    for n in own:
        if n.op_type not in ELEMENTWISE or n.op_type in ("QuantizeLinear", "DequantizeLinear") or len(n.output) != 1:
            return None
        for i in n.input:
            if i and i not in inside and (constant_value(g, i) is None or np.size(constant_value(g, i)) != 1):
                return None
        inside.add(n.output[0])
    if own[-1].output[0] != grp.output:
        return None
    memo[id(grp)] = (t, sorted(nodes + own, key=lambda n: index.get(n.name, -1)))
    return memo[id(grp)]


def _table(g: GraphIndex, grp: Group, producer: Dict[str, Group], index, memo):
    """(t, the fp32 value table of ``grp``'s output for each code of ``t``) or None (``_code_source``)."""
    src = _code_source(g, grp, producer, index, memo)
    dq = activation_dq(g, src[0]) if src else None
    if dq is None or isinstance(qparams(g, dq), str):
        return None
    table = value_table(g, src[1], src[0], dq)
    return None if isinstance(table, str) or not np.isfinite(table).all() else (src[0], table)


def mark_fp32_chains(g: GraphIndex, groups: List[Group], decisions=None) -> List[Group]:
    """Sets ``precision`` "fp32" on the arithmetic layers of every chain and makes its one-input
    element-wise groups fp32 Lookups (module docstring); a Div of two tensors (Mul2D ``divide``) no
    chain takes goes back to the CPU (recorded in ``decisions``). Returns the groups."""
    if not any(grp.attrs.get("precision") in EXACT_OUT for grp in groups):
        return _drop_divisions(groups, decisions)   # no int8 codes to start a chain from (a float model)
    owner: Dict[str, Group] = {x.name: grp for grp in groups for x in grp.nodes}
    producer = {t: grp for grp in groups for t in _outputs(grp)}
    chain = {id(grp): grp for grp in groups if _candidate(grp)}
    index, memo, tables = {n.name: k for k, n in enumerate(g.nodes)}, {}, {}
    for grp in groups:   # a one-input function of codes is a table, also with an exact activation
        if id(grp) not in chain or grp.attrs.get("activation", "none") not in ("none", "relu"):
            table = _table(g, grp, producer, index, memo)
            if table is not None:
                tables[id(grp)] = table
                chain[id(grp)] = grp
    changed = True
    while changed:
        changed = False
        for key, grp in list(chain.items()):
            exact = key in tables or _inputs_exact(g, grp, producer, owner, chain)
            if not exact or not _read_by_quantizers(g, grp, owner, chain):
                del chain[key]
                changed = True
    lookups = {key: _as_lookup(g, grp, *tables[key]) for key, grp in chain.items() if key in tables}
    dead = _absorbed(g, groups, lookups, owner)
    out = []
    for grp in groups:
        if id(grp) in dead:
            continue
        if id(grp) in lookups:
            grp = lookups[id(grp)]
        elif id(grp) in chain and grp.op in ARITH:
            grp.attrs["precision"] = PRECISION
            grp.note = NOTE
        out.append(grp)
    return _drop_divisions(out, decisions)


def _drop_divisions(groups: List[Group], decisions) -> List[Group]:
    """The groups without the Divs of two tensors outside fp32 chains (no fp16 division)."""
    out = []
    for grp in groups:
        if grp.attrs.get("divide") and grp.attrs.get("precision") != PRECISION:
            if decisions is not None:
                for n in grp.nodes:
                    decisions.record(n.name, n.op_type, reason=DIV_REASON)
            continue
        out.append(grp)
    return out


def _as_lookup(g: GraphIndex, grp: Group, t: str, table) -> Group:
    qi = qparams(g, activation_dq(g, t))
    return Group("Lookup", "mrvl.lookup", list(grp.nodes), [t], grp.output,
                 dict(precision=PRECISION, in_scale=qi[0], in_zero_point=qi[1], in_type=qi[2]), {"T": table}, note=NOTE)


def _absorbed(g: GraphIndex, groups: List[Group], lookups: Dict[int, Group], owner) -> set:
    """The float groups between a code and an fp32 Lookup that nothing else reads any more: their
    nodes join the (first) Lookup that computes them; returns their ids."""
    converted = {id(x) for x in groups if id(x) in lookups}
    dead: set = set()
    changed = True
    while changed:
        changed = False
        for grp in groups:
            if id(grp) in dead or id(grp) in converted or grp.attrs.get("precision"):
                continue
            readers = [owner.get(r.name) for t in _outputs(grp) for r in g.consumers.get(t, [])]
            if not readers or any(t in g.output_set for t in _outputs(grp)):
                continue
            if all(r is not None and (id(r) in converted or id(r) in dead) for r in readers):
                dead.add(id(grp))
                changed = True
    for grp in groups:   # each dead group's nodes join a Lookup downstream of it
        if id(grp) in dead:
            target = next(lookups[k] for k in _downstream(g, grp, owner, converted, dead))
            target.nodes += [n for n in grp.nodes if n not in target.nodes]
    return dead


def _downstream(g: GraphIndex, grp: Group, owner, converted, dead):
    """The ids of the converted groups reached from ``grp`` through dead groups."""
    todo, seen = [grp], set()
    while todo:
        x = todo.pop()
        for t in _outputs(x):
            for r in g.consumers.get(t, []):
                h = owner[r.name]
                if id(h) in seen:
                    continue
                seen.add(id(h))
                if id(h) in converted:
                    yield id(h)
                elif id(h) in dead:
                    todo.append(h)


def _through_transposes(g: GraphIndex, t: str, owner: Dict[str, Group]) -> str:
    """``t``, or the tensor a chain of Transposes no group holds (relabellings of the storage,
    fuse's aliases) reads."""
    n = g.producer.get(t)
    while n is not None and n.op_type == "Transpose" and n.name not in owner:
        t = n.input[0]
        n = g.producer.get(t)
    return t


def _inputs_exact(g: GraphIndex, grp: Group, producer: Dict[str, Group], owner, chain) -> bool:
    for t in grp.inputs:
        t = _through_transposes(g, t, owner)
        src = producer.get(t)
        if src is None or not (id(src) in chain or src.attrs.get("precision") in EXACT_OUT and t == src.output):
            return False
    return True


def _read_by_quantizers(g: GraphIndex, grp: Group, owner: Dict[str, Group], chain) -> bool:
    todo = list(_outputs(grp))
    while todo:
        t = todo.pop()
        if t in g.output_set:
            return False
        for r in g.consumers.get(t, []):   # none: a Split's unused part
            holder = owner.get(r.name)
            if holder is None and r.op_type == "Transpose":   # a relabelling (fuse's alias): its readers
                todo.append(r.output[0])
            elif holder is None or not (id(holder) in chain or r.op_type == "QuantizeLinear"
                                        or holder.attrs.get("precision") == "int8_out"):
                return False   # int8_out: a float layer computing in fp32 before its own Q
    return True
