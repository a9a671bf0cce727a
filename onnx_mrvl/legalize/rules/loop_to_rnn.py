"""A ``Loop`` that runs one LSTM / GRU step per row of a sequence -> ONNX LSTM / GRU (forward).

tf2onnx 1.17 writes Keras 3's recurrent layers (TF >= 2.16: Keras' own ``while`` loop) as an ONNX
``Loop``: trip count T, loop-carried ``[time, h, (c,) W, R, b]`` (the weights passed through), the
body a ``Gather`` of row ``time`` of the ``[T, B, I]`` input, the gate Gemm / MatMul, Split or
Slice, Sigmoid / Tanh, the new state, and a scan output of h (an LSTM / GRU written out by hand
in a ``Loop`` has the same form). Such a Loop stays on the CPU; as an ONNX LSTM / GRU it is one
accelerator layer (fuse/recurrent.py).

    Loop(T, cond, t0, h0, (c0,) consts...) body: x_t = Gather(X, t); gates(x_t, h); h', (c')
      -> LSTM | GRU(X, W, R, B, initial_h = h0, (initial_c = c0))   Y [T, 1, B, H] -> [T, B, H] scan,
         Y_h / Y_c -> the final h / c; the final counter and loop-invariant values as constants

Check (``loop_body.analyze``, ``loop_cell.identify``): constant trip count and initial condition;
the body's condition and step index read only the iteration number, integer counters and constants
and, run per iteration, read rows 0, 1, ..., T-1 of X once each (T = X's first axis); loop-invariant
carried values are constants; the cell's weights are probed from the body and one gate assignment
must reproduce every state and scan output of the body on random inputs (else the reason, e.g. a
Keras Masking mask read per step, other activations). Keras' backward direction is a
``ReverseSequence`` outside the loop (``reverse_sequence_rnn``). Exact up to float32 rounding of
the probed weights (checked to 1e-4 of the outputs).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, reshape
from .loop_body import analyze, const_value
from .loop_cell import identify

NAME = "loop_to_rnn"
OPS = ("Loop",)
REPORT_SKIPS = "not re-rolled into an LSTM / GRU"   # a refusal starts the Loop's decision


def match(node, g) -> Optional[Match]:
    if node.op_type != "Loop" or node.domain not in ("", "ai.onnx"):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    cache = g.__dict__.setdefault("_loop_to_rnn", {})
    key = (m.node.name, tuple(m.node.input))
    if key not in cache:
        try:
            lb = analyze(m.node, g)
            cache[key] = (lb, lb if isinstance(lb, str) else identify(lb, g))
        except Exception as exc:   # noqa: BLE001 - a body onnxruntime cannot run piecewise: the Loop stays
            why = f"its body could not be run piecewise ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
            cache[key] = (why, why)
    lb, cell = cache[key]
    if isinstance(cell, str):
        return cell
    m.data.update(body=lb, cell=cell)
    return None


def rewrite(m: Match, g) -> str:
    loop, lb, cell = m.node, m.data["body"], m.data["cell"]
    steps, batch, _ = g.shape(lb.x)
    hid = cell.R.shape[2]
    org = m.origin
    base = loop.name
    ins = [lb.x, g.add_const(f"{base}/W", cell.W.astype(np.float32)), g.add_const(f"{base}/R", cell.R.astype(np.float32)),
           g.add_const(f"{base}/B", cell.B.astype(np.float32)), ""]
    for k in [cell.h] + ([cell.c] if cell.c is not None else []):
        init = lb.inits[k]
        v = const_value(g, init)   # zeros of the batch's shape (ConstantOfShape of a pinned Shape) too
        if v is not None and not np.any(v):
            ins.append("")
        elif v is not None:
            ins.append(g.add_const(f"{base}/init", np.asarray(v, np.float32).reshape(1, batch, hid)))
        else:
            ins.append(reshape(g, init, [1, batch, hid], near=loop, origin=org, tag="initial_state"))
    while ins and not ins[-1]:
        ins.pop()
    carried = len(lb.carried_in)
    finals = {k: loop.output[k] for k in range(carried) if k < len(loop.output) and loop.output[k]
              and g.used(loop.output[k])}
    scans = [o for o in loop.output[carried:] if o and g.used(o)]
    y = g.fresh(f"{base}/Y") if scans else ""
    y_h = g.fresh(f"{base}/Y_h") if any(cell.roles.get(k) == "h" for k in finals) else ""
    y_c = g.fresh(f"{base}/Y_c") if any(cell.roles.get(k) == "c" for k in finals) else ""
    outs = [y, y_h, y_c][:3 if cell.op == "LSTM" else 2]
    while outs and not outs[-1]:
        outs.pop()
    if not outs:   # nothing read: keep the state output so the node is well formed
        outs = ["", y_h or g.fresh(f"{base}/Y_h")]
    attrs = dict(hidden_size=int(hid), direction="forward")
    if cell.op == "GRU":
        attrs["linear_before_reset"] = int(cell.linear_before_reset)
    g.make(cell.op, ins, outs, near=loop, origin=org, name=f"{base}/{cell.op}", **attrs)
    if y:
        g.set_shape(y, [steps, 1, batch, hid], 1)
    for t in (y_h, y_c):
        if t:
            g.set_shape(t, [1, batch, hid], 1)
    g.remove(loop)
    for o in scans:
        reshape(g, y, [steps, batch, hid], near=loop, origin=org, out=o, tag="scan")
    for k, o in finals.items():
        if k in lb.final:
            g.set_const(o, np.asarray(lb.final[k]))
        else:
            src = y_h if cell.roles[k] == "h" else y_c
            reshape(g, src, list(g.shape(lb.inits[k])), near=loop, origin=org, out=o, tag=f"final_{cell.roles[k]}")
    return f"{cell.op} of {steps} steps, hidden {hid}, from the loop over '{lb.x}'"
