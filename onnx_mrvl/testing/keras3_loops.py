"""Keras 3 recurrent layers as tf2onnx 1.17 writes them: an ONNX ``Loop`` per layer (seeded weights,
onnx.helper only; the forms read from real exports of TF 2.21 / Keras 3.15, docs/surveys/tensorflow.md).

The Loop: trip count ``T`` (an int64 constant), initial condition ``And(Less(c0, c1), Less(c0, c1))``
of float constants, loop-carried ``[time (int32, 0), h, (c,) weights...]`` (the weights passed
through the body unchanged), scan output h. The body reads ``Gather(X, time)`` of the outer
``[T, B, I]`` input, computes Keras' cell (LSTM gates i, f, c, o in one ``Gemm(x, W, h @ R) + b``
block split 4 ways; GRU ``reset_after=True`` with the bias ``[2, 3H]`` split into input and recurrent
halves and the recurrent block sliced, or ``reset_after=False`` with ``(r * h) @ R_h``; SimpleRNN
``tanh(x W + h R + b)``), returns ``time + 1`` and the condition
``Less(float(time + 1), T) and Less(float(iter), T)``. Batch 1: tf2onnx squeezes the recurrent
product to ``[G*H]`` before the Gemm (a ``Squeeze`` without axes), as in its exports.

``direction="backward"``: Keras' ``go_backwards`` -- ReverseSequence of the input (full lengths)
before the loop; ``"bidirectional"``: forward and backward loops, the backward output reversed back,
Concat on the features. ``mask=True``: Keras' Masking -- the body also reads a ``[T, B, 1]`` mask
and keeps the previous state where it is 0 (not an ONNX LSTM: refused with the reason).
``variant="no_output_tanh"``: an LSTM-like body with ``h' = o * c'`` (refused). ``dynamic=True``: the
time axis exported as dynamic -- the trip count and the body's bound ``T`` are ``Gather(Shape(x), 0)``
(an outer-scope value in the body), the input ``[B, "T", I]``: converted with ``input_shapes``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


class _B:
    """Node / initializer collector for one graph (the outer graph or a body)."""

    def __init__(self, prefix: str):
        self.p, self.nodes, self.inits, self.k = prefix, [], [], 0

    def name(self, tag):
        self.k += 1
        return f"{self.p}{tag}_{self.k}"

    def const(self, v, tag="c"):
        n = self.name(tag)
        self.inits.append(numpy_helper.from_array(np.asarray(v), n))
        return n

    def op(self, op, ins, tag=None, n_out=1, **attrs):
        outs = [self.name(tag or op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(ins), outs, name=self.name(op), **attrs))
        return outs if n_out > 1 else outs[0]


def _gates(b: _B, cell: str, xt: str, h: str, c, w: dict, hid: int, batch: int, variant: str):
    """Keras' cell in the body: (h', c' or None)."""
    if cell == "lstm":
        rec = b.op("MatMul", [h, w["R"]])
        if batch == 1:
            rec = b.op("Squeeze", [rec])
        z = b.op("Add", [b.op("Gemm", [xt, w["W"], rec]), w["b"]])
        i, f, g, o = b.op("Split", [z], n_out=4, axis=1)
        c2 = b.op("Add", [b.op("Mul", [b.op("Sigmoid", [f]), c]), b.op("Mul", [b.op("Sigmoid", [i]), b.op("Tanh", [g])])])
        out = c2 if variant == "no_output_tanh" else b.op("Tanh", [c2])
        return b.op("Mul", [b.op("Sigmoid", [o]), out]), c2
    if cell == "simple":
        rec = b.op("MatMul", [h, w["R"]])
        return b.op("Tanh", [b.op("Add", [b.op("Add", [b.op("MatMul", [xt, w["W"]]), w["b"]]), rec])]), None
    if cell == "gru":    # reset_after=True: bias [2, 3H] = input, recurrent halves
        bi, br = b.op("Split", [w["b"]], n_out=2, axis=0)
        ax = b.const(np.array([0], np.int64))
        xz, xr, xh = b.op("Split", [b.op("Gemm", [xt, w["W"], b.op("Squeeze", [bi, ax])])], n_out=3, axis=-1)
        hm = b.op("Gemm", [h, w["R"], b.op("Squeeze", [br, ax])])
        hz, hr, hh = (b.op("Slice", [hm, b.const(np.array([s * hid], np.int64)), b.const(np.array([(s + 1) * hid], np.int64)),
                                     b.const(np.array([1], np.int64))]) for s in range(3))
        r = b.op("Sigmoid", [b.op("Add", [xr, hr])])
        cand = b.op("Tanh", [b.op("Add", [xh, b.op("Mul", [r, hh])])])
    else:                # gru_v1: reset_after=False, (r * h) @ R_h
        xz, xr, xh = b.op("Split", [b.op("Add", [b.op("MatMul", [xt, w["W"]]), w["b"]])], n_out=3, axis=1)
        hzr = b.op("MatMul", [h, w["Rzr"]])
        hz, hr = b.op("Split", [hzr], n_out=2, axis=1)
        r = b.op("Sigmoid", [b.op("Add", [xr, hr])])
        cand = b.op("Tanh", [b.op("Add", [xh, b.op("MatMul", [b.op("Mul", [r, h]), w["Rh"]])])])
    z = b.op("Sigmoid", [b.op("Add", [xz, hz])])
    one = b.const(np.array(1.0, np.float32))
    return b.op("Add", [b.op("Mul", [z, h]), b.op("Mul", [b.op("Sub", [one, z]), cand])]), None


def _layer(outer: _B, x: str, cell: str, steps: int, batch: int, hid: int, feat: int, rng, tag: str,
           mask=None, h0=None, variant: str = "", dynamic: bool = False):
    """One Keras 3 recurrent layer as a Loop over ``x`` [T, B, I] -> (scan [T, B, H], final h)."""
    gates = {"lstm": 4, "gru": 3, "gru_v1": 3, "simple": 1}[cell]
    s = 1.0 / np.sqrt(hid)
    wv = {"W": rng.uniform(-s, s, (feat, gates * hid)).astype(np.float32),
          "R": rng.uniform(-s, s, (hid, gates * hid)).astype(np.float32),
          "b": rng.uniform(-s, s, ((2, 3 * hid) if cell == "gru" else (gates * hid,))).astype(np.float32)}
    if cell == "gru_v1":
        wv["Rzr"], wv["Rh"] = wv["R"][:, :2 * hid].copy(), wv["R"][:, 2 * hid:].copy()
        del wv["R"]
    body = _B(f"{tag}/body/")
    it, cond_in, time = f"{tag}/iter", f"{tag}/cond_in", f"{tag}/time"
    h, c = f"{tag}/h", f"{tag}/c"
    winner = {k: f"{tag}/{k}" for k in wv}
    xt = body.op("Gather", [x, time], "x_t", axis=0)
    h2, c2 = _gates(body, cell, xt, h, c, winner, hid, batch, variant)
    if mask is not None:
        m = body.op("Gather", [mask, time], "m_t", axis=0)
        keep = body.op("Sub", [body.const(np.array(1.0, np.float32)), m])
        h2 = body.op("Add", [body.op("Mul", [m, h2]), body.op("Mul", [keep, h])])
        if c2 is not None:
            c2 = body.op("Add", [body.op("Mul", [m, c2]), body.op("Mul", [keep, c])])
    t2 = body.op("Add", [time, body.const(np.array(1, np.int32))], "time_next")
    if dynamic:   # T from the input's shape (a time axis exported as dynamic): an outer-scope value
        t_len = outer.op("Gather", [outer.op("Shape", [x]), outer.const(np.array(0, np.int64))], axis=0)
        tf_ = outer.op("Cast", [t_len], to=F)
    else:
        tf_ = body.const(np.array(float(steps), np.float32))
    cond = body.op("And", [body.op("Less", [body.op("Cast", [t2], to=F), tf_]),
                           body.op("Less", [body.op("Cast", [it], to=F), tf_])], "cond")
    h_out = body.op("Identity", [h2], "h_out")
    states = [h] + ([c] if c2 is not None else [])
    b_in = [helper.make_tensor_value_info(it, I64, []), helper.make_tensor_value_info(cond_in, TensorProto.BOOL, []),
            helper.make_tensor_value_info(time, I32, [])] + \
        [helper.make_tensor_value_info(t, F, [batch, hid]) for t in states] + \
        [helper.make_tensor_value_info(winner[k], F, list(v.shape)) for k, v in wv.items()]
    b_out = [helper.make_tensor_value_info(cond, TensorProto.BOOL, []), helper.make_tensor_value_info(t2, I32, []),
             helper.make_tensor_value_info(h_out, F, [batch, hid])] + \
        ([helper.make_tensor_value_info(c2, F, [batch, hid])] if c2 is not None else []) + \
        [helper.make_tensor_value_info(winner[k], F, list(v.shape)) for k, v in wv.items()] + \
        [helper.make_tensor_value_info(h2, F, [batch, hid])]
    graph = helper.make_graph(body.nodes, f"{tag}_body", b_in, b_out, body.inits)
    c0 = outer.const(np.array(0.0, np.float32), "c0")
    c1 = tf_ if dynamic else outer.const(np.array(float(steps), np.float32), "c1")
    less = outer.op("Less", [c0, c1])
    zeros = outer.const(np.zeros((batch, hid), np.float32), "zeros")
    ins = [t_len if dynamic else outer.const(np.array(steps, np.int64), "max"), outer.op("And", [less, less]),
           outer.const(np.array(0, np.int32), "t0"), h0 or zeros] + ([zeros] if c2 is not None else []) + \
        [outer.const(v, k) for k, v in wv.items()]
    n_out = len(ins) - 2 + 1
    outs = outer.op("Loop", ins, f"{tag}/loop", n_out=n_out, body=graph)
    return outs[-1], outs[1]


def keras3_rnn(cell: str = "lstm", *, steps: int = 10, batch: int = 1, feat: int = 8, hid: int = 16, seed: int = 0,
               direction: str = "forward", return_sequences: bool = True, stacked: bool = False,
               mask: bool = False, state_input: bool = False, variant: str = "", dynamic: bool = False) -> onnx.ModelProto:
    """``x [B, T, I]`` (Keras' batch-major input; tf2onnx's Transpose to time-major) -> a Keras 3 layer
    (two when ``stacked``: the second with half the units) -> ``[B, T, H']`` or the last step ``[B, H']``."""
    rng = np.random.default_rng(seed)
    outer = _B("")
    inputs = [helper.make_tensor_value_info("x", F, [batch, "T" if dynamic else steps, feat])]
    xt = outer.op("Transpose", ["x"], "x_tbi", perm=[1, 0, 2])
    m = None
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", F, [steps, batch, 1]))
        m = "mask"
    h0 = None
    if state_input:
        inputs.append(helper.make_tensor_value_info("h0", F, [batch, hid]))
        h0 = "h0"

    def full_lengths(t):
        return outer.const(np.full(batch, steps, np.int64), "lens")

    def one(x, units, feat_in, tag, back, first):
        src = outer.op("ReverseSequence", [x, full_lengths(x)], batch_axis=1, time_axis=0) if back else x
        return _layer(outer, src, cell, steps, batch, units, feat_in, rng, tag, m, h0 if first else None, variant,
                      dynamic)

    layers = [hid] + ([hid // 2] if stacked else [])
    y, feat_in = xt, feat
    for li, units in enumerate(layers):
        last = li == len(layers) - 1
        seq, fin = one(y, units, feat_in, f"l{li}f", direction == "backward", li == 0)
        if direction == "bidirectional":
            bseq, bfin = one(y, units, feat_in, f"l{li}b", True, False)
            bseq = outer.op("ReverseSequence", [bseq, full_lengths(bseq)], batch_axis=1, time_axis=0)
            seq = outer.op("Concat", [seq, bseq], axis=2)
            fin = outer.op("Concat", [fin, bfin], axis=1)
            units *= 2
        y, feat_in = (seq if not last or return_sequences else fin), units
    out = outer.op("Transpose", [y], "y", perm=[1, 0, 2]) if y != fin else y
    width = feat_in
    shape = [batch, "T" if dynamic else steps, width] if y != fin else [batch, width]
    graph = helper.make_graph(outer.nodes, "keras3_rnn", inputs, [helper.make_tensor_value_info(out, F, shape)],
                              outer.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model
