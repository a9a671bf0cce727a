"""The recurrent Mrvl ops ``LSTM``, ``GRU`` and ``RNN``: one accelerator layer per ONNX recurrent
node, whose reference body is the ONNX op itself (layout 0, output ``Y`` only).

Inputs (weights are initializers, in ONNX's own layout and gate order):
    X [T, B, I], W [D, G*H, I], R [D, G*H, H], B [D, 2*G*H] (optional),
    initial_h [D, B, H] (optional), initial_c [D, B, H] (LSTM, optional), P [D, 3*H] (LSTM peepholes
    i o f, optional), sequence_lens [B] (optional, last: per-row lengths as float values, data)
Output: Y [T, D, B, H] (the sequence of hidden states), or with ``cell_state_row`` = 1 (LSTM)
[T + 1, D, B, H] whose row T is the last cell state ``Y_c``. ``Y_h`` is not written (it is rows of Y),
unless ``final_state_rows`` = 1 (per-row lengths: each row's final state is not a row of Y): then row
T holds ``Y_h`` and a cell-state row follows it.
G = 4 (LSTM, gates i o f c), 3 (GRU, gates z r h), 1 (RNN).
With ``sequence_lens`` (a graph input's lengths, not constants), ONNX's semantics: row b runs its
steps t < len[b] (forward from 0, reverse from len[b] - 1), its state is held past them and Y is 0
there; the body casts the float lengths to int32 for the ONNX op.

Attributes: ``hidden_size``, ``direction`` (forward / reverse / bidirectional), ``activations``
(comma-separated lower-case names, ONNX's list per direction), ``activation_alpha`` /
``activation_beta`` (one value per activation, 0 where unused), ``clip`` (0 = none),
``linear_before_reset`` (GRU), ``cell_state_row`` (LSTM). Lists stay simple: strings and floats only.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

from onnx import helper

from .opset_recurrent_int8 import INT8_RECURRENT_ATTRS, int8_recurrent_body

# cell -> (gates, default activations of one direction); names are ONNX's in lower case
CELLS: Dict[str, Tuple[int, Tuple[str, ...]]] = {
    "LSTM": (4, ("sigmoid", "tanh", "tanh")),
    "GRU": (3, ("sigmoid", "tanh")),
    "RNN": (1, ("tanh",)),
}
# cell activations the accelerator's vector unit computes -> ONNX spelling, (alpha, beta) defaults
CELL_ACTIVATIONS: Dict[str, Tuple[str, Tuple[float, float]]] = {
    "sigmoid": ("Sigmoid", (0.0, 0.0)), "tanh": ("Tanh", (0.0, 0.0)), "relu": ("Relu", (0.0, 0.0)),
    "hardsigmoid": ("HardSigmoid", (0.2, 0.5)), "leakyrelu": ("LeakyRelu", (0.01, 0.0)),
}
USES_ALPHA = {"hardsigmoid", "leakyrelu"}
USES_BETA = {"hardsigmoid"}
INPUTS = {"LSTM": ("X", "W", "R", "B", "initial_h", "initial_c", "P", "sequence_lens"),
          "GRU": ("X", "W", "R", "B", "initial_h", "sequence_lens"),
          "RNN": ("X", "W", "R", "B", "initial_h", "sequence_lens")}
ATTRS = ("hidden_size", "direction", "activations", "activation_alpha", "activation_beta", "clip",
         "linear_before_reset", "cell_state_row", "final_state_rows") + INT8_RECURRENT_ATTRS   # int8: opset_recurrent_int8.py


def onnx_activation_attrs(a: dict) -> dict:
    """ONNX attributes ``activations`` / ``activation_alpha`` / ``activation_beta`` for the Mrvl
    attributes ``a``: ONNX consumes alpha/beta in order, one per activation that uses it."""
    acts = a["activations"].split(",")
    alpha = list(a.get("activation_alpha") or [0.0] * len(acts))
    beta = list(a.get("activation_beta") or [0.0] * len(acts))
    out = {"activations": [CELL_ACTIVATIONS[x][0] for x in acts]}
    al = [float(alpha[i]) for i, x in enumerate(acts) if x in USES_ALPHA]
    be = [float(beta[i]) for i, x in enumerate(acts) if x in USES_BETA]
    if al:
        out["activation_alpha"] = al
    if be:
        out["activation_beta"] = be
    return out


def _body(cell: str):
    def body(a, present, opset) -> List:
        names = INPUTS[cell]
        lens = bool(present.get("sequence_lens"))
        ins = ["X", "W", "R", "B" if present.get("B") else "", "lens_i32" if lens else ""]
        ins += [n if present.get(n) else "" for n in names[4:-1]]
        while ins and ins[-1] == "":
            ins.pop()
        pre = [helper.make_node("Cast", ["sequence_lens"], ["lens_i32"], to=6)] if lens else []
        kw = dict(hidden_size=int(a["hidden_size"]), direction=a["direction"], **onnx_activation_attrs(a))
        if float(a.get("clip", 0.0) or 0.0) > 0:
            kw["clip"] = float(a["clip"])
        if cell == "GRU":
            kw["linear_before_reset"] = int(a.get("linear_before_reset", 0))
        rows = [r for r, key in (("Yh", "final_state_rows"), ("Yc", "cell_state_row")) if int(a.get(key, 0))]
        if not rows:
            return pre + [helper.make_node(cell, ins, ["Y"], **kw)]
        # the final states as rows after Y: [T + 1 (+ 1), D, B, H] (Y_h, then an LSTM's Y_c)
        axes = helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("axes", 7, [1], [0]))
        unsq = [helper.make_node("Unsqueeze", [r, "axes"], [r + "1"]) if opset >= 13 else
                helper.make_node("Unsqueeze", [r], [r + "1"], axes=[0]) for r in rows]
        outs = ["Yseq", "Yh" if "Yh" in rows else "", "Yc" if "Yc" in rows else ""]
        while not outs[-1]:
            outs.pop()
        return (pre + [helper.make_node(cell, ins, outs, **kw)] + ([axes] if opset >= 13 else []) + unsq +
                [helper.make_node("Concat", ["Yseq"] + [r + "1" for r in rows], ["Y"], axis=0)])
    return body


def op_defs(OpDef) -> dict:
    """The OpDef entries of the recurrent ops (``OpDef`` passed in: no import cycle with opset)."""
    return {cell: OpDef(cell, cell, f"mrvl.{cell.lower()}", INPUTS[cell], ATTRS,
                        int8_recurrent_body(_body(cell), CELLS[cell][0])) for cell in CELLS}


def macs(cell: str, steps: int, dirs: int, batch: int, hidden: int, feat: int) -> int:
    """Multiply-accumulates of the gate GEMMs: T * D * B * G*H*(I+H) (the vector unit's
    elementwise cell update is not counted as MACs)."""
    return int(steps) * int(dirs) * int(batch) * CELLS[cell][0] * int(hidden) * (int(feat) + int(hidden))


def node_macs(op_type: str, x_shape, w_shape, layout: int = 0) -> int:
    """``macs`` of an ONNX or Mrvl recurrent node from its X and W shapes (0 when unknown)."""
    if op_type not in CELLS or not x_shape or not w_shape or len(x_shape) != 3 or len(w_shape) != 3:
        return 0
    steps, batch = (x_shape[0], x_shape[1]) if layout == 0 else (x_shape[1], x_shape[0])
    dirs, gh, feat = w_shape
    hidden = gh // CELLS[op_type][0]
    return macs(op_type, steps, dirs, batch, hidden, feat)
