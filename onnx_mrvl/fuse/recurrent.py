"""ONNX LSTM / GRU / RNN -> one Mrvl recurrent layer (``opset_recurrent.py``).

    LSTM | GRU | RNN (layout 0 or 1, any direction)  ->  mrvl::LSTM | GRU | RNN  (X [T,B,I] -> Y [T,D,B,H])

Rule: the weights W, R (and B when given) are constant float32 initializers; initial_h / initial_c
are constants (layer weights) or float32 tensors of static shape (data inputs of the layer: a
streaming model's previous state);
``sequence_lens`` is absent or constant and equal to T for every sequence (a full batch), or an
int32 tensor [B] (a graph input's lengths: PyTorch's ``pack_padded_sequence``), then a data input of
the layer -- a host ``Cast`` to float feeds it (exact: T <= 2048), the layer masks each row's state
updates past its length and writes 0 there (ONNX's semantics); a read ``Y_h`` (each row's state at
its own last step, not a row of Y) is then the final state the layer writes as row T
(``final_state_rows``), ``Y_c`` the cell-state row after it; LSTM
peepholes P constant; no ``input_forget``; every cell activation is one the vector unit computes (Sigmoid,
Tanh, Relu, HardSigmoid, LeakyRelu, when in ``target.activations``); ``Y_h`` is sliced from ``Y``
in the region (each direction's last timestep), an LSTM's ``Y_c`` from the row T the layer then
appends to its output (``cell_state_row``); the per-step GEMM fits an FC
layer (G*H and I+H <= ``max_fc_features``) and
T*B <= ``MAX_FC_ROWS``. Layout 1 ([B, T, I] -> [B, T, D, H], states [B, D, H]) is the same layer
on the storage [T, B, I] -> [T, D, B, H]: the materialisation asks the layout for X stored that way
and records Y (and Y_h) as stored permuted, so a transpose around it is a relabelling or a block
rotation in the region; constant initial states are transposed to [D, B, H]. (onnxruntime 1.31
refuses layout 1: such a node left on the CPU does not run there, as in the original model.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import onnx

from .. import opset
from ..graph_index import GraphIndex, attr
from ..provenance import set_origin
from ..opset_recurrent import CELL_ACTIVATIONS, CELLS, USES_ALPHA, USES_BETA
from ..target import Target
from .groups import Group, float_static
from .patterns import MAX_FC_ROWS

TARGET_NAMES = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "hardsigmoid": "hard_sigmoid",
                "leakyrelu": "leaky_relu"}   # cell activation -> its name in target.activations
X_STORED = (1, 0, 2)        # layout 1: logical [B, T, I] stored as [T, B, I]
Y_STORED = (1, 2, 0, 3)     # layout 1: logical [B, T, D, H] stored as [T, D, B, H]


@dataclass
class RecurrentGroup(Group):
    layout: int = 0
    y_h: str = ""           # the Y_h output when read: sliced from Y in the region (materialize)
    y_shape: tuple = ()     # logical shape of Y when the node has no Y output (only Y_h): internal
    y_c: str = ""           # the LSTM's Y_c output when read: row T of the layer's output
    y_read: bool = True     # Y itself is read (else only Y_h / Y_c)
    lens: str = ""          # sequence_lens as data (int32 [B]): a host Cast to float feeds the layer
    dims: tuple = ()        # (T, D, B, H)


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
    read = [bool(o) and bool(g.consumers.get(o) or o in g.output_set) for o in list(n.output) + ["", ""]][:3]
    y_h = n.output[1] if read[1] else ""
    y_c = n.output[2] if read[2] else ""
    for t in (y_h, y_c):
        if t and g.shape(t) is None:
            return f"tensor '{t}' has no static shape"
    if not any(read):
        return f"{cell} whose outputs are not read"
    x, w, r = n.input[0], n.input[1], n.input[2]
    reason = float_static(g, [x] + [o for o in n.output[:2] if o])
    if reason:
        return reason
    if g.is_const(x):
        return f"{cell} of a constant input (constant folding leaves this to the CPU)"
    names = {3: "B", 4: "sequence_lens", 5: "initial_h", 6: "initial_c", 7: "P"}
    for i, t in enumerate(n.input[1:], 1):
        if t and not g.is_const(t) and i not in (4, 5, 6):   # states (streaming), lengths may be tensors
            return f"{names.get(i, 'W' if i == 1 else 'R')} is not a constant initializer"
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
    lens = seq if seq is not None and not g.is_const(seq) else ""
    if lens:
        reason = _lens_reason(g, lens, steps, batch)
        if reason:
            return reason
    elif seq is not None and not np.all(np.asarray(g.const(seq)).reshape(-1) == steps):
        return f"sequence_lens {np.asarray(g.const(seq)).reshape(-1).tolist()} are not all {steps} (padded batch)"
    acts = _activations(n, cell, dirs, target)
    if isinstance(acts, str):
        return acts
    if gates * hid > target.max_fc_features or feat + hid > target.max_fc_features:
        return f"per-step GEMM [{feat + hid} -> {gates * hid}] exceeds the FC limit {target.max_fc_features}"
    if steps * batch > MAX_FC_ROWS:
        return f"{steps} steps x batch {batch} exceed the limit {MAX_FC_ROWS}"
    weights = {"W": wv, "R": rv}
    state = (dirs, batch, hid) if layout == 0 else (batch, dirs, hid)   # layout 1: [B, D, H]
    data = [x]
    for i, key, shape in ((3, "B", (dirs, 2 * gates * hid)), (5, "initial_h", state), (6, "initial_c", state),
                          (7, "P", (dirs, 3 * hid))):
        t = _const_input(g, n, i)
        if t is None:
            continue
        if not g.is_const(t) and key != "P":   # a state tensor (a streaming model's previous state): data
            reason = float_static(g, [t])
            if reason or tuple(g.shape(t)) != shape:
                return reason or f"{key} of shape {g.shape(t)} (expected {list(shape)})"
            data.append(t)
            continue
        v = np.asarray(g.const(t), dtype=np.float32)
        if v.shape != shape:
            return f"{key} of shape {list(v.shape)} (expected {list(shape)})"
        weights[key] = v if key in ("B", "P") or layout == 0 else np.ascontiguousarray(v.transpose(1, 0, 2))
    clip = float(attr(n, "clip", 0.0) or 0.0)
    attrs = dict(hidden_size=hid, direction=direction, activations=",".join(acts[0]),
                 activation_alpha=acts[1], activation_beta=acts[2], clip=clip)
    if cell == "GRU":
        attrs["linear_before_reset"] = int(attr(n, "linear_before_reset", 0))
    h_row = bool(lens and y_h)   # per-row lengths: the final h is no row of Y: the layer writes it as row T
    if h_row:
        attrs["final_state_rows"] = 1
    if y_c:   # the layer writes [T + 1, D, B, H]: row T (after the h row) is the last cell state
        attrs["cell_state_row"] = 1
    extra = h_row + bool(y_c)
    internal = extra or not n.output[0]
    y_shape = () if not internal else ((steps + extra, dirs, batch, hid) if layout == 0 or extra
                                       else (batch, steps, dirs, hid))
    return RecurrentGroup(cell, f"mrvl.{cell.lower()}", [n], data + ([lens] if lens else []),
                          f"{n.name}__Y" if internal else n.output[0],
                          attrs, weights, layout=layout, y_h=y_h, y_shape=y_shape, y_c=y_c,
                          y_read=read[0], dims=(steps, dirs, batch, hid), lens=lens)


MAX_LENS_STEPS = 2048   # lengths reach the layer as fp16 values: integers up to 2048 are exact


def _lens_reason(g: GraphIndex, lens: str, steps: int, batch: int):
    """Why the data ``sequence_lens`` cannot be the layer's per-row lengths, or None."""
    if g.elem_type(lens) != onnx.TensorProto.INT32 or tuple(g.shape(lens) or ()) != (batch,):
        return f"sequence_lens '{lens}' is not an int32 tensor of shape [{batch}]"
    if steps > MAX_LENS_STEPS:
        return f"sequence_lens '{lens}' with {steps} steps (lengths reach the layer as fp16: at most {MAX_LENS_STEPS})"
    return None


def materialize(m, grp: RecurrentGroup) -> None:
    """Emit the Mrvl recurrent node: X read as [T, B, I], Y written as [T, D, B, H] (under an
    internal name when the node has no Y output, only Y_h)."""
    if grp.y_shape:
        grp.output = m.fresh(grp.output)
        m.known_shape(grp.output, list(grp.y_shape))
    x = m.get(grp.inputs[0], X_STORED if grp.layout else None, for_mrvl=True, origin=grp.origin)
    base = grp.anchor.name
    codes = grp.weights["W"].dtype == np.int8   # an int8 recurrent layer (qdq_recurrent.py) keeps its codes
    dt = np.int8 if codes else np.float32
    ins: List[str] = [x, m.init(f"{base}_W", grp.weights["W"], dt), m.init(f"{base}_R", grp.weights["R"], dt)]
    node = grp.anchor
    for key, i in (("B", 3), ("initial_h", 5), ("initial_c", 6), ("P", 7)):
        if grp.op != "LSTM" and key in ("initial_c", "P"):
            continue
        t = _const_input(m.g, node, i)
        if t is not None and t in grp.inputs:     # a state tensor, stored [D, B, H]
            ins.append(m.get(t, (1, 0, 2) if grp.layout else None, for_mrvl=True, origin=grp.origin))
        else:
            ins.append(m.init(f"{base}_{key}", grp.weights[key]) if key in grp.weights else "")
    if grp.lens:   # per-row lengths: int32 data -> float on the host (exact), the layer's last input
        while len(ins) < len(opset.OPS[grp.op].inputs) - 1:
            ins.append("")
        ins.append(_lens_as_float(m, grp))
    rows = int(grp.attrs.get("final_state_rows", 0)) or grp.y_c
    m._emit(grp, grp.op, ins, dict(grp.attrs), Y_STORED if grp.layout and not rows else None)
    if grp.y_h or grp.y_c:
        _outputs_from_rows(m, grp)


def _lens_as_float(m, grp: RecurrentGroup) -> str:
    src = m.get(grp.lens, None, for_mrvl=False, origin=grp.origin)
    out = m.fresh(f"{grp.lens}__float")
    node = onnx.helper.make_node("Cast", [src], [out], name=m.fresh(f"{grp.anchor.name}_lens_cast"), to=onnx.TensorProto.FLOAT)
    set_origin(node, grp.origin)
    m.add(node, None)
    m.known_shape(out, [grp.dims[2]])
    m.loc[out] = (out, None)
    m.vinfo[out] = [grp.dims[2]]
    return out


class _Rows:
    """Mrvl nodes that take rows of the layer's output [T (+1), D, B, H] (exact: fp16 values move)."""

    def __init__(self, m, grp: RecurrentGroup):
        self.m, self.grp = m, grp
        self.node = m.mrvl_name[grp.anchor.name]
        steps, self.dirs, self.batch, self.hid = grp.dims
        self.h_row = int(grp.attrs.get("final_state_rows", 0))
        self.rows = steps + self.h_row + bool(grp.y_c)      # T, + the final-h row, + the cell-state row
        y, _ = m.loc[grp.output]
        view = [1, self.rows, self.dirs, self.batch * self.hid]
        self.view = self.add("Reshape", [y], view, {"shape": view}, "rows")

    def add(self, op, ins, shape, attrs, tag):
        m = self.m
        out = m.fresh(f"{self.grp.anchor.name}__{tag}")
        m.add(opset.make_node(op, ins, [out], name=m.fresh(f"{self.node}_{tag}"), origin=self.grp.origin,
                              attrs=attrs, composite=opset.OPS[op].composite), None)
        m.vinfo[out] = shape
        m.mrvl_tensors.add(out)
        return out

    def take(self, start: int, end: int, tag: str) -> str:
        return self.add("Slice2D", [self.view], [1, end - start, self.dirs, self.batch * self.hid],
                        {"axis": 1, "start": start, "end": end}, tag)

    def write(self, src: str, t: str, stored_shape, perm) -> None:
        """``t`` (an output of the ONNX node) as the Reshape of ``src`` to ``stored_shape``."""
        m = self.m
        back = m.define(t, perm, mrvl=True)
        m.mrvl_producer[back] = self.node
        m.add(opset.make_node("Reshape", [src], [back], name=m.fresh(f"{self.node}_{t}"), origin=self.grp.origin,
                              attrs={"shape": list(stored_shape)}, composite="mrvl.reshape"), perm)
        if t in m.g.output_set and back != t:
            m.get(t, None, for_mrvl=True, origin=self.grp.origin)


def _outputs_from_rows(m, grp: RecurrentGroup) -> None:
    """Y (when the layer also wrote state rows), Y_h (per direction the row of its last
    timestep: T - 1 forward, 0 reverse; with per-row lengths the final-state row T) and Y_c (the
    last row) from the layer's output, by Slice2D on the
    view [1, T (+1), D, B*H], a Concat of the directions and a Reshape; layout 1 stores Y as
    [T, D, B, H] and Y_h / Y_c as [D, B, H] (logical [B, T, D, H] / [B, D, H])."""
    rows = _Rows(m, grp)
    dirs, batch, hid = rows.dirs, rows.batch, rows.hid
    steps = rows.rows - rows.h_row - bool(grp.y_c)
    state_perm = (1, 0, 2) if grp.layout else None
    node = grp.anchor
    if (grp.y_c or rows.h_row) and grp.y_read and node.output[0]:
        rows.write(rows.take(0, steps, "y"), node.output[0], [steps, dirs, batch, hid],
                   Y_STORED if grp.layout else None)
    if grp.y_h and rows.h_row:   # each direction's final state, row T
        rows.write(rows.take(steps, steps + 1, "final"), grp.y_h, [dirs, batch, hid], state_perm)
    elif grp.y_h:
        parts = []
        for d in range(dirs):
            t = 0 if (grp.attrs["direction"] == "reverse" or d == 1) else steps - 1
            row = rows.take(t, t + 1, f"step{d}")
            if dirs > 1:
                row = rows.add("Slice2D", [row], [1, 1, 1, batch * hid], {"axis": 2, "start": d, "end": d + 1},
                               f"dir{d}")
            parts.append(row)
        if dirs > 1:
            parts = [rows.add("Concat", parts, [1, 1, dirs, batch * hid], {"axis": 2, "num_inputs": dirs}, "dirs")]
        rows.write(parts[0], grp.y_h, [dirs, batch, hid], state_perm)
    if grp.y_c:
        c = steps + rows.h_row
        rows.write(rows.take(c, c + 1, "cell"), grp.y_c, [dirs, batch, hid], state_perm)


PATTERN_ANCHORS = tuple(CELLS)
