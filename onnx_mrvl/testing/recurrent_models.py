"""Small recurrent models with seeded weights (no downloads): one ONNX LSTM / GRU / RNN node in
every variant the accelerator layer takes, and conv front ends feeding one.

``cell_model(cell, direction=..., layout=..., ...)`` -> onnx.ModelProto with input ``x`` and output
``y`` (the op's Y, optionally through a Transpose/Reshape head). ``conv_gru_hidden`` and
``crnn_batch2_layout1`` are end-to-end models (conv backbone -> recurrent layer -> FC).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(nodes, inits, x_shape, outputs, opset=14):
    g = helper.make_graph(nodes, "recurrent", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def recurrent_node(rng, cell: str, name: str, x: str, inits: dict, *, feat: int, hid: int, batch: int,
                   direction: str = "forward", layout: int = 0, bias: bool = True, initial: bool = False,
                   seq_lens: Optional[int] = None, activations: Optional[Sequence[str]] = None,
                   alpha: Optional[Sequence[float]] = None, beta: Optional[Sequence[float]] = None,
                   clip: Optional[float] = None, linear_before_reset: int = 0, outputs=("y",),
                   peepholes: bool = False):
    """One ONNX recurrent node with seeded weights (uniform +-1/sqrt(H), as PyTorch initialises)."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[cell]
    s = 1.0 / np.sqrt(hid)
    u = lambda *shape: rng.uniform(-s, s, shape).astype(np.float32)   # noqa: E731
    inits[f"{name}.W"], inits[f"{name}.R"] = u(dirs, g * hid, feat), u(dirs, g * hid, hid)
    ins = [x, f"{name}.W", f"{name}.R", "", "", ""]
    if bias:
        inits[f"{name}.B"] = u(dirs, 2 * g * hid)
        ins[3] = f"{name}.B"
    if seq_lens is not None:
        inits[f"{name}.seq"] = np.full(batch, seq_lens, np.int32)
        ins[4] = f"{name}.seq"
    if initial:   # drawn as [D, B, H]; layout 1 stores them [B, D, H] (ONNX)
        order = (1, 0, 2) if layout else (0, 1, 2)
        state = lambda: (rng.standard_normal((dirs, batch, hid)) * 0.5).astype(np.float32).transpose(order).copy()  # noqa: E731,E501
        inits[f"{name}.h0"] = state()
        ins[5] = f"{name}.h0"
        if cell == "LSTM":
            inits[f"{name}.c0"] = state()
            ins.append(f"{name}.c0")
    if peepholes:   # LSTM P [D, 3H] (i o f)
        inits[f"{name}.P"] = u(dirs, 3 * hid)
        ins += [""] * (7 - len(ins)) + [f"{name}.P"]
    while ins[-1] == "":
        ins.pop()
    kw = dict(hidden_size=hid, direction=direction)
    if layout:
        kw["layout"] = layout
    if activations:
        kw["activations"] = list(activations)
    if alpha:
        kw["activation_alpha"] = list(alpha)
    if beta:
        kw["activation_beta"] = list(beta)
    if clip:
        kw["clip"] = clip
    if cell == "GRU":
        kw["linear_before_reset"] = linear_before_reset
    return helper.make_node(cell, ins, list(outputs), name=name, **kw)


def cell_model(cell: str, *, steps: int = 12, batch: int = 1, feat: int = 16, hid: int = 20,
               seed: int = 0, head: bool = False, outputs=("y",), layout0_reference: bool = False,
               **kw) -> onnx.ModelProto:
    """x [T, B, I] (layout 0) or [B, T, I] (layout 1) -> one recurrent node -> y; ``head``: Y goes
    through the PyTorch concat-directions idiom (Transpose + Reshape to [T, B, D*H]) and a MatMul.

    ``layout0_reference``: a layout-1 model written as ONNX defines it, Transpose -> layout-0 op ->
    Transpose, with the same weights (onnxruntime 1.31 refuses layout 1: the reference for it)."""
    rng = np.random.default_rng(seed)
    layout = kw.get("layout", 0)
    x_shape = [steps, batch, feat] if layout == 0 else [batch, steps, feat]
    inits: dict = {}
    y = "y" if not head else "y_seq"
    outs = [y if outputs[0] else ""] + [o for o in outputs[1:]]   # outputs[0] "": no Y (Y_h only)
    if layout and layout0_reference:
        kw = dict(kw, layout=0)
        extra = [o + "_dbh" if o else "" for o in outputs[1:]]
        node = recurrent_node(rng, cell, "rnn", "x_tbi", inits, feat=feat, hid=hid, batch=batch,
                              outputs=[y + "_tdbh" if outputs[0] else ""] + extra, **kw)
        nodes = [helper.make_node("Transpose", ["x"], ["x_tbi"], perm=[1, 0, 2]), node]
        if outputs[0]:
            nodes.append(helper.make_node("Transpose", [y + "_tdbh"], [y], perm=[2, 0, 1, 3]))
        nodes += [helper.make_node("Transpose", [o + "_dbh"], [o], perm=[1, 0, 2]) for o in outputs[1:] if o]
    else:
        nodes = [recurrent_node(rng, cell, "rnn", "x", inits, feat=feat, hid=hid, batch=batch, outputs=outs, **kw)]
    if head:
        dirs = 2 if kw.get("direction") == "bidirectional" else 1
        perm = [0, 2, 1, 3] if layout == 0 else [0, 1, 2, 3]
        inits["head.shape"] = np.array([0, 0, dirs * hid], np.int64)
        inits["head.w"] = (rng.standard_normal((dirs * hid, 7)) / np.sqrt(dirs * hid)).astype(np.float32)
        nodes += [helper.make_node("Transpose", [y], ["y_t"], name="head.transpose", perm=perm),
                  helper.make_node("Reshape", ["y_t", "head.shape"], ["y_r"], name="head.reshape"),
                  helper.make_node("MatMul", ["y_r", "head.w"], ["y"], name="head.matmul")]
    return _model(nodes, inits, x_shape, (["y"] if outputs[0] else []) + [o for o in outputs[1:] if o], opset=14)


def _conv(rng, inits, name, x, cin, cout, k):
    inits[f"{name}.w"] = (rng.standard_normal((cout, cin) + k) / np.sqrt(cin * np.prod(k))).astype(np.float32)
    inits[f"{name}.b"] = (rng.standard_normal(cout) * 0.05).astype(np.float32)
    return [helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.c"], name=name,
                             kernel_shape=list(k), pads=[kk // 2 for kk in k] * 2),
            helper.make_node("Relu", [f"{name}.c"], [f"{name}.y"], name=f"{name}.relu")]


def _recurrent_layout1(rng, cell, name, x, inits, reference: bool, y: str, **kw):
    """A layout-1 recurrent node, or (``reference``) its layout-0 equivalent between Transposes."""
    if not reference:
        return [recurrent_node(rng, cell, name, x, inits, layout=1, outputs=(y,), **kw)]
    node = recurrent_node(rng, cell, name, f"{x}_tbi", inits, outputs=(f"{y}_tdbh",), **kw)
    return [helper.make_node("Transpose", [x], [f"{x}_tbi"], perm=[1, 0, 2]), node,
            helper.make_node("Transpose", [f"{y}_tdbh"], [y], perm=[2, 0, 1, 3])]


def crnn_batch2_layout1(seed: int = 0, reference: bool = False) -> onnx.ModelProto:
    """Keras-style CRNN at batch 2: [2,1,16,40] -> 2 convs -> Reshape/Transpose to [B, T, C]
    -> BiLSTM (layout 1) -> [B, T, 2H] -> MatMul + Add."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    nodes = _conv(rng, inits, "conv0", "x", 1, 8, (3, 3))
    nodes.append(helper.make_node("MaxPool", ["conv0.y"], ["p0"], name="pool0", kernel_shape=[2, 2], strides=[2, 2]))
    nodes += _conv(rng, inits, "conv1", "p0", 8, 12, (3, 3))                      # [2,12,8,20]
    nodes.append(helper.make_node("MaxPool", ["conv1.y"], ["p1"], name="pool1", kernel_shape=[2, 1], strides=[2, 1]))
    inits["seq.shape"] = np.array([2, 48, 20], np.int64)                           # [2,12*4,20]
    nodes += [helper.make_node("Reshape", ["p1", "seq.shape"], ["seq"], name="to_seq"),
              helper.make_node("Transpose", ["seq"], ["seq_t"], name="to_btc", perm=[0, 2, 1])]  # [2,20,48]
    nodes += _recurrent_layout1(rng, "LSTM", "lstm", "seq_t", inits, reference, "lstm_y", feat=48, hid=16,
                                batch=2, direction="bidirectional")               # [2,20,2,16]
    inits["head.shape"] = np.array([2, 20, 32], np.int64)
    inits["fc.w"] = (rng.standard_normal((32, 11)) / np.sqrt(32)).astype(np.float32)
    inits["fc.b"] = (rng.standard_normal(11) * 0.05).astype(np.float32)
    nodes += [helper.make_node("Reshape", ["lstm_y", "head.shape"], ["feat"], name="head.reshape"),
              helper.make_node("MatMul", ["feat", "fc.w"], ["fc.mm"], name="fc.matmul"),
              helper.make_node("Add", ["fc.mm", "fc.b"], ["y"], name="fc.add")]
    return _model(nodes, inits, [2, 1, 16, 40], ["y"])


def conv_gru_last(seed: int = 0, reference: bool = False) -> onnx.ModelProto:
    """Audio classifier written batch-first: [1,40,64] -> Conv1d+ReLU -> Transpose to [B, T, C]
    -> GRU (layout 1, initial state) -> y[:, -1] (Gather axis 1) -> Gemm."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    nodes = _conv(rng, inits, "conv", "x", 40, 24, (3,))                          # [1,24,64]
    nodes.append(helper.make_node("Transpose", ["conv.y"], ["seq"], name="to_btc", perm=[0, 2, 1]))
    nodes += _recurrent_layout1(rng, "GRU", "gru", "seq", inits, reference, "gru_y", feat=24, hid=32, batch=1,
                                initial=True, linear_before_reset=0)              # [1,64,1,32]
    inits["last"] = np.array(-1, np.int64)
    inits["sq.axes"] = np.array([2], np.int64)
    inits["fc.w"] = (rng.standard_normal((5, 32)) / np.sqrt(32)).astype(np.float32)
    inits["fc.b"] = (rng.standard_normal(5) * 0.05).astype(np.float32)
    nodes += [helper.make_node("Squeeze", ["gru_y", "sq.axes"], ["gru_s"], name="squeeze"),   # [1,64,32]
              helper.make_node("Gather", ["gru_s", "last"], ["gru_last"], name="last_step", axis=1),
              helper.make_node("Gemm", ["gru_last", "fc.w", "fc.b"], ["y"], name="fc", transB=1)]
    return _model(nodes, inits, [1, 40, 64], ["y"])


def _unrolled_lstm(rng, inits, nodes, x: str, *, steps: int, batch: int, feat: int, hid: int,
                   batch_first: bool, prefix: str = "lstm") -> str:
    """An LSTM unrolled the way exporters write a loop over timesteps, appended to ``nodes``.

    time-major (PyTorch, LSTMCell in a Python loop, traced): x[t] (Gather), Gemm(x_t, W_ih^T, b_ih)
    + Gemm(h, W_hh^T, b_hh), chunk(4) (Split axis 1), sigmoid/tanh, c = f*c + i*g, h = o*tanh(c),
    torch.stack (Unsqueeze axis 0 + Concat axis 0); zero initial state as constants.
    batch-first (Keras via tf2onnx, unroll=True): tf.unstack (Split axis 1 + Squeeze), MatMul(x_t, W)
    + MatMul(h, U) + bias Add, gates i f c o by Slice on the last axis, ExpandDims + Concat axis 1.
    Returns the name of the stacked output ([T, B, H] or [B, T, H])."""
    s = 1.0 / np.sqrt(hid)
    u = lambda *shape: rng.uniform(-s, s, shape).astype(np.float32)   # noqa: E731
    p = prefix
    inits[f"{p}.w"], inits[f"{p}.r"] = u(4 * hid, feat), u(4 * hid, hid)
    inits[f"{p}.bw"], inits[f"{p}.br"] = u(4 * hid), u(4 * hid)
    inits[f"{p}.wt"], inits[f"{p}.rt"] = inits[f"{p}.w"].T.copy(), inits[f"{p}.r"].T.copy()
    inits[f"{p}.b"] = inits[f"{p}.bw"] + inits[f"{p}.br"]
    inits[f"{p}.h0"] = np.zeros((batch, hid), np.float32)
    inits[f"{p}.c0"] = np.zeros((batch, hid), np.float32)
    inits[f"{p}.ax0"], inits[f"{p}.ax1"] = np.array([0], np.int64), np.array([1], np.int64)
    def node(op, ins, out, **kw):
        """Append a node named after its (first) output; returns the output name(s)."""
        outs = [out] if isinstance(out, str) else list(out)
        nodes.append(helper.make_node(op, ins, outs, name=outs[0], **kw))
        return out
    if batch_first:
        xs = node("Split", [x], [f"{p}.unstack_{t}" for t in range(steps)], axis=1)
        xs = [node("Squeeze", [o, f"{p}.ax1"], f"{o}.sq") for o in xs]
        for k, (a, b) in enumerate(((0, hid), (hid, 2 * hid), (2 * hid, 3 * hid), (3 * hid, 4 * hid))):
            inits[f"{p}.s{k}"], inits[f"{p}.e{k}"] = np.array([a], np.int64), np.array([b], np.int64)
    h, c, outs = f"{p}.h0", f"{p}.c0", []
    for t in range(steps):
        q = f"{p}.t{t}"
        if batch_first:
            xw = node("MatMul", [xs[t], f"{p}.wt"], f"{q}.xw")
            hr = node("MatMul", [h, f"{p}.rt"], f"{q}.hr")
            z = node("Add", [node("Add", [xw, hr], f"{q}.add"), f"{p}.b"], f"{q}.bias")
            i_, f_, g_, o_ = (node("Slice", [z, f"{p}.s{k}", f"{p}.e{k}", f"{p}.ax1"], f"{q}.gate{k}")
                              for k in range(4))   # Keras: i f c o
        else:
            inits[f"{q}.idx"] = np.array(t, np.int64)
            xt = node("Gather", [x, f"{q}.idx"], f"{q}.x", axis=0)
            xw = node("Gemm", [xt, f"{p}.w", f"{p}.bw"], f"{q}.xw", transB=1)
            hr = node("Gemm", [h, f"{p}.r", f"{p}.br"], f"{q}.hr", transB=1)
            z = node("Add", [xw, hr], f"{q}.add")
            i_, f_, g_, o_ = node("Split", [z], [f"{q}.chunk{k}" for k in range(4)], axis=1)  # PyTorch: i f g o
        i_ = node("Sigmoid", [i_], f"{q}.i")
        f_ = node("Sigmoid", [f_], f"{q}.f")
        g_ = node("Tanh", [g_], f"{q}.g")
        o_ = node("Sigmoid", [o_], f"{q}.o")
        c = node("Add", [node("Mul", [f_, c], f"{q}.fc"), node("Mul", [i_, g_], f"{q}.ig")], f"{q}.c")
        h = node("Mul", [o_, node("Tanh", [c], f"{q}.tc")], f"{q}.h")
        outs.append(node("Unsqueeze", [h, f"{p}.ax1" if batch_first else f"{p}.ax0"], f"{q}.h_u"))
    return node("Concat", outs, f"{p}.stack", axis=1 if batch_first else 0)


def crnn_unrolled(seed: int = 0, batch_first: bool = False, steps: int = 10) -> onnx.ModelProto:
    """CRNN whose LSTM an exporter unrolled: [1,1,16,4*steps] -> 2 convs -> [T, 1, C] (or [1, T, C])
    -> unrolled LSTM (hidden 16) -> MatMul + Add. 21 CPU-bound per-step ops before this change."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    nodes = _conv(rng, inits, "conv0", "x", 1, 8, (3, 3))
    nodes.append(helper.make_node("MaxPool", ["conv0.y"], ["p0"], name="pool0", kernel_shape=[2, 2], strides=[2, 2]))
    nodes += _conv(rng, inits, "conv1", "p0", 8, 12, (3, 3))                      # [1,12,8,2T]
    nodes.append(helper.make_node("MaxPool", ["conv1.y"], ["p1"], name="pool1", kernel_shape=[8, 2], strides=[8, 2]))
    inits["seq.shape"] = np.array([1, 12, steps], np.int64)
    nodes.append(helper.make_node("Reshape", ["p1", "seq.shape"], ["seq"], name="to_seq"))       # [1,12,T]
    nodes.append(helper.make_node("Transpose", ["seq"], ["seq_t"], name="to_tbc",
                                  perm=[0, 2, 1] if batch_first else [2, 0, 1]))
    y = _unrolled_lstm(rng, inits, nodes, "seq_t", steps=steps, batch=1, feat=12, hid=16, batch_first=batch_first)
    inits["fc.w"] = (rng.standard_normal((16, 9)) / 4.0).astype(np.float32)
    inits["fc.b"] = (rng.standard_normal(9) * 0.05).astype(np.float32)
    nodes += [helper.make_node("MatMul", [y, "fc.w"], ["fc.mm"], name="fc.matmul"),
              helper.make_node("Add", ["fc.mm", "fc.b"], ["y"], name="fc.add")]
    return _model(nodes, inits, [1, 1, 16, 4 * steps], ["y"], opset=13)


def conv_gru_hidden(seed: int = 0) -> onnx.ModelProto:
    """PyTorch audio classifier on the last hidden state: [1,40,50] -> Conv1d+ReLU -> permute to
    [T, B, C] -> BiGRU, ``_, h_n = gru(x)`` -> ``fc(h_n[-1])`` (Gather of Y_h, axis 0) -> [1, 6]."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    nodes = _conv(rng, inits, "conv", "x", 40, 16, (3,))                          # [1,16,50]
    nodes.append(helper.make_node("Transpose", ["conv.y"], ["seq"], name="permute", perm=[2, 0, 1]))
    nodes.append(recurrent_node(rng, "GRU", "gru", "seq", inits, feat=16, hid=24, batch=1,
                                direction="bidirectional", linear_before_reset=1, outputs=("gru_y", "gru_h")))
    inits["last"] = np.array(-1, np.int64)
    inits["fc.w"] = (rng.standard_normal((6, 24)) / np.sqrt(24)).astype(np.float32)
    inits["fc.b"] = (rng.standard_normal(6) * 0.05).astype(np.float32)
    nodes += [helper.make_node("Gather", ["gru_h", "last"], ["h_last"], name="h_n_last", axis=0),   # [1,24]
              helper.make_node("Gemm", ["h_last", "fc.w", "fc.b"], ["y"], name="fc", transB=1)]
    return _model(nodes, inits, [1, 40, 50], ["y"])


def stacked_bilstm(seed: int = 0, batch: int = 1, steps: int = 16) -> onnx.ModelProto:
    """PyTorch ``nn.LSTM(num_layers=2, bidirectional=True)`` as exported: per layer an LSTM node,
    then Transpose(0, 2, 1, 3) + Reshape [T, B, 2H] into the next; x [T, B, 20] -> [T, B, 2*24]."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    nodes, x, feat, hid = [], "x", 20, 24
    for layer in range(2):
        y = f"l{layer}.y"
        nodes.append(recurrent_node(rng, "LSTM", f"lstm.l{layer}", x, inits, feat=feat, hid=hid, batch=batch,
                                    direction="bidirectional", outputs=(y, f"l{layer}.h", f"l{layer}.c")))
        inits[f"l{layer}.shape"] = np.array([steps, batch, 2 * hid], np.int64)
        out = "y" if layer == 1 else f"l{layer}.out"
        nodes += [helper.make_node("Transpose", [y], [f"{y}.t"], name=f"l{layer}.transpose", perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"{y}.t", f"l{layer}.shape"], [out], name=f"l{layer}.reshape")]
        x, feat = out, 2 * hid
    return _model(nodes, inits, [steps, batch, 20], ["y"])


def streaming_cell(cell: str = "GRU", seed: int = 0, steps: int = 8, batch: int = 1, feat: int = 12,
                   hid: int = 16, direction: str = "forward", layout: int = 0,
                   layout0_reference: bool = False) -> onnx.ModelProto:
    """A streaming chunk: inputs x and the previous state(s) (graph inputs ``h_in`` [, ``c_in``]),
    outputs y (MatMul head on Y) and the new state(s) Y_h (``h_out``) [, Y_c (``c_out``), LSTM]."""
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    inits: dict = {}
    x_shape = [steps, batch, feat] if layout == 0 else [batch, steps, feat]
    s_shape = [dirs, batch, hid] if layout == 0 else [batch, dirs, hid]
    ref = layout and layout0_reference
    node = recurrent_node(rng, cell, "rnn", "x_tbi" if ref else "x", inits, feat=feat, hid=hid, batch=batch,
                          direction=direction, layout=0 if ref else layout,
                          outputs=("y_seq", "h_dbh" if ref else "h_out") +
                          ((("c_dbh" if ref else "c_out"),) if cell == "LSTM" else ()))
    state_ins = ["h_in"] + (["c_in"] if cell == "LSTM" else [])
    state_outs = ["h_out"] + (["c_out"] if cell == "LSTM" else [])
    node.input.extend([""] * (5 - len(node.input)))
    node.input.extend([f"{s}_dbh" if ref else s for s in state_ins])
    nodes = [node]
    if ref:
        nodes = ([helper.make_node("Transpose", ["x"], ["x_tbi"], perm=[1, 0, 2])] +
                 [helper.make_node("Transpose", [s], [f"{s}_dbh"], perm=[1, 0, 2]) for s in state_ins] + nodes +
                 [helper.make_node("Transpose", ["y_seq"], ["y_seq_l1"], perm=[2, 0, 1, 3])] +
                 [helper.make_node("Transpose", [f"{o[0]}_dbh"], [o], perm=[1, 0, 2]) for o in state_outs])
    y_seq = "y_seq_l1" if ref else "y_seq"
    inits["head.w"] = (rng.standard_normal((hid, 5)) / np.sqrt(hid)).astype(np.float32)
    nodes.append(helper.make_node("MatMul", [y_seq, "head.w"], ["y"], name="head"))
    g = helper.make_graph(nodes, "streaming",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)] +
                          [helper.make_tensor_value_info(s, TensorProto.FLOAT, s_shape) for s in state_ins],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ["y"] + state_outs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def keras_lstm_tf2onnx(seed: int = 0, steps: int = 20) -> onnx.ModelProto:
    """A Keras Conv1D -> LSTM(return_sequences=True) -> Dense model as tf2onnx writes it (batch 1):
    NWC input, Conv as Transpose + Conv + Transpose, Transpose to time-major, the zero initial
    states built from the batch dimension (Shape -> Gather -> Concat -> Expand), LSTM, Squeeze of
    the direction axis, Transpose back to batch-major, MatMul + Add."""
    rng = np.random.default_rng(seed)
    inits: dict = {}
    feat, hid = 16, 20
    inits["conv.w"] = (rng.standard_normal((feat, 8, 3)) / np.sqrt(24)).astype(np.float32)
    inits["conv.b"] = (rng.standard_normal(feat) * 0.05).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["x"], ["x_ncw"], name="conv1d/Conv1D__5", perm=[0, 2, 1]),
             helper.make_node("Conv", ["x_ncw", "conv.w", "conv.b"], ["c"], name="conv1d/Conv1D",
                              kernel_shape=[3], pads=[1, 1]),
             helper.make_node("Relu", ["c"], ["c_relu"], name="conv1d/Relu"),
             helper.make_node("Transpose", ["c_relu"], ["c_nwc"], name="conv1d/Conv1D__9", perm=[0, 2, 1]),
             helper.make_node("Transpose", ["c_nwc"], ["seq"], name="lstm/transpose", perm=[1, 0, 2]),
             helper.make_node("Shape", ["c_nwc"], ["shp"], name="lstm/Shape"),
             helper.make_node("Gather", ["shp", "zero_i"], ["bdim"], name="lstm/strided_slice", axis=0),
             helper.make_node("Concat", ["one_i", "bdim", "hid_i"], ["st_shape"], name="lstm/zeros/packed", axis=0),
             helper.make_node("Expand", ["zero_f", "st_shape"], ["h0"], name="lstm/zeros")]
    inits["zero_i"] = np.array([0], np.int64)
    inits["one_i"] = np.array([1], np.int64)
    inits["hid_i"] = np.array([hid], np.int64)
    inits["zero_f"] = np.array(0.0, np.float32)
    s = 1.0 / np.sqrt(hid)
    inits["lstm.W"] = rng.uniform(-s, s, (1, 4 * hid, feat)).astype(np.float32)
    inits["lstm.R"] = rng.uniform(-s, s, (1, 4 * hid, hid)).astype(np.float32)
    inits["lstm.B"] = np.concatenate([rng.uniform(-s, s, (1, 4 * hid)), np.zeros((1, 4 * hid))], 1).astype(np.float32)
    inits["sq.axes"] = np.array([1], np.int64)
    inits["dense.w"] = (rng.standard_normal((hid, 6)) / np.sqrt(hid)).astype(np.float32)
    inits["dense.b"] = (rng.standard_normal(6) * 0.05).astype(np.float32)
    nodes += [helper.make_node("LSTM", ["seq", "lstm.W", "lstm.R", "lstm.B", "", "h0", "h0"], ["y_tdbh"],
                               name="lstm/lstm", hidden_size=hid, direction="forward"),
              helper.make_node("Squeeze", ["y_tdbh", "sq.axes"], ["y_tbh"], name="lstm/Squeeze"),
              helper.make_node("Transpose", ["y_tbh"], ["y_bth"], name="lstm/transpose_1", perm=[1, 0, 2]),
              helper.make_node("MatMul", ["y_bth", "dense.w"], ["d"], name="dense/Tensordot"),
              helper.make_node("Add", ["d", "dense.b"], ["y"], name="dense/BiasAdd")]
    return _model(nodes, inits, [1, steps, 8], ["y"], opset=13)


def unrolled_gru(seed: int = 0, steps: int = 6, batch: int = 1, feat: int = 12, hid: int = 16) -> onnx.ModelProto:
    """A GRU unrolled like a traced PyTorch ``GRUCell`` loop: Relu -> per step x[t] (Gather),
    Gemm(x_t) and Gemm(h) chunked in 3 (Split axis 1), r/z Sigmoid, n = tanh(i_n + r * h_n),
    h = (1 - z) * n + z * h (``1 - z`` is a Sub of a constant), stacked (Unsqueeze + Concat axis 0)
    into the model output."""
    rng = np.random.default_rng(seed)
    s = 1.0 / np.sqrt(hid)
    inits = {"w": rng.uniform(-s, s, (3 * hid, feat)).astype(np.float32),
             "r": rng.uniform(-s, s, (3 * hid, hid)).astype(np.float32),
             "bw": rng.uniform(-s, s, 3 * hid).astype(np.float32), "br": rng.uniform(-s, s, 3 * hid).astype(np.float32),
             "one": np.array(1.0, np.float32), "h0": np.zeros((batch, hid), np.float32),
             "ax0": np.array([0], np.int64)}
    nodes = [helper.make_node("Relu", ["x"], ["xr"], name="relu")]

    def node(op, ins, out, **kw):
        outs = [out] if isinstance(out, str) else list(out)
        nodes.append(helper.make_node(op, ins, outs, name=outs[0], **kw))
        return out

    h, stacked = "h0", []
    for t in range(steps):
        inits[f"t{t}"] = np.array(t, np.int64)
        xt = node("Gather", ["xr", f"t{t}"], f"x{t}", axis=0)
        ir, iz, in_ = node("Split", [node("Gemm", [xt, "w", "bw"], f"gi{t}", transB=1)],
                           [f"ir{t}", f"iz{t}", f"in{t}"], axis=1)
        hr, hz, hn = node("Split", [node("Gemm", [h, "r", "br"], f"gh{t}", transB=1)],
                          [f"hr{t}", f"hz{t}", f"hn{t}"], axis=1)
        r = node("Sigmoid", [node("Add", [ir, hr], f"ra{t}")], f"r{t}")
        z = node("Sigmoid", [node("Add", [iz, hz], f"za{t}")], f"z{t}")
        n = node("Tanh", [node("Add", [in_, node("Mul", [r, hn], f"rh{t}")], f"na{t}")], f"n{t}")
        h = node("Add", [node("Mul", [node("Sub", ["one", z], f"omz{t}"), n], f"a{t}"),
                         node("Mul", [z, h], f"b{t}")], f"h{t + 1}")
        stacked.append(node("Unsqueeze", [h, "ax0"], f"hu{t}"))
    node("Concat", stacked, "y", axis=0)
    return _model(nodes, inits, [steps, batch, feat], ["y"], opset=13)
