"""The LSTM / GRU / RNN cell a Loop body computes, probed from the body (for ``loop_to_rnn``).

The gate pre-activations (the inputs of the body's Sigmoid / Tanh nodes) of an LSTM / GRU cell are
affine in the step ``x`` and the hidden state ``h``: the body is run with the activations cut (their
outputs fed as inputs) on ``x = 0, h = 0`` and on unit vectors, which reads W, R and the biases off
whatever ops the exporter wrote (Gemm with a fused add, MatMul + Add, Split / Slice of the gate
block). The gate roles are then found by trying each assignment against the uncut body on random
inputs: a cell is accepted only when one candidate reproduces every state and scan output of the
body (float32 tolerance), so any other body is refused with the reason.

    LSTM: i, f, o = sigmoid(x Wk + h Rk + bk), g = tanh(x Wg + h Rg + bg),
          c' = f c + i g, h' = o tanh(c')                                (ONNX gate order i, o, f, c)
    RNN:  h' = tanh(x W + h R + b)                                       (Keras SimpleRNN)
    GRU:  z, r = sigmoid(...), n = tanh(x Wn + bwn + r (h Rn + brn))     (linear_before_reset = 1,
          Keras' reset_after=True) or tanh(x Wn + (r h) Rn + bn) (= 0), h' = (1 - z) n + z h
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np
from onnx import TensorProto

from .loop_body import LoopBody, Runner

ACTS = ("Sigmoid", "Tanh")
TOLERANCE = 1e-4     # max |cell - body| / max(1, max |body|) on random inputs (float32 body)
TRIALS = 3


@dataclass
class Cell:
    op: str                    # "LSTM" | "GRU" | "RNN"
    W: np.ndarray              # [1, G*H, I] ONNX gate order
    R: np.ndarray              # [1, G*H, H]
    B: np.ndarray              # [1, 2*G*H]
    h: int                     # carried index of h
    c: Optional[int]           # carried index of c (LSTM)
    roles: Dict[int, str]      # carried index -> "h" | "c" (its final value)
    linear_before_reset: int = 0


def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _depends(cell, sources: List[str]) -> Dict[str, set]:
    """tensor -> the subset of ``sources`` it is computed from."""
    dep = {s: {s} for s in sources}
    for n in cell:
        d = set().union(*(dep.get(i, set()) for i in n.input if i))
        for o in n.output:
            dep[o] = d
    return dep


def _affine(run, x: str, h: str, shape_x, shape_h, fixed: Dict[str, np.ndarray], ks: List[int]):
    """[(W [I, G], R [H, G], b [G]) or None] of outputs ``ks`` of ``run`` as functions of (x, h), from one
    sweep of probes (rows of the batch carry different unit vectors); None: not [B, G] or not the
    same on every row."""
    (batch, n_in), n_h = shape_x, shape_h[1]
    zx, zh = np.zeros(shape_x, np.float32), np.zeros(shape_h, np.float32)
    base = [np.asarray(v, np.float64) for v in run({x: zx, h: zh, **fixed})]
    ok = [b.ndim == 2 and b.shape[0] == batch and np.ptp(b, axis=0).max(initial=0) == 0 for b in base]
    mats = {k: ([np.zeros((n_in, base[k].shape[1])), np.zeros((n_h, base[k].shape[1]))] if ok[k] else None)
            for k in ks}
    for part, (size, name) in enumerate(((n_in, x), (n_h, h))):
        for start in range(0, size, batch):
            feed = {x: zx.copy(), h: zh.copy(), **fixed}
            rows = range(start, min(size, start + batch))
            for r, c in enumerate(rows):
                feed[name][r, c] = 1.0
            out = run(feed)
            for k in ks:
                if mats[k] is not None:
                    o = np.asarray(out[k], np.float64)
                    for r, c in enumerate(rows):
                        mats[k][part][c] = o[r] - base[k][r]
    return [None if mats[k] is None else (mats[k][0], mats[k][1], base[k][0]) for k in ks]


def identify(lb: LoopBody, g) -> "Cell | str":
    """The cell of ``lb`` with ONNX weights, or why the body is not one LSTM / GRU step."""
    acts = [n for n in lb.cell if n.op_type in ACTS]
    sig = [n for n in acts if n.op_type == "Sigmoid"]
    tanh = [n for n in acts if n.op_type == "Tanh"]
    shapes = {k: g.shape(lb.inits[k]) for k in lb.states}
    used = [k for k in lb.states if any(lb.carried_in[k] in n.input for n in lb.cell)]
    if any(s is None or len(s) != 2 for s in shapes.values()):
        return "a float state has no static [B, H] shape"
    xs = g.shape(lb.x)
    batch, n_in = xs[1], xs[2]
    if (len(sig), len(tanh)) == (3, 2) and len(used) == 2:
        op = "LSTM"
    elif (len(sig), len(tanh)) == (2, 1) and len(used) == 1:
        op = "GRU"
    elif (len(sig), len(tanh)) == (0, 1) and len(used) == 1:
        op = "RNN"
    else:
        ops = sorted({n.op_type for n in lb.cell})
        return (f"the body is not an LSTM / GRU step ({len(sig)} Sigmoid, {len(tanh)} Tanh, {len(used)} float "
                f"state(s) read; ops {', '.join(ops)})")
    names = [lb.step] + [lb.carried_in[k] for k in used]
    cut_in = {n.output[0]: n for n in acts}
    dep = _depends([n for n in lb.cell if n.op_type not in ACTS], names + list(cut_in))
    pre = {id(n): dep.get(n.input[0], set()) for n in acts}
    state_deps = lambda n: {k for k in used if lb.carried_in[k] in pre[id(n)]}   # noqa: E731
    gates = [n for n in acts if not (pre[id(n)] & set(cut_in)) and len(state_deps(n)) <= 1]
    hs = {k for n in gates for k in state_deps(n)}
    if len(hs) != 1:
        return "the gates do not read exactly one hidden state"
    h = hs.pop()
    hshape = list(shapes[h])
    n_h = hshape[1]
    feeds_t = {lb.step: (TensorProto.FLOAT, [batch, n_in])}
    feeds_t.update({lb.carried_in[k]: (TensorProto.FLOAT, list(shapes[k])) for k in used})
    outs = [lb.carried_out[k] for k in lb.states] + lb.scans
    full = Runner(lb.cell, feeds_t, outs, lb.consts, g.model)
    cut_feeds = {k: v for k, v in feeds_t.items()}
    kept = [n for n in lb.cell if n.op_type not in ACTS]
    pre_names = [n.input[0] for n in acts]
    probe = Runner(kept, {**cut_feeds, **{o: (TensorProto.FLOAT, [batch, n_h]) for o in cut_in}}, pre_names,
                   lb.consts, g.model)
    zero_cuts = {o: np.zeros((batch, n_h), np.float32) for o in cut_in}
    others = {lb.carried_in[k]: np.zeros(shapes[k], np.float32) for k in used if k != h}
    x, hn = lb.step, lb.carried_in[h]
    aff = {}
    found = _affine(lambda f: probe({**zero_cuts, **others, **f}), x, hn, (batch, n_in), hshape, {},
                    [acts.index(n) for n in gates])
    for n, got in zip(gates, found):
        if got is None or got[2].shape[0] != n_h:
            return f"gate pre-activation '{n.input[0]}' is not [B, {n_h}] or varies over the batch"
        aff[id(n)] = got
    rng = np.random.default_rng(0)
    trials = [{k: rng.uniform(-1, 1, v[1]).astype(np.float32) for k, v in feeds_t.items()} for _ in range(TRIALS)]
    refs = [[np.asarray(o, np.float64) for o in full(t)] for t in trials]
    if op == "LSTM":
        cands = _lstm_candidates(gates, sig, aff, h, used)
    elif op == "RNN":
        w, r, b = aff[id(tanh[0])] if tanh[0] in gates else (None, None, None)
        cands = [] if w is None else [Cell("RNN", w.T[None], r.T[None], np.concatenate([b, np.zeros_like(b)])[None],
                                          h, None, {})]
    else:
        cands = _gru_candidates(lb, gates, sig, tanh[0], aff, pre, cut_in, probe, zero_cuts, x, hn, batch, n_in, hshape)
        if isinstance(cands, str):
            return cands
    for cand in cands:
        roles = _verify(cand, lb, trials, refs, n_h)
        if roles is not None:
            cand.roles = roles
            return cand
    return f"no {op} gate assignment reproduces the body's outputs (tolerance {TOLERANCE})"


def _lstm_candidates(gates, sig, aff, h, used):
    g_tanh = [n for n in gates if n.op_type == "Tanh"]
    g_sig = [n for n in gates if n.op_type == "Sigmoid"]
    if len(g_tanh) != 1 or len(g_sig) != 3:
        return []
    c = [k for k in used if k != h][0]
    out = []
    for i, f, o in itertools.permutations(g_sig):
        parts = [aff[id(n)] for n in (i, o, f, g_tanh[0])]          # ONNX order i, o, f, c
        out.append(Cell("LSTM", np.concatenate([p[0] for p in parts], 1).T[None],
                        np.concatenate([p[1] for p in parts], 1).T[None],
                        np.concatenate([np.concatenate([p[2] for p in parts]), np.zeros(4 * len(parts[0][2]))])[None],
                        h, c, {}))
    return out


def _gru_candidates(lb, gates, sig, tanh, aff, pre, cut_in, probe, zero_cuts, x, hn, batch, n_in, hshape):
    if len(gates) != 2 or any(n.op_type != "Sigmoid" for n in gates):
        return "the GRU's update and reset gates are not two Sigmoids of (x, h)"
    reads = [n for n in sig if n.output[0] in pre[id(tanh)]]
    if len(reads) != 1:
        return "the candidate's Tanh does not read exactly one gate (the reset gate)"
    r_node = reads[0]
    z_node = [n for n in sig if n is not r_node][0]
    idx = list(cut_in.values()).index(tanh)
    ones = {**zero_cuts, r_node.output[0]: np.ones((batch, hshape[1]), np.float32)}
    one = _affine(lambda f: probe({**ones, **f}), x, hn, (batch, n_in), hshape, {}, [idx])[0]
    zero = _affine(lambda f: probe({**zero_cuts, **f}), x, hn, (batch, n_in), hshape, {}, [idx])[0]
    if one is None or zero is None:
        return "the candidate's pre-activation is not affine in (x, h) for a fixed reset gate"
    z, r = aff[id(z_node)], aff[id(r_node)]
    n_h = hshape[1]
    out = []
    for lbr in (1, 0):
        wb_n, rb_n = (zero[2], one[2] - zero[2]) if lbr else (one[2], np.zeros(n_h))
        W = np.concatenate([z[0], r[0], one[0]], 1).T[None]
        R = np.concatenate([z[1], r[1], one[1]], 1).T[None]
        B = np.concatenate([z[2], r[2], wb_n, np.zeros(2 * n_h), rb_n])[None]
        out.append(Cell("GRU", W, R, B, lb.carried_in.index(hn), None, {}, lbr))
    return out


def run_cell(cell: Cell, x, h, c):
    """One step of ``cell`` in float64 (ONNX semantics): (h', c')."""
    n_h = cell.R.shape[2]
    W, R, B = cell.W[0], cell.R[0], cell.B[0]
    gates = len(W) // n_h
    wb, rb = B[:gates * n_h], B[gates * n_h:]
    if cell.op == "LSTM":
        a = x @ W.T + h @ R.T + wb + rb
        i, o, f, g = (a[:, k * n_h:(k + 1) * n_h] for k in range(4))
        c2 = _sig(f) * c + _sig(i) * np.tanh(g)
        return _sig(o) * np.tanh(c2), c2
    if cell.op == "RNN":
        return np.tanh(x @ W.T + h @ R.T + wb + rb), None
    xa, ha = x @ W.T + wb, h @ R.T
    z = _sig(xa[:, :n_h] + ha[:, :n_h] + rb[:n_h])
    r = _sig(xa[:, n_h:2 * n_h] + ha[:, n_h:2 * n_h] + rb[n_h:2 * n_h])
    if cell.linear_before_reset:
        n = np.tanh(xa[:, 2 * n_h:] + r * (ha[:, 2 * n_h:] + rb[2 * n_h:]))
    else:
        n = np.tanh(xa[:, 2 * n_h:] + (r * h) @ R[2 * n_h:].T + rb[2 * n_h:])
    return (1 - z) * n + z * h, None


def _verify(cell: Cell, lb: LoopBody, trials, refs, n_h) -> Optional[Dict[int, str]]:
    """carried index -> role when ``cell`` reproduces every output of the body, else None."""
    roles = {}
    for feeds, ref in zip(trials, refs):
        x = np.asarray(feeds[lb.step], np.float64)
        h = np.asarray(feeds[lb.carried_in[cell.h]], np.float64)
        c = np.asarray(feeds[lb.carried_in[cell.c]], np.float64) if cell.c is not None else None
        h2, c2 = run_cell(cell, x, h, c)
        keys = [k for k in lb.states] + [None] * len(lb.scans)
        for key, out in zip(keys, ref):
            tol = TOLERANCE * max(1.0, float(np.abs(out).max(initial=0)))
            match = [name for name, v in (("h", h2), ("c", c2)) if v is not None and v.shape == out.shape
                     and np.abs(v - out).max() <= tol]
            if key is None:
                if "h" not in match:
                    return None
            elif not match or roles.get(key, match[0]) not in match:
                return None
            else:
                roles[key] = roles.get(key, match[0])
    if roles.get(cell.h) != "h" or (cell.c is not None and roles.get(cell.c) != "c"):
        return None
    return roles
