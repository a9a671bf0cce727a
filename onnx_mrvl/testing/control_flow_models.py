"""Small models with control flow (If / Loop bodies), built with onnx.helper and seeded weights.

Shapes follow the real models they stand for: a voice-activity detector choosing its branch by
sample rate (If; each branch a conv front end and an LSTM reading the outer state), a recognizer with
a Loop decoder (a conv + MatMul body run a static or a dynamic number of times). Bodies read tensors
of the outer graph by name (outer scope), including tensors an outer conv region writes.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh


def _rng(seed):
    rng = np.random.default_rng(seed)
    return lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)


def _finish(graph: onnx.GraphProto, opset: int = 13) -> onnx.ModelProto:
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def if_convs(seed: int = 0, computed_cond: bool = False) -> onnx.ModelProto:
    """conv -> relu (outer) -> If(cond) with conv branches reading the outer ``y`` -> conv.

    ``cond`` is a graph input, or ``ReduceMean(x) > 0`` when ``computed_cond``. The then branch holds
    conv -> relu -> conv -> BatchNormalization (its own initializers), the else branch a valid conv
    (outer weight), a Pad and a Sigmoid."""
    w = _rng(seed)
    then = h.make_graph([
        h.make_node("Conv", ["y", "Wt"], ["t1"], name="then_conv1", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["t1"], ["t2"], name="then_relu"),
        h.make_node("Conv", ["t2", "Wt2"], ["t3"], name="then_conv2", pads=[1, 1, 1, 1]),
        h.make_node("BatchNormalization", ["t3", "s", "b", "m", "v"], ["t_out"], name="then_bn"),
    ], "then", [], [h.make_tensor_value_info("t_out", T.FLOAT, [1, 8, 16, 16])],
        [nh.from_array(w(8, 8, 3, 3), "Wt2"), nh.from_array(np.ones(8, np.float32), "s"),
         nh.from_array(w(8), "b"), nh.from_array(w(8), "m"), nh.from_array(np.full(8, 2, np.float32), "v")])
    other = h.make_graph([
        h.make_node("Conv", ["y", "We"], ["e1"], name="else_conv1", kernel_shape=[3, 3]),
        h.make_node("Pad", ["e1", "pads"], ["e2"], name="else_pad"),
        h.make_node("Sigmoid", ["e2"], ["e_out"], name="else_sig"),
    ], "else", [], [h.make_tensor_value_info("e_out", T.FLOAT, [1, 8, 16, 16])],
        [nh.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")])
    inits = [nh.from_array(w(8, 3, 3, 3), "W0"), nh.from_array(w(8), "B0"), nh.from_array(w(8, 8, 3, 3), "Wt"),
             nh.from_array(w(8, 8, 3, 3), "We"), nh.from_array(w(4, 8, 1, 1), "Wo")]
    nodes = [h.make_node("Conv", ["x", "W0", "B0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c0"], ["y"], name="relu0")]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])]
    if computed_cond:
        nodes += [h.make_node("ReduceMean", ["x"], ["mean"], name="mean", keepdims=0),
                  h.make_node("Greater", ["mean", "zero"], ["cond"], name="gt")]
        inits.append(nh.from_array(np.array(0, np.float32), "zero"))
    else:
        inputs.append(h.make_tensor_value_info("cond", T.BOOL, []))
    nodes += [h.make_node("If", ["cond"], ["z"], name="If_0", then_branch=then, else_branch=other),
              h.make_node("Conv", ["z", "Wo"], ["out"], name="conv_out")]
    return _finish(h.make_graph(nodes, "if_convs", inputs,
                                [h.make_tensor_value_info("out", T.FLOAT, [1, 4, 16, 16])], inits))


def nested_if_convs(seed: int = 0) -> onnx.ModelProto:
    """``if_convs`` one level deeper: an outer If(``outer``) whose then branch holds a conv and the
    If(``cond``) of ``if_convs`` on it, whose else branch a conv (openWakeWord's Silero VAD: an If on
    the sample rate whose branches hold Ifs on shapes, each with its own conv front end)."""
    w = _rng(seed + 1)
    base = if_convs(seed)
    inner = next(n for n in base.graph.node if n.op_type == "If")
    inner.input[0] = "cond"
    then = h.make_graph([h.make_node("Conv", ["y0", "Wi"], ["y"], name="outer_then_conv", pads=[1, 1, 1, 1]),
                         inner], "outer_then", [], [h.make_tensor_value_info("z", T.FLOAT, [1, 8, 16, 16])],
                        [nh.from_array(w(8, 8, 3, 3), "Wi")])
    other = h.make_graph([h.make_node("Conv", ["y0", "Wx"], ["z_e"], name="outer_else_conv", pads=[1, 1, 1, 1])],
                         "outer_else", [], [h.make_tensor_value_info("z_e", T.FLOAT, [1, 8, 16, 16])],
                         [nh.from_array(w(8, 8, 3, 3), "Wx")])
    nodes = [n for n in base.graph.node if n.op_type != "If"]
    nodes[1].output[0] = "y0"                                  # relu0 writes y0; the outer then conv makes y
    nodes.insert(2, h.make_node("If", ["outer"], ["z"], name="If_outer", then_branch=then, else_branch=other))
    inputs = [base.graph.input[0], h.make_tensor_value_info("outer", T.BOOL, []),
              h.make_tensor_value_info("cond", T.BOOL, [])]
    return _finish(h.make_graph(nodes, "nested_if_convs", inputs, list(base.graph.output),
                                list(base.graph.initializer)))


def shape_if_convs(seed: int = 0) -> onnx.ModelProto:
    """PyTorch's run-time shape tests (Silero VAD v4 / v5): x ['batch', 3, 16, 16] -> conv -> relu -> y;
    ``If(Shape(y)[0] == 1)``: then a conv + sigmoid and, nested, ``If(Shape(y)[1] == 8)`` (then a conv,
    else y passed on by an Identity); else y passed on by an Identity -> conv. With the batch fixed
    by ``input_shapes`` both conditions are constants."""
    w = _rng(seed)

    def cond(name, axis, value):
        return [h.make_node("Shape", ["y"], [f"{name}_shape"], name=f"{name}_shape"),
                h.make_node("Gather", [f"{name}_shape", f"{name}_axis"], [f"{name}_dim"], name=f"{name}_gather", axis=0),
                h.make_node("Equal", [f"{name}_dim", f"{name}_value"], [name], name=f"{name}_equal")], \
            [nh.from_array(np.array(axis, np.int64), f"{name}_axis"), nh.from_array(np.array(value, np.int64), f"{name}_value")]

    vi = lambda n: h.make_tensor_value_info(n, T.FLOAT, None)   # noqa: E731 - the exporter's unknown shapes
    inner_nodes, inner_inits = cond("c8", 1, 8)
    inner = h.make_node("If", ["c8"], ["u"], name="If_channels",
                        then_branch=h.make_graph([h.make_node("Conv", ["y", "Wn"], ["u_t"], name="inner_conv",
                                                              pads=[1, 1, 1, 1])], "inner_then", [], [vi("u_t")]),
                        else_branch=h.make_graph([h.make_node("Identity", ["y"], ["u_e"], name="inner_pass")],
                                                 "inner_else", [], [vi("u_e")]))
    then = h.make_graph(inner_nodes + [inner, h.make_node("Conv", ["u", "Wt"], ["t1"], name="then_conv", pads=[1, 1, 1, 1]),
                                       h.make_node("Sigmoid", ["t1"], ["t_out"], name="then_sig")],
                        "then", [], [vi("t_out")], inner_inits + [nh.from_array(w(8, 8, 3, 3), "Wt")])
    other = h.make_graph([h.make_node("Identity", ["y"], ["e_out"], name="else_pass")], "else", [], [vi("e_out")])
    outer_nodes, outer_inits = cond("c1", 0, 1)
    nodes = [h.make_node("Conv", ["x", "W0", "B0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c0"], ["y"], name="relu0")] + outer_nodes + [
        h.make_node("If", ["c1"], ["z"], name="If_batch", then_branch=then, else_branch=other),
        h.make_node("Conv", ["z", "Wo"], ["out"], name="conv_out")]
    inits = outer_inits + [nh.from_array(w(8, 3, 3, 3), "W0"), nh.from_array(w(8), "B0"),
                           nh.from_array(w(8, 8, 3, 3), "Wn"), nh.from_array(w(4, 8, 1, 1), "Wo")]
    return _finish(h.make_graph(nodes, "shape_if_convs", [h.make_tensor_value_info("x", T.FLOAT, ["batch", 3, 16, 16])],
                                [h.make_tensor_value_info("out", T.FLOAT, ["batch", 4, 16, 16])], inits))


def loop_conv(seed: int = 0, dynamic: bool = False) -> onnx.ModelProto:
    """conv (outer) -> Loop(M) whose body runs conv -> relu on the carried state and emits
    MatMul(mean(state), Wm) per iteration -> conv on the final state. ``M`` is a constant 3 or a
    graph input (``dynamic``); the body reads the outer weights ``Wl`` and ``Wm``."""
    w = _rng(seed)
    body = h.make_graph([
        h.make_node("Conv", ["h_in", "Wl"], ["bc"], name="body_conv", pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["bc"], ["h_out"], name="body_relu"),
        h.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
        h.make_node("ReduceMean", ["h_out"], ["gp"], name="body_gap", axes=[2, 3], keepdims=0),
        h.make_node("MatMul", ["gp", "Wm"], ["scan"], name="body_mm"),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                h.make_tensor_value_info("h_in", T.FLOAT, [1, 8, 8, 8])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("h_out", T.FLOAT, [1, 8, 8, 8]),
         h.make_tensor_value_info("scan", T.FLOAT, [1, 5])])
    inits = [nh.from_array(w(8, 3, 3, 3), "W0"), nh.from_array(w(8, 8, 3, 3), "Wl"), nh.from_array(w(8, 5), "Wm"),
             nh.from_array(np.array(True), "true"), nh.from_array(w(4, 8, 1, 1), "Wo")]
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])]
    if dynamic:
        inputs.append(h.make_tensor_value_info("M", T.INT64, []))
    else:
        inits.append(nh.from_array(np.array(3, np.int64), "M"))
    nodes = [h.make_node("Conv", ["x", "W0"], ["h0"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("Loop", ["M", "true", "h0"], ["hf", "scans"], name="Loop_0", body=body),
             h.make_node("Conv", ["hf", "Wo"], ["out"], name="conv_out")]
    return _finish(h.make_graph(nodes, "loop_conv", inputs,
                                [h.make_tensor_value_info("out", T.FLOAT, [1, 4, 8, 8]),
                                 h.make_tensor_value_info("scans", T.FLOAT, ["T", 1, 5])], inits))


def vad_like(seed: int = 0, hidden: int = 8, channels: int = 16) -> onnx.ModelProto:
    """Conv1d -> Relu front end (outer), then If(sr == 16000) whose branches run an LSTM over the
    outer feature map (read by name) with the outer initial state: a voice-activity detector."""
    w = _rng(seed)

    def branch(tag):
        ini = [nh.from_array(w(1, 4 * hidden, channels), f"{tag}_W"),
               nh.from_array(w(1, 4 * hidden, hidden), f"{tag}_R")]
        nodes = [h.make_node("Transpose", ["feat"], [f"{tag}_t"], perm=[2, 0, 1], name=f"{tag}_tr"),
                 h.make_node("LSTM", [f"{tag}_t", f"{tag}_W", f"{tag}_R", "", "", "h0"], [f"{tag}_y", f"{tag}_h"],
                             name=f"{tag}_lstm", hidden_size=hidden)]
        return h.make_graph(nodes, tag, [], [h.make_tensor_value_info(f"{tag}_h", T.FLOAT, [1, 1, hidden])], ini)

    nodes = [h.make_node("Conv", ["x", "W0"], ["c"], name="conv0", pads=[1, 1]),
             h.make_node("Relu", ["c"], ["feat"], name="relu0"),
             h.make_node("Equal", ["sr", "k"], ["cond"], name="eq"),
             h.make_node("If", ["cond"], ["hn"], name="If_0", then_branch=branch("b16"), else_branch=branch("b8"))]
    return _finish(h.make_graph(
        nodes, "vad_like", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 20]), h.make_tensor_value_info("sr", T.INT64, []),
                            h.make_tensor_value_info("h0", T.FLOAT, [1, 1, hidden])],
        [h.make_tensor_value_info("hn", T.FLOAT, [1, 1, hidden])],
        [nh.from_array(w(channels, 4, 3), "W0"), nh.from_array(np.array(16000, np.int64), "k")]), opset=16)


def vad_branches(seed: int = 0, hidden: int = 16, opset: int = 16) -> onnx.ModelProto:
    """Silero-VAD-shaped: If(sr == 16000) whose branches each hold the whole detector on the outer
    ``input`` [1, L]: Unsqueeze -> strided Conv1d (STFT-like) -> Relu -> Conv1d -> Relu -> Transpose ->
    LSTM (outer initial state ``h0``/``c0``) -> Squeeze -> Transpose -> Relu -> Conv1d -> Sigmoid ->
    ReduceMean; outputs the probability and the new state."""
    w = _rng(seed)

    def branch(tag, win):
        ini = [nh.from_array(w(2 * hidden, 1, win), f"{tag}_stft"), nh.from_array(w(hidden, 2 * hidden, 3), f"{tag}_enc"),
               nh.from_array(w(hidden), f"{tag}_encb"), nh.from_array(w(1, 4 * hidden, hidden), f"{tag}_W"),
               nh.from_array(w(1, 4 * hidden, hidden), f"{tag}_R"), nh.from_array(w(1, 8 * hidden), f"{tag}_B"),
               nh.from_array(w(1, hidden, 1), f"{tag}_dec"), nh.from_array(np.array([1], np.int64), f"{tag}_ax1")]
        nodes = [
            h.make_node("Unsqueeze", ["input", f"{tag}_ax1"], [f"{tag}_u"], name=f"{tag}_unsq"),
            h.make_node("Conv", [f"{tag}_u", f"{tag}_stft"], [f"{tag}_s"], name=f"{tag}_stftconv", strides=[win // 2]),
            h.make_node("Relu", [f"{tag}_s"], [f"{tag}_sr"], name=f"{tag}_relu0"),
            h.make_node("Conv", [f"{tag}_sr", f"{tag}_enc", f"{tag}_encb"], [f"{tag}_e"], name=f"{tag}_encconv", pads=[1, 1]),
            h.make_node("Relu", [f"{tag}_e"], [f"{tag}_er"], name=f"{tag}_relu1"),
            h.make_node("Transpose", [f"{tag}_er"], [f"{tag}_t"], name=f"{tag}_tr", perm=[2, 0, 1]),
            h.make_node("LSTM", [f"{tag}_t", f"{tag}_W", f"{tag}_R", f"{tag}_B", "", "h0", "c0"],
                        [f"{tag}_y", f"{tag}_hn", f"{tag}_cn"], name=f"{tag}_lstm", hidden_size=hidden),
            h.make_node("Squeeze", [f"{tag}_y", f"{tag}_ax1"], [f"{tag}_ys"], name=f"{tag}_sq"),
            h.make_node("Transpose", [f"{tag}_ys"], [f"{tag}_yt"], name=f"{tag}_tr2", perm=[1, 2, 0]),
            h.make_node("Relu", [f"{tag}_yt"], [f"{tag}_yr"], name=f"{tag}_relu2"),
            h.make_node("Conv", [f"{tag}_yr", f"{tag}_dec"], [f"{tag}_d"], name=f"{tag}_decconv"),
            h.make_node("Sigmoid", [f"{tag}_d"], [f"{tag}_sg"], name=f"{tag}_sig"),
            h.make_node("ReduceMean", [f"{tag}_sg"], [f"{tag}_out"], name=f"{tag}_mean", axes=[2], keepdims=0),
        ]
        return h.make_graph(nodes, tag, [], [h.make_tensor_value_info(f"{tag}_out", T.FLOAT, [1, 1]),
                                             h.make_tensor_value_info(f"{tag}_hn", T.FLOAT, [1, 1, hidden]),
                                             h.make_tensor_value_info(f"{tag}_cn", T.FLOAT, [1, 1, hidden])], ini)

    nodes = [h.make_node("Equal", ["sr", "k16"], ["is16"], name="eq"),
             h.make_node("If", ["is16"], ["output", "hn", "cn"], name="If_0", then_branch=branch("b16", 64),
                         else_branch=branch("b8", 32))]
    return _finish(h.make_graph(
        nodes, "vad_branches", [h.make_tensor_value_info("input", T.FLOAT, [1, 512]), h.make_tensor_value_info("sr", T.INT64, []),
                                h.make_tensor_value_info("h0", T.FLOAT, [1, 1, hidden]),
                                h.make_tensor_value_info("c0", T.FLOAT, [1, 1, hidden])],
        [h.make_tensor_value_info("output", T.FLOAT, [1, 1]), h.make_tensor_value_info("hn", T.FLOAT, [1, 1, hidden]),
         h.make_tensor_value_info("cn", T.FLOAT, [1, 1, hidden])],
        [nh.from_array(np.array(16000, np.int64), "k16")]), opset=opset)


def loop_reads_feature_map(seed: int = 0) -> onnx.ModelProto:
    """conv -> relu (outer feature map ``feat`` [1,8,4,6]) -> Loop whose body (a decoder step) reads
    ``feat`` from the outer scope: MatMul(feat, Wd[6,6]) (its shape inference checks the inner
    dimension) -> ReduceMean -> Add to the carried state."""
    w = _rng(seed)
    body = h.make_graph([
        h.make_node("MatMul", ["feat", "Wd"], ["att"], name="dec_mm"),
        h.make_node("ReduceMean", ["att"], ["ctx"], name="dec_mean", axes=[2, 3], keepdims=0),
        h.make_node("Add", ["s_in", "ctx"], ["s_out"], name="dec_add"),
        h.make_node("Identity", ["c_in"], ["c_out"], name="dec_id"),
    ], "decoder", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                   h.make_tensor_value_info("s_in", T.FLOAT, [1, 8])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("s_out", T.FLOAT, [1, 8])])
    inits = [nh.from_array(w(8, 3, 3, 3), "W0"), nh.from_array(w(6, 6), "Wd"), nh.from_array(np.array(True), "true"),
             nh.from_array(np.array(4, np.int64), "M"), nh.from_array(np.zeros((1, 8), np.float32), "s0")]
    nodes = [h.make_node("Conv", ["x", "W0"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["feat"], name="relu0"),
             h.make_node("Loop", ["M", "true", "s0"], ["s"], name="Loop_0", body=body)]
    return _finish(h.make_graph(nodes, "loop_feat", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 4, 6])],
                                [h.make_tensor_value_info("s", T.FLOAT, [1, 8])], inits))


def squeeze_if(seed: int = 0, last: int = 1, data_cond: bool = False,
               opset: int = 13) -> onnx.ModelProto:
    """torch.onnx (TorchScript) ``y.squeeze(-1)`` of an axis it did not know the size of:
    ``x [2, F] -> Reshape [2, 16, -1] -> If(Equal(Gather(Shape(t), -1), 1), then: Squeeze(t, -1),
    else: Identity(t)) -> Relu -> MatMul [16, 4]`` (with F = 16 the then branch runs; convert with
    ``input_shapes={"x": [2, 16 * last]}``: onnxruntime itself refuses a static model whose branch
    not taken fails shape inference). ``last`` != 1 takes the else branch (that model ends at the
    Relu); ``data_cond``: the condition is ``ReduceSum(x) > 0`` (a run-time value)."""
    w = _rng(seed)
    i64 = lambda name, v: nh.from_array(np.array(v, np.int64), name)   # noqa: E731
    then = h.make_graph([h.make_node("Squeeze", ["t", "ax"], ["sq"], name="then_squeeze")], "then", [],
                        [h.make_tensor_value_info("sq", T.FLOAT, [2, 16])], [i64("ax", [-1])])
    other = h.make_graph([h.make_node("Identity", ["t"], ["same"], name="else_identity")], "else", [],
                         [h.make_tensor_value_info("same", T.FLOAT, [2, 16, "L"])])
    if data_cond:
        cond = [h.make_node("ReduceSum", ["x"], ["total"], name="total", keepdims=0),
                h.make_node("Greater", ["total", "zero"], ["cond"], name="positive")]
    else:
        cond = [h.make_node("Shape", ["t"], ["shape"], name="shape"),
                h.make_node("Gather", ["shape", "minus1"], ["n"], name="last_dim", axis=0),
                h.make_node("Equal", ["n", "one"], ["cond"], name="is_one")]
    nodes = [h.make_node("Mul", ["x", "gain"], ["y"], name="gain"),
             h.make_node("Reshape", ["y", "to3"], ["t"], name="to3d")] + cond + [
        h.make_node("If", ["cond"], ["s"], name="squeeze_if", then_branch=then, else_branch=other),
        h.make_node("Relu", ["s"], ["r"], name="relu")]
    out, oshape = "r", [2, 16, "L"]
    inits = [nh.from_array(np.array(1.5, np.float32), "gain"), i64("to3", [2, 16, -1]), i64("minus1", -1),
             i64("one", 1), nh.from_array(np.array(0.0, np.float32), "zero")]
    if last == 1:
        nodes.append(h.make_node("MatMul", ["r", "W2"], ["head"], name="head"))
        inits.append(nh.from_array(w(16, 4), "W2"))
        out, oshape = "head", [2, 4]
    g = h.make_graph(nodes, "squeeze_if", [h.make_tensor_value_info("x", T.FLOAT, [2, "F"])],
                     [h.make_tensor_value_info(out, T.FLOAT, oshape)], inits)
    return _finish(g, opset)


def if_two_outputs(seed: int = 0, hidden: int = 8, joined: bool = False) -> onnx.ModelProto:
    """Silero-VAD-shaped state update: ``x [1,16] -> MatMul -> t``, then ``If(Shape(state)[0] == 1)``
    with two results of one shape (then: ``a = Tanh(t), b = Sigmoid(t)``; else swapped), decided by
    the state's static batch (convert with ``input_shapes={"state": [1, hidden]}``): ``a + state ->
    MatMul -> ya`` and ``b * 2 -> yb``. ``joined``: one reader of both, ``a + b -> yb``."""
    w = _rng(seed)

    def branch(tag, first, second):
        return h.make_graph([h.make_node(first, ["t"], [f"{tag}_a"], name=f"{tag}_a"),
                             h.make_node(second, ["t"], [f"{tag}_b"], name=f"{tag}_b")], tag, [],
                            [h.make_tensor_value_info(f"{tag}_a", T.FLOAT, [1, hidden]),
                             h.make_tensor_value_info(f"{tag}_b", T.FLOAT, [1, hidden])])

    last = h.make_node("Add", ["a", "b"], ["yb"], name="join") if joined else \
        h.make_node("Mul", ["b", "two"], ["yb"], name="scale_b")
    nodes = [h.make_node("MatMul", ["x", "W"], ["t"], name="proj"),
             h.make_node("Shape", ["state"], ["shape"], name="shape"),
             h.make_node("Gather", ["shape", "zero"], ["n"], name="batch", axis=0),
             h.make_node("Equal", ["n", "one"], ["cond"], name="is_one"),
             h.make_node("If", ["cond"], ["a", "b"], name="pick", then_branch=branch("then", "Tanh", "Sigmoid"),
                         else_branch=branch("else", "Sigmoid", "Tanh")),
             h.make_node("Add", ["a", "state"], ["sa"], name="add_state"),
             h.make_node("MatMul", ["sa", "W2"], ["ya"], name="head_a"), last]
    inits = [nh.from_array(w(16, hidden), "W"), nh.from_array(w(hidden, 4), "W2"),
             nh.from_array(np.array(0, np.int64), "zero"), nh.from_array(np.array(1, np.int64), "one"),
             nh.from_array(np.array(2.0, np.float32), "two")]
    return _finish(h.make_graph(
        nodes, "if_two_outputs", [h.make_tensor_value_info("x", T.FLOAT, [1, 16]),
                                  h.make_tensor_value_info("state", T.FLOAT, ["B", hidden])],
        [h.make_tensor_value_info("ya", T.FLOAT, [1, 4]), h.make_tensor_value_info("yb", T.FLOAT, [1, hidden])],
        inits))
