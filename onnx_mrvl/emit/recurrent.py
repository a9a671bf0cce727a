"""LSTM / GRU / RNN layers in the Nodes-JSON (ours: TVM had none) and in the program.

Nodes-JSON attributes (docs/json-format.md): ``hidden_size``, ``direction``, ``activations``
(ONNX names, lower case, one per activation of each direction), ``activation_alpha`` /
``activation_beta`` (one per activation), ``clip`` (0 = none), ``linear_before_reset`` (GRU);
constants ``kernel`` (W [D, G*H, I]), ``recurrence`` (R [D, G*H, H]), ``bias`` (B [D, 2*G*H]),
``initial_h`` / ``initial_c`` ([D, B, H]), all in ONNX's gate order (LSTM i o f c, GRU z r h);
``cell_state_row`` (LSTM): the output has a row T + 1 holding the last cell state; ``final_state_rows``:
a row holding each direction's final hidden state comes first (per-row lengths); ``peepholes``
(LSTM P [D, 3*H], gates i o f).
Data: X [T, B, I] (then, listed by ``state_inputs``, initial states that are tensors, and
``sequence_lens`` [B]: per-row lengths as fp16 integer values) -> Y [T, D, B, H].
"""
from __future__ import annotations

import numpy as np

from .. import opset_recurrent
from .int8_layer import side_qparams
from .json_attrs import decode_const

CELLS = tuple(opset_recurrent.CELLS)
CONST_ROLES = ("kernel", "recurrence", "bias", "initial_h", "initial_c", "peepholes")   # node inputs 1..6
ROLE_OF = {"W": "kernel", "R": "recurrence", "B": "bias", "initial_h": "initial_h", "initial_c": "initial_c",
           "P": "peepholes", "sequence_lens": "sequence_lens"}
DATA_ROLES = ("initial_h", "initial_c", "sequence_lens")
# ONNX activation name (lower case) -> the program's (sim/activations.py)
PROGRAM_ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu", "hardsigmoid": "hard_sigmoid",
                       "leakyrelu": "leaky_relu"}


def json_attrs(a: dict, inputs, g, add_const, s, cell: str = "LSTM") -> dict:
    """Nodes-JSON attributes of a Mrvl recurrent node (``a``: its attributes; ``add_const(role,
    arr)``: stores a constant; ``s``: TVM's list-of-strings formatter)."""
    out = {"hidden_size": s(int(a["hidden_size"])), "direction": [a["direction"]],
           "activations": a["activations"].split(","), "activation_alpha": s(list(a["activation_alpha"])),
           "activation_beta": s(list(a["activation_beta"])), "clip": s(float(a.get("clip", 0.0)))}
    if "linear_before_reset" in a:
        out["linear_before_reset"] = s(int(a["linear_before_reset"]))
    if int(a.get("cell_state_row", 0)):
        out["cell_state_row"] = s(1)
    if int(a.get("final_state_rows", 0)):
        out["final_state_rows"] = s(1)
    states = []
    for role, t in zip([ROLE_OF[x] for x in opset_recurrent.INPUTS[cell][1:]], inputs[1:]):
        if t and g.is_const(t):
            add_const(role, g.const(t))
        elif t:                 # a data input after X, in this order
            states.append(role)
    if states:
        out["state_inputs"] = states
    if a.get("precision") in ("int8_in", "int8"):   # int8 recurrent layer (docs/json-format.md)
        out.update(precision=[a["precision"]], in_scale=s(float(a["in_scale"])), in_zero_point=s(int(a["in_zero_point"])),
                   in_dtype=[a["in_type"]], out_dtype=["float16"], kernel_dtype=["int8"], bias_dtype=["float32"])
        if a["precision"] == "int8":   # Y as int8 codes
            out.update(out_scale=s(float(a["out_scale"])), out_zero_point=s(int(a["out_zero_point"])),
                       out_dtype=[a["out_type"]])
        for key in ("kernel", "recurrence"):
            add_const(f"{key}_scale", np.asarray(a[f"{key}_scales"], np.float32))
            add_const(f"{key}_zero_point", np.asarray(a[f"{key}_zero_points"], np.int32))
        if float(a.get("state_scale", 0.0) or 0.0) > 0:
            out.update(state_scale=s(float(a["state_scale"])), state_zero_point=s(int(a["state_zero_point"])),
                       state_dtype=[a["state_type"]])
    return out


def _const(a, ctx, role: str, rank: int, integer=None):
    arr = decode_const(ctx.consts, a.str(f"{role}_const_name"), a, integer)
    while arr.ndim > rank and arr.shape[0] == 1:   # 3-D constants gained a leading 1 (TVM's rule)
        arr = arr[0]
    if arr.ndim != rank:
        a.fail(f"{role} has shape {list(arr.shape)} ({rank}-D expected)")
    return arr


def compile_layer(a, ctx, lname: str, cell: str, in_shapes, params: dict, weights: dict):
    """(output shape, MACs) of a recurrent layer; fills ``params`` and ``weights``. Inputs: X, then
    the initial states named by ``state_inputs`` (data instead of constants) and ``sequence_lens``."""
    states = [str(x) for x in _list(a, "state_inputs")]
    if len(in_shapes) != 1 + len(states) or any(x not in DATA_ROLES for x in states) \
            or len(set(states)) != len(states):
        a.fail(f"{cell} takes X and the state inputs {states}, the node lists {len(in_shapes)} inputs")
    if len(in_shapes[0]) != 3:
        a.fail(f"{cell} input has shape {in_shapes[0]} ([T, B, I] expected)")
    steps, batch, feat = in_shapes[0]
    gates = opset_recurrent.CELLS[cell][0]
    direction = a.str("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        a.fail(f"direction '{direction}' (forward, reverse or bidirectional)")
    dirs = 2 if direction == "bidirectional" else 1
    codes = "int8" if a.has("precision") and a.str("precision") in ("int8_in", "int8") else None
    w = _const(a, ctx, "kernel", 3, codes)
    r = _const(a, ctx, "recurrence", 3, codes)
    hid = a.int("hidden_size")
    if w.shape != (dirs, gates * hid, feat) or r.shape != (dirs, gates * hid, hid):
        a.fail(f"kernel {list(w.shape)} / recurrence {list(r.shape)} do not fit {dirs} direction(s) of "
               f"{gates} gates, hidden size {hid} and an input of shape {in_shapes[0]}")
    if ctx.batch and ctx.batch != ctx.json_batch:
        a.fail(f"{cell} reads [T, B, I] (its first axis is time, not the batch): it cannot be recompiled "
               f"for batch {ctx.batch}", hint="convert the model again with that batch")
    acts = [str(x).lower() for x in _list(a, "activations")]
    n_acts = len(opset_recurrent.CELLS[cell][1]) * dirs
    if len(acts) != n_acts or any(x not in PROGRAM_ACTIVATIONS for x in acts):
        a.fail(f"activations {acts}: {n_acts} of {', '.join(PROGRAM_ACTIVATIONS)} expected")
    try:
        alpha = [float(v) for v in _list(a, "activation_alpha")] or [0.0] * n_acts
        beta = [float(v) for v in _list(a, "activation_beta")] or [0.0] * n_acts
    except (TypeError, ValueError):
        a.fail("activation_alpha / activation_beta are not lists of numbers")
    if len(alpha) != n_acts or len(beta) != n_acts:
        a.fail(f"activation_alpha / activation_beta need {n_acts} values each")
    params.update(cell=cell, hidden_size=hid, direction=direction,
                  activations=[PROGRAM_ACTIVATIONS[x] for x in acts], activation_alpha=alpha,
                  activation_beta=beta, clip=a.float("clip", 0.0), steps=steps, batch=batch,
                  input_size=feat)
    if cell == "GRU":
        params["linear_before_reset"] = a.int("linear_before_reset", 0)
    c_row = a.int("cell_state_row", 0)
    if c_row not in (0, 1) or (c_row and cell != "LSTM"):
        a.fail(f"cell_state_row={c_row} (0, or 1 on an LSTM: the last cell state as row T of the output)")
    if c_row:
        params["cell_state_row"] = 1
    h_row = a.int("final_state_rows", 0)
    if h_row not in (0, 1):
        a.fail(f"final_state_rows={h_row} (0, or 1: each direction's final hidden state as row T of the output)")
    if h_row:
        params["final_state_rows"] = 1
    if codes:
        _int8(a, ctx, lname, w, r, dirs * gates * hid, params, weights)
        if a.str("precision") == "int8":
            if c_row or h_row:
                a.fail("an int8 recurrent layer writing int8 codes has no state rows")
            side_qparams(a, "out", "an int8 recurrent layer", params)
            params["precision"] = "int8"
    elif a.has("precision") and a.str("precision") not in ("float16", "fp16"):
        a.fail(f"precision '{a.str('precision')}' of a recurrent layer (float16, int8_in or int8)")
    else:
        weights["kernel"] = ctx.weight(a, f"{lname}.kernel", w, "DGI", fp16=True)
        weights["recurrence"] = ctx.weight(a, f"{lname}.recurrence", r, "DGH", fp16=True)
    if a.has("bias_const_name"):
        weights["bias"] = ctx.weight(a, f"{lname}.bias", _const(a, ctx, "bias", 2), "DG", fp16=False,
                                     shape=(dirs, 2 * gates * hid))
    for role, shape in zip(states, in_shapes[1:]):
        if role == "initial_c" and cell != "LSTM":
            a.fail(f"{cell} has no cell state (initial_c)")
        if role == "sequence_lens":
            if [d for d in shape if d != 1] != [batch] and list(shape) != [batch]:
                a.fail(f"sequence_lens input has shape {shape}, expected [{batch}]")
            if steps > 2048:
                a.fail(f"sequence_lens with {steps} steps: fp16 lengths are exact up to 2048")
            continue
        if list(shape) != [dirs, batch, hid]:
            a.fail(f"{role} input has shape {shape}, expected {[dirs, batch, hid]}")
    if states:
        params["state_inputs"] = states
    if a.has("peepholes_const_name"):
        if cell != "LSTM":
            a.fail(f"{cell} has no peepholes")
        weights["peepholes"] = ctx.weight(a, f"{lname}.peepholes", _const(a, ctx, "peepholes", 2), "DG", fp16=False,
                                          shape=(dirs, 3 * hid))
    for role in ("initial_h", "initial_c"):
        if a.has(f"{role}_const_name"):
            if role in states:
                a.fail(f"{role} is both a constant and an input")
            if role == "initial_c" and cell != "LSTM":
                a.fail(f"{cell} has no cell state (initial_c)")
            v = _const(a, ctx, role, 3)
            if v.shape != (dirs, batch, hid):
                a.fail(f"{role} has shape {list(v.shape)}, expected {[dirs, batch, hid]}")
            weights[role] = ctx.weight(a, f"{lname}.{role}", v, "DBH", fp16=True)
    out = [steps + h_row + c_row, dirs, batch, hid]
    return out, opset_recurrent.macs(cell, steps, dirs, batch, hid, feat)


def _list(a, key: str):
    if not a.has(key):
        return []
    v = a.raw[key]
    while isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        v = v[0]
    return list(v) if isinstance(v, list) else [v]


def _int8(a, ctx, lname: str, w, r, rows: int, params: dict, weights: dict) -> None:
    """An int8 recurrent layer's fields: int8 kernel / recurrence codes, their scales and zero
    points per (direction, gate row), the input quantization, the optional state quantization."""
    from .layer_common import vector
    if w.dtype != np.int8 or r.dtype != np.int8:
        a.fail(f"an int8 recurrent layer needs int8 kernel / recurrence codes, got {w.dtype} / {r.dtype}")
    side_qparams(a, "in", "an int8 recurrent layer", params)
    if a.has("state_scale"):
        side_qparams(a, "state", "an int8 recurrent layer's state", params)
    params["precision"] = "int8_in"
    weights["kernel"] = ctx.weight(a, f"{lname}.kernel", w, "DGI", fp16=False)
    weights["recurrence"] = ctx.weight(a, f"{lname}.recurrence", r, "DGH", fp16=False)
    for key in ("kernel", "recurrence"):
        sc = vector(a, ctx, f"{key}_scale_const_name", rows, f"{key} scale")
        if not (np.isfinite(sc).all() and np.all(sc > 0)):
            a.fail(f"{key} scales must be positive and finite")
        zp = vector(a, ctx, f"{key}_zero_point_const_name", rows, f"{key} zero point", "int32").astype(np.int32)
        wq = (w if key == "kernel" else r).astype(np.int32) - zp.reshape(w.shape[0], -1, 1)
        if zp.min() < -128 or zp.max() > 127 or wq.min() < -255 or wq.max() > 255:
            a.fail(f"{key} zero points must be int8 values")
        weights[f"{key}_scale"] = ctx.weight(a, f"{lname}.{key}_scale", sc, "DG", fp16=False)
        weights[f"{key}_zero_point"] = ctx.weight(a, f"{lname}.{key}_zero_point", zp, "DG", fp16=False)
