"""What the com.microsoft contrib-op rules share (no rule): the domain test, a small node writer that
tracks shapes, the layer norm (with the opset 17 raise) and the attention core they decompose into.

The core is written the way fuse's attention patterns expect it (docs/fusion.md "Attention"):
``Reshape [B,S,N,h] -> Transpose`` per head tensor (K to ``[B,N,h,L]``), ``MatMul(Q, K^T)``,
``Mul(scale)``, ``Add`` of the additive masks / attention bias, ``Softmax(axis=-1)``,
``MatMul(P, V)``, ``Transpose(0,2,1,3) -> Reshape [B,S,N*hv]``.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np
from onnx import TensorProto, helper

from .. import opset_bump, shapes
from .base import Match, attr

MS = "com.microsoft"
FLOAT = TensorProto.FLOAT
LN_OPSET = 17
# ORT registers these in the default domain as its own ops (no ONNX schema below 17 / at all);
# the contrib rules rewrite them, so they do not block raising the opset
ORT_DEFAULT_DOMAIN_OPS = {"LayerNormalization", "SimplifiedLayerNormalization"}
REPORT_SKIPS = "onnxruntime contrib op"     # the contrib rules' tag for the nodes they leave (legalize.skips)


def match(node, g) -> Optional[Match]:
    """The contrib rules' ``match``: a node of the rule's OPS in onnxruntime's com.microsoft domain."""
    return Match([node]) if node.domain == MS else None


def float32_check(check_node: Callable) -> Callable:
    """A contrib rule's ``check(m, g, target)`` from ``check_node(m, g, n)`` (n: the matched node),
    which runs when every float input is float32 (else ``not_float32``'s reason)."""
    def check(m: Match, g, target) -> Optional[str]:
        return not_float32(g, m.node) or check_node(m, g, m.node)
    check.__doc__ = check_node.__doc__
    return check


def shape_of(g, name: str):
    """Static shape of ``name``; tensors after a contrib op (which ONNX inference does not know) are
    measured with one onnxruntime run of the current graph per sweep (``shapes.ort_fill``)."""
    s = g.shape(name)
    if s is None and name:
        measure(g)
        s = g.shape(name)
    return s


def not_float32(g, node) -> Optional[str]:
    """A reason when a float input of ``node`` is not float32 (the decompositions write float32
    constants; float16 graphs are float32 after legalize's step 5 except inside control flow)."""
    for t in node.input:
        dt = g.dtype(t) if t else None
        if dt in (TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16):
            return f"{node.op_type} '{node.name}': input '{t}' is {TensorProto.DataType.Name(dt).lower()}, not float32"
    return None


def measure(g) -> None:
    # the driver's inference replaces the shapes dict each sweep: one probe per sweep (the dict itself
    # is kept and compared, not its id, which a later dict may reuse)
    if g.__dict__.get("contrib_probe") is g.shapes:
        return
    g.__dict__["contrib_probe"] = g.shapes
    nodes = g.toposort()
    missing = [o for n in nodes for o in n.output if o and g.shape(o) is None]
    if not missing:
        return
    used_names = {i for n in nodes for i in n.input}
    probe = helper.make_model(helper.make_graph(nodes, "probe", list(g.model.graph.input), [],
                                                [t for k, t in g.inits.items() if k in used_names]),
                              opset_imports=list(g.model.opset_import))
    probe.ir_version = min(max(g.model.ir_version, 7), 10)
    shapes.ort_fill(probe, missing, g)


def is_ms(node, *ops) -> bool:
    return node.domain == MS and (not ops or node.op_type in ops)


def used(g, node, idx: int) -> bool:
    return len(node.output) > idx and bool(node.output[idx]) and g.used(node.output[idx])


def float_attr(node, name: str, default: float) -> float:
    v = attr(node, name)
    return float(default if v is None else v)


def opset_reason(g) -> Optional[str]:
    """Why the model cannot move to opset 17 for a LayerNormalization, or None (already there)."""
    old = g.opset
    if old >= LN_OPSET:
        return None
    key = (g.edits, old)   # one scan per state of the graph (every contrib node of a sweep asks)
    cached = g.__dict__.get("contrib_opset_reason")
    if cached is not None and cached[0] == key:
        return cached[1]
    why = opset_bump.reason(g, LN_OPSET, skip=ORT_DEFAULT_DOMAIN_OPS, subgraphs=False)
    g.__dict__["contrib_opset_reason"] = (key, why)
    return why


def raise_opset(g) -> None:
    if g.opset < LN_OPSET:
        opset_bump.raise_to(g, LN_OPSET)


class Writer:
    """Adds standard nodes next to ``near`` with provenance ``origin``; records output shapes."""

    def __init__(self, g, near, origin: Sequence[str]):
        self.g, self.near, self.origin = g, near, list(origin)

    def op(self, op_type: str, inputs, shape=None, *, out: Optional[str] = None, tag: str = "",
           dtype: int = FLOAT, outputs: int = 1, **attrs) -> str:
        g = self.g
        tag = tag or op_type.lower()
        outs = [out or g.fresh(f"{self.near.name}/{tag}")] + [g.fresh(f"{self.near.name}/{tag}_{k}")
                                                                for k in range(1, outputs)]
        g.make(op_type, list(inputs), outs, near=self.near, origin=self.origin,
               name=f"{self.near.name}/{tag}", **attrs)
        if shape is not None:
            g.set_shape(outs[0], shape, dtype)
        return outs[0]

    def const(self, tag: str, value, dtype=np.float32) -> str:
        return self.g.add_const(f"{self.near.name}/{tag}", np.asarray(value, dtype=dtype))

    def reshape(self, x: str, shape, tag: str, dtype: int = FLOAT, out: Optional[str] = None) -> str:
        return self.op("Reshape", [x, self.const(f"{tag}_shape", list(shape), np.int64)], shape, tag=tag,
                       dtype=dtype, out=out)

    def layer_norm(self, x: str, shape, gamma: str, beta: str, eps: float, *, out: Optional[str] = None,
                   stats: Sequence[str] = ()) -> str:
        """``LayerNormalization(x, gamma[, beta], axis=-1, epsilon)``; ``stats``: names for its Mean
        and InvStdDev outputs (used ones only, "" for none)."""
        raise_opset(self.g)
        o = out or self.g.fresh(f"{self.near.name}/layernorm")
        outs = [o] + list(stats)
        while outs and not outs[-1]:
            outs.pop()
        self.g.make("LayerNormalization", [x, gamma] + ([beta] if beta else []), outs, near=self.near,
                    origin=self.origin, name=f"{self.near.name}/layernorm", axis=-1, epsilon=float(eps))
        self.g.set_shape(o, shape, FLOAT)
        return o

    def rms_norm(self, x: str, shape, gamma: str, eps: float, *, out: Optional[str] = None) -> str:
        """``x / Sqrt(ReduceMean(x * x, -1) + eps) * gamma`` (ORT's SimplifiedLayerNormalization), written
        out as the exporters write RMSNorm: fuse's ``rmsnorm`` takes the form as the Mrvl LayerNorm with
        ``rms`` = 1 (earlier: LayerNormalization of ``[x, -x]``, exact up to the rounding of its zero mean,
        and twice the width)."""
        red = list(shape[:-1]) + [1]
        sq = self.op("Mul", [x, x], shape, tag="square")
        ms = self.op("ReduceMean", [sq, self.const("axes", [-1], np.int64)] if self.g.opset >= 18 else [sq],
                     red, tag="mean_square", keepdims=1, **({} if self.g.opset >= 18 else {"axes": [-1]}))
        rms = self.op("Sqrt", [self.op("Add", [ms, self.const("eps", eps)], red, tag="add_eps")], red, tag="rms")
        y = self.op("Div", [x, rms], shape, tag="normalize")
        return self.op("Mul", [y, gamma], shape, tag="gamma", out=out)


def key_mask(w: Writer, mask: str, B: int, S: int, L: int, fill: float) -> Optional[str]:
    """The additive mask (0 kept, ``fill`` masked) of an attention's mask input, shaped to broadcast
    over [B, N, S, L]: raw 0/1 [B, L] or [B, S, L] (kept where > 0), right-padding ends [B], ends and
    starts [2B] (onnxruntime's PrepareMask). None for other forms."""
    g = w.g
    shape = g.shape(mask)
    if shape is None:
        return None
    memo = g.__dict__.setdefault("contrib_masks", {})   # one mask per (input, sizes, fill): layers share it
    key = (mask, B, S, L, float(fill))
    if key in memo and memo[key] in g.producer:
        return memo[key]
    memo[key] = _key_mask(w, mask, shape, B, S, L, fill)
    return memo[key]


def _key_mask(w: Writer, mask: str, shape, B: int, S: int, L: int, fill: float) -> Optional[str]:
    g = w.g
    dt = g.dtype(mask)
    if len(shape) in (2, 3) and tuple(shape) in ((B, L), (B, S, L)):
        keep = w.op("Greater", [mask, w.const("zero", 0, _np(dt))], shape, tag="mask_keep", dtype=TensorProto.BOOL)
        target = [B, 1, 1, L] if len(shape) == 2 else [B, 1, S, L]
    elif len(shape) == 1 and shape[0] in (B, 2 * B):
        pos = w.const("key_positions", np.arange(L).reshape(1, L), _np(dt))
        end = w.op("Slice", [mask, w.const("s0", [0], np.int64), w.const("s1", [B], np.int64)], [B], tag="mask_end",
                   dtype=dt) if shape[0] == 2 * B else mask
        end = w.reshape(end, [B, 1], "mask_end_col", dtype=dt)
        keep = w.op("Less", [pos, end], [B, L], tag="mask_before_end", dtype=TensorProto.BOOL)
        if shape[0] == 2 * B:
            start = w.op("Slice", [mask, w.const("s2", [B], np.int64), w.const("s3", [2 * B], np.int64)], [B],
                         tag="mask_start", dtype=dt)
            start = w.reshape(start, [B, 1], "mask_start_col", dtype=dt)
            after = w.op("GreaterOrEqual", [pos, start], [B, L], tag="mask_after_start", dtype=TensorProto.BOOL)
            keep = w.op("And", [keep, after], [B, L], tag="mask_keep", dtype=TensorProto.BOOL)
        target = [B, 1, 1, L]
    else:
        return None
    # HF's form, which fuse takes whatever the fill (fuse/masks.py: a fill beyond fp16 saturates to
    # -32768 before a Softmax): Reshape -> Cast -> (1 - keep) * fill, read by the scores' Add
    keep = w.reshape(keep, target, "mask_heads", dtype=TensorProto.BOOL)
    f = w.op("Cast", [keep], target, tag="mask_float", to=FLOAT)
    inv = w.op("Sub", [w.const("one", 1.0), f], target, tag="mask_invert")
    return w.op("Mul", [inv, w.const("fill", fill)], target, tag="mask_fill")


def causal_mask(w: Writer, S: int, L: int) -> str:
    """[1, 1, S, L] constant: float32's lowest where key j > query i, 0 elsewhere (no past state: the
    CPU kernel's ``past_sequence_length + i + 1``, also for a cross attention with L != S).
    onnxruntime (1.32, measured) gives those keys weight 0 whatever ``mask_filter_value`` is (a
    -10000 there was off by 114% of max|y| on scores spanning 2.5e4); fuse saturates the constant to
    -32768 when a Softmax reads the Add alone (docs/fusion.md "Masks and fp16"): add it last."""
    m = np.triu(np.ones((S, L), np.float32), k=1) * np.finfo(np.float32).min
    return w.const("causal_mask", m.reshape(1, 1, S, L))


def attention_core(w: Writer, q: str, k: str, v: str, *, B: int, S: int, L: int, N: int, hq: int, hv: int,
                   scale: float, adds: List[str], out: str, kv_heads: bool = False) -> str:
    """softmax(Q K^T * scale + sum(adds)) V with heads: Q [B,S,N*hq], K [B,L,N*hq], V [B,L,N*hv]
    (``kv_heads``: K [B,N,L,hq], V [B,N,L,hv]) -> ``out`` [B,S,N*hv]."""
    qh = w.op("Transpose", [w.reshape(q, [B, S, N, hq], "q_heads")], [B, N, S, hq], tag="q_transpose",
              perm=[0, 2, 1, 3])
    if kv_heads:
        kh = w.op("Transpose", [k], [B, N, hq, L], tag="k_transpose", perm=[0, 1, 3, 2])
        vh = v
    else:
        kh = w.op("Transpose", [w.reshape(k, [B, L, N, hq], "k_heads")], [B, N, hq, L], tag="k_transpose",
                  perm=[0, 2, 3, 1])
        vh = w.op("Transpose", [w.reshape(v, [B, L, N, hv], "v_heads")], [B, N, L, hv], tag="v_transpose",
                  perm=[0, 2, 1, 3])
    s = w.op("MatMul", [qh, kh], [B, N, S, L], tag="qk")
    s = w.op("Mul", [s, w.const("scale", scale)], [B, N, S, L], tag="scale")
    for k_, a in enumerate(adds):
        s = w.op("Add", [s, a], [B, N, S, L], tag=f"mask_add{k_}")
    p = w.op("Softmax", [s], [B, N, S, L], tag="softmax", axis=-1)
    o = w.op("MatMul", [p, vh], [B, N, S, hv], tag="pv")
    o = w.op("Transpose", [o], [B, S, N, hv], tag="out_transpose", perm=[0, 2, 1, 3])
    return w.reshape(o, [B, S, N * hv], "out_merge", out=out)


def _np(dt):
    return helper.tensor_dtype_to_np_dtype(dt or TensorProto.INT32)


__all__ = ["MS", "FLOAT", "REPORT_SKIPS", "Writer", "attention_core", "causal_mask", "key_mask", "is_ms", "used",
           "float_attr", "float32_check", "match", "opset_reason", "raise_opset", "shape_of", "measure", "not_float32"]
