"""ONNX LSTM / GRU / RNN -> one Mrvl recurrent layer (``opset_recurrent.py``).

    LSTM | GRU | RNN (layout 0 or 1, any direction)  ->  mrvl::LSTM | GRU | RNN  (X [T,B,I] -> Y [T,D,B,H])

Rule: the weights W, R (and B, initial_h, initial_c when given) are constant float32 initializers;
``sequence_lens`` is absent or constant and equal to T for every sequence (a full batch); no
peepholes, no ``input_forget``; every cell activation is one the vector unit computes (Sigmoid,
Tanh, Relu, HardSigmoid, LeakyRelu, when in ``target.activations``); only ``Y`` is read (``Y_h`` /
``Y_c`` unread); the per-step GEMM fits an FC layer (G*H and I+H <= ``max_fc_features``) and
T*B <= ``MAX_FC_ROWS``. Layout 1 ([B, T, I] -> [B, T, D, H]) is the same layer on the storage
[T, B, I] -> [T, D, B, H]: the materialisation asks the layout for X stored that way and records
Y as stored permuted, so a transpose around it is a relabelling or a block rotation in the region.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import onnx

from .._graph import GraphIndex, attr
from ..opset_recurrent import CELL_ACTIVATIONS, CELLS, USES_ALPHA, USES_BETA
from ..target import Target
from .groups import Group, _float_static
from .patterns import MAX_FC_ROWS

TARGET_NAMES = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "hardsigmoid": "hard_sigmoid",
                "leakyrelu": "leaky_relu"}   # cell activation -> its name in target.activations
X_STORED = (1, 0, 2)        # layout 1: logical [B, T, I] stored as [T, B, I]
Y_STORED = (1, 2, 0, 3)     # layout 1: logical [B, T, D, H] stored as [T, D, B, H]


@dataclass
class RecurrentGroup(Group):
    layout: int = 0


def _const_input(g: GraphIndex, n: onnx.NodeProto, i: int) -> Optional[str]:
    return n.input[i] if len(n.input) > i and n.input[i] else None


def _activations(n: onnx.NodeProto, cell: str, dirs: int, target: Target):
    """(names, alphas, betas) with one entry per activation, or the reason they cannot run."""
    default = list(CELLS[cell][1])
    names = [a.decode() if isinstance(a, bytes) else a for a in attr(n, "activations", [])] or default * dirs
    names = [x.lower() for x in names]
    if len(names) != len(default) * dirs:
        return f"{len(names)} activations for {dirs} direction(s) of an {cell} (expected {len(default) * dirs})"
    alphas, betas = list(attr(n, "activation_alpha", [])), list(attr(n, "activation_beta", []))
    out_a, out_b = [], []
    for x in names:
        if x not in CELL_ACTIVATIONS:
            return f"cell activation {x} (the vector unit computes {', '.join(sorted(CELL_ACTIVATIONS))})"
        if TARGET_NAMES[x] not in target.activations:
            return f"cell activation {x} is not in the target's activations"
        da, db = CELL_ACTIVATIONS[x][1]
        out_a.append(float(alphas.pop(0)) if x in USES_ALPHA and alphas else da)
        out_b.append(float(betas.pop(0)) if x in USES_BETA and betas else db)
    return names, out_a, out_b


def build(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """The recurrent group anchored at ``n`` or the reason it stays on the CPU."""
    cell = n.op_type
    gates = CELLS[cell][0]
    if not n.output or not n.output[0]:
        return f"{cell} without the sequence output Y (the layer writes Y)"
    for k, o in enumerate(n.output[1:], 1):
        if o and (g.consumers.get(o) or o in g.output_set):
            return (f"{cell} output {'Y_h' if k == 1 else 'Y_c'} is read (the accelerator layer writes "
                    f"the sequence Y only)")
    x, w, r = n.input[0], n.input[1], n.input[2]
    reason = _float_static(g, [x, n.output[0]])
    if reason:
        return reason
    names = {3: "B", 4: "sequence_lens", 5: "initial_h", 6: "initial_c", 7: "P"}
    for i, t in enumerate(n.input[1:], 1):
        if t and not g.is_const(t):
            return f"{names.get(i, 'W' if i == 1 else 'R')} is not a constant initializer"
    if _const_input(g, n, 7):
        return "LSTM peephole weights P (the layer has no peepholes)"
    if attr(n, "input_forget", 0):
        return "LSTM input_forget=1 (coupled input and forget gates)"
    layout = int(attr(n, "layout", 0))
    xs = g.shape(x)
    if len(xs) != 3:
        return f"input X of shape {xs} is not 3-D"
    steps, batch, feat = (xs[0], xs[1], xs[2]) if layout == 0 else (xs[1], xs[0], xs[2])
    direction = attr(n, "direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = 2 if direction == "bidirectional" else 1
    hid = int(attr(n, "hidden_size", 0) or 0)
    wv = np.asarray(g.const(w), dtype=np.float32)
    rv = np.asarray(g.const(r), dtype=np.float32)
    if g.elem_type(w) != onnx.TensorProto.FLOAT or g.elem_type(r) != onnx.TensorProto.FLOAT:
        return "weights are not float32"
    if not hid:
        hid = rv.shape[-1]
    if wv.shape != (dirs, gates * hid, feat) or rv.shape != (dirs, gates * hid, hid):
        return f"W {list(wv.shape)} / R {list(rv.shape)} do not fit {dirs} direction(s), hidden {hid}, input {feat}"
    seq = _const_input(g, n, 4)
    if seq is not None and not np.all(np.asarray(g.const(seq)).reshape(-1) == steps):
        return f"sequence_lens {np.asarray(g.const(seq)).reshape(-1).tolist()} are not all {steps} (padded batch)"
    acts = _activations(n, cell, dirs, target)
    if isinstance(acts, str):
        return acts
    if gates * hid > target.max_fc_features or feat + hid > target.max_fc_features:
        return f"per-step GEMM [{feat + hid} -> {gates * hid}] exceeds the FC limit {target.max_fc_features}"
    if steps * batch > MAX_FC_ROWS:
        return f"{steps} steps x batch {batch} exceed the limit {MAX_FC_ROWS}"
    weights = {"W": wv, "R": rv}
    for i, key, shape in ((3, "B", (dirs, 2 * gates * hid)), (5, "initial_h", (dirs, batch, hid)),
                          (6, "initial_c", (dirs, batch, hid))):
        t = _const_input(g, n, i)
        if t is None:
            continue
        v = np.asarray(g.const(t), dtype=np.float32)
        if v.shape != shape:
            return f"{key} of shape {list(v.shape)} (expected {list(shape)})"
        weights[key] = v
    clip = float(attr(n, "clip", 0.0) or 0.0)
    attrs = dict(hidden_size=hid, direction=direction, activations=",".join(acts[0]),
                 activation_alpha=acts[1], activation_beta=acts[2], clip=clip)
    if cell == "GRU":
        attrs["linear_before_reset"] = int(attr(n, "linear_before_reset", 0))
    return RecurrentGroup(cell, f"mrvl.{cell.lower()}", [n], [x], n.output[0], attrs, weights, layout=layout)


def materialize(m, grp: RecurrentGroup) -> None:
    """Emit the Mrvl recurrent node: X read as [T, B, I], Y written as [T, D, B, H]."""
    x = m.get(grp.inputs[0], X_STORED if grp.layout else None, for_mrvl=True, origin=grp.origin)
    base = grp.anchor.name
    ins: List[str] = [x, m.init(f"{base}_W", grp.weights["W"]), m.init(f"{base}_R", grp.weights["R"])]
    for key in ("B", "initial_h", "initial_c"):
        if grp.op == "LSTM" or key != "initial_c":
            ins.append(m.init(f"{base}_{key}", grp.weights[key]) if key in grp.weights else "")
    m._emit(grp, grp.op, ins, dict(grp.attrs), Y_STORED if grp.layout else None)


PATTERN_ANCHORS = tuple(CELLS)
