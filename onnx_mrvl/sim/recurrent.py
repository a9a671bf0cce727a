"""LSTM / GRU / RNN layers (docs/program.md) on fp16 values, the way the MLIP runs them.

Lowering (docs/fusion.md, "Recurrent layers"): per direction and timestep the MAC array computes
the gate pre-activations ``x_t W^T + h_{t-1} R^T`` with fp16 operands (W, R, x_t, h_{t-1}) and
fp32 accumulation; the vector unit adds the fp32 biases, applies the cell activations and the
cell update in fp32, and writes ``h_t`` (and the LSTM cell ``c_t``) back to the on-chip memory in
fp16, rounded once per timestep. ``h_t`` is also the timestep's row of Y. GRU without
``linear_before_reset`` multiplies ``r_t * h_{t-1}`` on the vector unit and feeds it to the MAC
array: it is rounded to fp16 first (a MAC operand). The input projection ``x_t W^T`` of all
timesteps is one GEMM here (the same fp32 sums; no rounding in between).

Per-row lengths (``sequence_lens``, data: fp16 integer values): the vector unit selects, per batch
row, the new state where ``t < len[b]`` and the held one past it, and writes 0 to Y there (ONNX's
semantics: forward rows run t = 0..len-1, reverse rows len-1..0 from the initial state).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from .activations import make_activation
from .fp16 import round_fp16_

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
N_ACTS = {"LSTM": 3, "GRU": 2, "RNN": 1}
F32 = np.float32


def _round(x: np.ndarray) -> Tuple[np.ndarray, bool]:
    x = np.ascontiguousarray(x, dtype=F32)
    return x, round_fp16_(x)


class Recurrent:
    """A prepared recurrent layer: ``apply(x [T, B, I]) -> (y [T, D, B, H], finite)``."""

    def __init__(self, cell: str, kernel: np.ndarray, recurrence: np.ndarray, *, bias=None,
                 initial_h=None, initial_c=None, direction: str = "forward",
                 activations: Sequence[Callable] = (), clip: float = 0.0, linear_before_reset: int = 0,
                 cell_state_row: int = 0, peepholes=None, final_state_rows: int = 0):
        if cell not in GATES:
            raise ValueError(f"unknown cell {cell!r} (LSTM, GRU or RNN)")
        dirs = 2 if direction == "bidirectional" else 1
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ValueError(f"unknown direction {direction!r}")
        gates = GATES[cell]
        if kernel.ndim != 3 or recurrence.ndim != 3 or kernel.shape[0] != dirs or recurrence.shape[0] != dirs:
            raise ValueError(f"kernel {list(kernel.shape)} / recurrence {list(recurrence.shape)} are not "
                             f"[{dirs}, G*H, I] / [{dirs}, G*H, H]")
        hid = recurrence.shape[2]
        if kernel.shape[1] != gates * hid or recurrence.shape[1] != gates * hid:
            raise ValueError(f"kernel {list(kernel.shape)} / recurrence {list(recurrence.shape)} do not "
                             f"hold {gates} gates of hidden size {hid}")
        if len(activations) != N_ACTS[cell] * dirs:
            raise ValueError(f"{len(activations)} activations for {dirs} direction(s) of an {cell}")
        self.cell, self.dirs, self.hid, self.gates = cell, dirs, hid, gates
        self.reverse = direction == "reverse"
        self.feat = kernel.shape[2]
        self.wt = [np.ascontiguousarray(kernel[d].T, dtype=F32) for d in range(dirs)]       # [I, G*H]
        self.rt = [np.ascontiguousarray(recurrence[d].T, dtype=F32) for d in range(dirs)]   # [H, G*H]
        b = np.zeros((dirs, 2 * gates * hid), F32) if bias is None else np.asarray(bias, F32).reshape(dirs, -1)
        if b.shape[1] != 2 * gates * hid:
            raise ValueError(f"bias has {b.shape[1]} values per direction, expected {2 * gates * hid}")
        wb, rb = b[:, :gates * hid], b[:, gates * hid:]
        self.lbr = bool(linear_before_reset) and cell == "GRU"
        if self.lbr:   # the h gate's recurrence bias stays inside r * (h R_h^T + Rb_h)
            self.bias = wb + np.concatenate([rb[:, :2 * hid], np.zeros_like(rb[:, 2 * hid:])], axis=1)
            self.rb_h = rb[:, 2 * hid:]
        else:
            self.bias = wb + rb
        self.h0, self.c0 = initial_h, initial_c
        self.acts = [list(activations[d * N_ACTS[cell]:(d + 1) * N_ACTS[cell]]) for d in range(dirs)]
        self.clip = float(clip or 0.0)
        self.peep = None if peepholes is None else np.asarray(peepholes, F32).reshape(dirs, 3, hid)   # i o f
        if self.peep is not None and cell != "LSTM":
            raise ValueError(f"peepholes on an {cell}")
        self.keep_h32 = False   # recurrent_int8.py: Y quantized from the fp32 state
        self.c_row = bool(cell_state_row)
        if self.c_row and cell != "LSTM":
            raise ValueError(f"cell_state_row on an {cell} (only an LSTM has a cell state)")
        self.h_row = bool(final_state_rows)   # row T: each direction's final h (then the c row)
        self.hr_sum = np.matmul               # h R^T of the numpy loop (recurrent_native.sequential_sum: the C order)
        self.use_native = None                # None: the C loop when it takes the layer; False: numpy; a library
        self._native_plan = None

    def _state(self, init, d: int, batch: int) -> np.ndarray:
        if init is None:
            return np.zeros((batch, self.hid), F32)
        init = np.asarray(init, F32).reshape(self.dirs, -1, self.hid)
        if init.shape[1] != batch:
            raise ValueError(f"initial state of batch {init.shape[1]} for an input of batch {batch}")
        return np.array(init[d], dtype=F32)

    def _act(self, fn, x: np.ndarray) -> np.ndarray:
        if self.clip > 0:
            np.clip(x, F32(-self.clip), F32(self.clip), out=x)
        return fn(x)

    def apply(self, x: np.ndarray, initial_h=None, initial_c=None, sequence_lens=None) -> Tuple[np.ndarray, bool]:
        """Y for X [T, B, I]; state inputs (fp16 values, [D, B, H]) replace the initial-state weights;
        ``sequence_lens`` [B]: each row's length (module docstring)."""
        if x.ndim != 3 or x.shape[2] != self.feat:
            raise ValueError(f"input of shape {list(x.shape)} is not [T, B, {self.feat}]")
        active = None if sequence_lens is None else _active(sequence_lens, x.shape[0], x.shape[1])
        h0 = self.h0 if initial_h is None else initial_h
        c0 = self.c0 if initial_c is None else initial_c
        steps, batch = x.shape[0], x.shape[1]
        y = np.empty((steps + self.h_row + self.c_row, self.dirs, batch, self.hid), F32)   # rows T..: Y_h, Y_c
        ok = True
        flat = np.ascontiguousarray(x, dtype=F32).reshape(steps * batch, self.feat)
        so, prepared = self._native()
        for d in range(self.dirs):
            xw = self._xw(d, flat).reshape(steps, batch, -1)
            xw += self.bias[d]
            order = range(steps - 1, -1, -1) if (self.reverse or d == 1) else range(steps)
            h = self._state(h0, d, batch)
            c = self._state(c0, d, batch) if self.cell == "LSTM" else None
            step = {"LSTM": self._lstm, "GRU": self._gru, "RNN": self._rnn}[self.cell]
            if prepared is not None:
                from . import recurrent_native
                ok = recurrent_native.run(so, self, prepared, d, np.ascontiguousarray(xw), h, c, active, y) and ok
                order = ()
            for t in order:
                h2, c2, fin = step(d, xw[t], h, c)
                ok = ok and fin
                if active is None:
                    h, c = h2, c2
                    y[t, d] = self._row(h)
                    continue
                on = active[t]
                h = np.where(on, h2, h)
                c = np.where(on, c2, c) if c is not None else None
                y[t, d] = np.where(on, self._row(h2), F32(0))   # past the length: 0 (an int8 Y: the code of 0)
            if self.h_row:
                y[steps, d] = h
            if self.c_row:
                y[steps + self.h_row, d] = c
        return y, ok

    def _native(self):
        """(library, per-direction plan) of the C loop (recurrent_native.py), or (None, None): numpy."""
        so = self.use_native
        if so is None:
            from . import native, recurrent_native
            so = recurrent_native.lib() if native.on() else None
        if not so:
            return None, None
        if self._native_plan is None:
            from . import recurrent_native
            self._native_plan = recurrent_native.plan(self) or False
        return (so, self._native_plan) if self._native_plan else (None, None)

    def _h(self, hf: np.ndarray) -> Tuple[np.ndarray, bool]:
        """The new state rounded to fp16 (``hf``: fp32; kept as ``self.h32`` for a layer that
        quantizes its output from the fp32 value, recurrent_int8.py)."""
        self.h32 = hf
        return _round(hf.copy() if self.keep_h32 else hf)

    def _row(self, h: np.ndarray) -> np.ndarray:
        """The timestep's row of Y: the fp16 state."""
        return h

    def _xw(self, d: int, flat: np.ndarray) -> np.ndarray:
        """The input projection of every timestep, [T*B, G*H]: fp32 sums of fp16 products."""
        return flat @ self.wt[d]

    def _hr(self, d: int, h: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """``h R^T`` for the gate columns [lo, hi) of direction ``d``: fp32 sums of fp16 products."""
        return self.hr_sum(h, self.rt[d][:, lo:hi])

    def _lstm(self, d, xw, h, c):
        H = self.hid
        g = xw + self._hr(d, h, 0, 4 * H)
        f_, g_, h_ = self.acts[d]
        if self.peep is not None:   # the vector unit adds P * c (fp32): c_{t-1} for i and f, c_t for o
            pi, po, pf = self.peep[d]
            g[:, :H] += pi * c
            g[:, 2 * H:3 * H] += pf * c
        i = self._act(f_, g[:, :H].copy())
        f = self._act(f_, g[:, 2 * H:3 * H].copy())
        cc = self._act(g_, g[:, 3 * H:].copy())
        c, ok_c = _round(f * c + i * cc)
        go = g[:, H:2 * H].copy()
        if self.peep is not None:
            go += po * c
        o = self._act(f_, go)
        h, ok_h = self._h(o * self._act(h_, c.copy()))
        return h, c, ok_c and ok_h

    def _gru(self, d, xw, h, c):
        H = self.hid
        f_, g_ = self.acts[d]
        hr = self._hr(d, h, 0, 2 * H)
        z = self._act(f_, xw[:, :H] + hr[:, :H])
        r = self._act(f_, xw[:, H:2 * H] + hr[:, H:])
        if self.lbr:
            hh = xw[:, 2 * H:] + r * (self._hr(d, h, 2 * H, 3 * H) + self.rb_h[d])
        else:
            rh, _ = _round(r * h)             # a MAC operand: fp16
            hh = xw[:, 2 * H:] + self._hr(d, rh, 2 * H, 3 * H)
        hh = self._act(g_, np.ascontiguousarray(hh))
        h, ok = self._h((F32(1) - z) * hh + z * h)
        return h, None, ok

    def _rnn(self, d, xw, h, c):
        (f_,) = self.acts[d]
        h, ok = self._h(self._act(f_, xw + self._hr(d, h, 0, self.hid)))
        return h, None, ok


def _active(lens, steps: int, batch: int) -> np.ndarray:
    """[T, B, 1] bool: step t of row b runs (t < len[b]); lengths must be integers in [0, T]."""
    v = np.asarray(lens, np.float64).reshape(-1)
    if v.size != batch or not np.all(np.isfinite(v)) or np.any(v != np.round(v)) or v.min(initial=0) < 0 \
            or v.max(initial=0) > steps:
        raise ValueError(f"sequence_lens {v.tolist()} are not {batch} integers in [0, {steps}]")
    return (np.arange(steps)[:, None] < v[None, :])[:, :, None]


def activation_fns(names: Sequence[str], alphas: Optional[Sequence[float]],
                   betas: Optional[Sequence[float]]) -> List[Callable]:
    """Bound activation functions (sim names: sigmoid, tanh, relu, hard_sigmoid, leaky_relu)."""
    out = []
    for k, name in enumerate(names):
        params = {}
        if name == "hard_sigmoid":
            params = {"alpha": float(alphas[k]), "beta": float(betas[k])}
        elif name == "leaky_relu":
            params = {"alpha": float(alphas[k])}
        elif name not in ("sigmoid", "tanh", "relu"):
            raise ValueError(f"cell activation {name!r} (sigmoid, tanh, relu, hard_sigmoid or leaky_relu)")
        fn = make_activation(name, params)
        out.append(fn)
    return out


def build(spec, n_inputs: int):
    """The prepared closure of a program layer ``LSTM`` / ``GRU`` / ``RNN`` (``spec``: a
    sim.layers.LayerSpec); errors name the layer."""
    states = [str(x) for x in spec.param("state_inputs", [])]
    if n_inputs != 1 + len(states) or any(x not in ("initial_h", "initial_c", "sequence_lens") for x in states):
        raise spec.error(f"takes X and the state inputs {states}, the program gives {n_inputs} inputs")
    cell = spec.layer_name.upper()
    names = [str(a) for a in spec.param("activations", required=True)]
    try:
        acts = activation_fns(names, spec.param("activation_alpha", [0.0] * len(names)),
                              spec.param("activation_beta", [0.0] * len(names)))
        common = dict(bias=spec.weight("bias"), initial_h=spec.weight("initial_h"),
                      initial_c=spec.weight("initial_c"), direction=str(spec.param("direction", "forward")),
                      activations=acts, clip=float(spec.param("clip", 0.0)),
                      linear_before_reset=int(spec.param("linear_before_reset", 0)),
                      cell_state_row=int(spec.param("cell_state_row", 0)), peepholes=spec.weight("peepholes"),
                      final_state_rows=int(spec.param("final_state_rows", 0)))
        precision = str(spec.param("precision", "float16"))
        if precision in ("int8_in", "int8"):   # int8 W / R codes, int8 input projection (recurrent_int8.py)
            from .recurrent_int8 import build as build_int8
            layer = build_int8(spec, cell, common)
        elif precision == "float16":
            layer = Recurrent(cell, spec.weight("kernel", required=True), spec.weight("recurrence", required=True),
                              **common)
        else:
            raise ValueError(f"precision {precision!r} of a recurrent layer (float16, int8_in or int8)")
    except (ValueError, IndexError, TypeError, KeyError) as exc:
        raise spec.error(str(exc)) from None
    if int(spec.param("hidden_size", layer.hid)) != layer.hid:
        raise spec.error(f"hidden_size {spec.param('hidden_size')} does not match the recurrence "
                         f"kernel's {layer.hid}")
    if not states:
        return layer.apply
    want = (layer.dirs, None, layer.hid)

    def run(x, *state):
        for role, v in zip(states, state):
            if role == "sequence_lens":
                continue
            if v.ndim != 3 or v.shape[0] != want[0] or v.shape[2] != want[2] or v.shape[1] != x.shape[1]:
                raise ValueError(f"{role} of shape {list(v.shape)} is not [{layer.dirs}, {x.shape[1]}, {layer.hid}]")
        return layer.apply(x, **dict(zip(states, state)))
    return run
