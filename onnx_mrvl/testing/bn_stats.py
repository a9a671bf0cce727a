"""Data-driven BatchNormalization statistics for random-weight test models.

A trained network's BatchNormalization running mean and variance are the statistics of what the
layer actually reads, so its outputs are ``gamma * (unit-scale) + beta``. Random running
statistics (``randomize_weights``, ``models.GraphBuilder.bn``) are not: activations drift layer
after layer (measured with standard-normal inputs: DenseNet-121 grows to std 16-24 and
max|x| 232, Inception v2 to std 40, ResNet-50 shrinks to std 0.12-0.34), which is not what a
quantizer meets on a trained network. ``data_bn_stats`` sets every BatchNormalization's mean
and variance to those of its input on seeded sample feeds, each layer measured with the layers
before it already normalized (one run of a copy in which every BN normalizes by its batch
statistics, as in training). ``gamma`` / ``beta`` stay random.

CLI: ``python -m onnx_mrvl.testing.bn_stats MODEL.onnx -o OUT.onnx [--samples 8] [--seed 3]``
"""
from __future__ import annotations

import argparse
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from onnx_mrvl.feeds import random_feeds



def _bns(model: onnx.ModelProto) -> List[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx")]


def _stats_graph(model: onnx.ModelProto, bns, batch: int) -> onnx.ModelProto:
    """``model`` with every BatchNormalization normalizing by the statistics of its input over the
    batch (the samples) and the spatial axes (training-mode BN), and those means and variances as
    outputs: one run gives every layer's statistics with all layers before it already normalized."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.ir_version = max(m.ir_version, 4)   # IR 3 would need every new constant listed as an input
    g = m.graph
    del g.value_info[:]
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name not in inits and vi.type.tensor_type.shape.dim:
            vi.type.tensor_type.shape.dim[0].Clear()
            vi.type.tensor_type.shape.dim[0].dim_value = batch
    nodes, outs = [], []

    def mean(x, y, axes):
        if opset >= 18:
            name = f"{y}__axes"
            g.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), name))
            nodes.append(helper.make_node("ReduceMean", [x, name], [y], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceMean", [x], [y], axes=axes, keepdims=1))

    for n in g.node:
        if n not in bns:
            nodes.append(n)
            continue
        x, p = n.input[0], f"{n.name or n.output[0]}__bnstats"
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        mean(x, f"{p}_mean", [0, 2, 3])
        nodes.append(helper.make_node("Sub", [x, f"{p}_mean"], [f"{p}_c"]))
        nodes.append(helper.make_node("Mul", [f"{p}_c", f"{p}_c"], [f"{p}_sq"]))
        mean(f"{p}_sq", f"{p}_var0", [0, 2, 3])
        mean(f"{p}_var0", f"{p}_varm", [0, 1, 2, 3])     # the layer's mean variance: the floor's unit
        g.initializer.append(numpy_helper.from_array(np.array(FLOOR, np.float32), f"{p}_floor"))
        g.initializer.append(numpy_helper.from_array(np.array(eps, np.float32), f"{p}_eps"))
        nodes.append(helper.make_node("Mul", [f"{p}_varm", f"{p}_floor"], [f"{p}_lo"]))
        nodes.append(helper.make_node("Max", [f"{p}_var0", f"{p}_lo"], [f"{p}_var"]))
        nodes.append(helper.make_node("Add", [f"{p}_var", f"{p}_eps"], [f"{p}_ve"]))
        nodes.append(helper.make_node("Sqrt", [f"{p}_ve"], [f"{p}_sd"]))
        nodes.append(helper.make_node("Div", [f"{p}_c", f"{p}_sd"], [f"{p}_n"]))
        shape = [1, -1] + [1] * 2
        g.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), f"{p}_shape"))
        nodes.append(helper.make_node("Reshape", [n.input[1], f"{p}_shape"], [f"{p}_g"]))
        nodes.append(helper.make_node("Reshape", [n.input[2], f"{p}_shape"], [f"{p}_b"]))
        nodes.append(helper.make_node("Mul", [f"{p}_n", f"{p}_g"], [f"{p}_ng"]))
        nodes.append(helper.make_node("Add", [f"{p}_ng", f"{p}_b"], [n.output[0]]))
        outs += [f"{p}_mean", f"{p}_var"]
    # only what the statistics need (the head after the last BN may hold batch-1 reshapes)
    producer = {o: k for k, nd in enumerate(nodes) for o in nd.output}
    need, todo = set(), list(outs)
    while todo:
        k = producer.get(todo.pop())
        if k is not None and k not in need:
            need.add(k)
            todo.extend(nodes[k].input)
    del g.node[:]
    g.node.extend(nodes[k] for k in sorted(need))
    del g.output[:]
    g.output.extend(helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outs)
    return m


FLOOR = 1e-2   # least variance of a channel, relative to its layer's mean variance


def data_bn_stats(model: onnx.ModelProto, feeds: Optional[Sequence[Dict[str, np.ndarray]]] = None, *,
                  samples: int = 8, seed: int = 3) -> onnx.ModelProto:
    """A copy of ``model`` whose BatchNormalization means/variances are those of its inputs on
    ``feeds`` (default: ``samples`` seeded standard-normal feeds), every layer before it already
    normalized that way (a channel's variance at least ``FLOOR`` of its layer's mean: a dead
    channel does not blow up)."""
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    bns = _bns(m)
    if not bns:
        return m
    feeds = list(feeds) if feeds is not None else [random_feeds(m, seed + k) for k in range(samples)]
    inits = {t.name: t for t in m.graph.initializer}
    for n in bns:
        if len(n.output) > 1 or any(n.input[k] not in inits for k in (1, 2, 3, 4)):
            raise ValueError(f"BatchNormalization '{n.name}': parameters are no initializers or it is in training mode")
    stats = _stats_graph(m, bns, len(feeds))
    batch = {k: np.concatenate([f[k] for f in feeds], 0) for k in feeds[0]}
    sess = ort.InferenceSession(stats.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, batch)))
    for n in bns:
        p = f"{n.name or n.output[0]}__bnstats"
        for k, key in ((3, "mean"), (4, "var")):
            t = inits[n.input[k]]
            v = got[f"{p}_{key}"].reshape(-1).astype(helper.tensor_dtype_to_np_dtype(t.data_type))
            t.CopyFrom(numpy_helper.from_array(v, t.name))
    return m


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    out = data_bn_stats(onnx.load(args.model), samples=args.samples, seed=args.seed)
    onnx.save(out, args.output)
    print(f"wrote {args.output} ({len(_bns(out))} BatchNormalization statistics from {args.samples} samples)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
