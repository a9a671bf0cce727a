#!/usr/bin/env python3
"""Benchmark of ``diff_models`` (and the HTML drawing): a model against a renamed copy of itself.

``python benchmarks/bench_diff.py [--sizes 500 1000 2000 4000] [--html]``
Prints a table: nodes, seconds for the diff, how many nodes were matched / reported renamed /
added / removed and how many matches are the right node, for models whose convolutions have unique weights and for models whose
weights are all equal (so only the graph structure can tell nodes apart).
"""
import argparse
import copy
import os
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_mrvl.inspection.diff import diff_models  # noqa: E402
from onnx_mrvl.inspection.graphview import render_graph_html  # noqa: E402


def residual_chain(nodes: int, shared_weights: bool, seed: int = 0) -> onnx.ModelProto:
    """nodes/5 blocks of Conv-Relu-Conv-Add(residual)-Relu on a 1x8x8x8 tensor."""
    rng = np.random.default_rng(seed)
    blocks = max(1, nodes // 5)
    shared = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    out, inits, cur = [], [], "x"
    for i in range(blocks):
        for j in (0, 1):
            w = shared if shared_weights else rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
            inits.append(numpy_helper.from_array(w, f"w{i}_{j}"))
        out += [helper.make_node("Conv", [cur, f"w{i}_0"], [f"c{i}a"], name=f"b{i}_conv_a", pads=[1, 1, 1, 1]),
                helper.make_node("Relu", [f"c{i}a"], [f"r{i}a"], name=f"b{i}_relu_a"),
                helper.make_node("Conv", [f"r{i}a", f"w{i}_1"], [f"c{i}b"], name=f"b{i}_conv_b", pads=[1, 1, 1, 1]),
                helper.make_node("Add", [f"c{i}b", cur], [f"s{i}"], name=f"b{i}_add"),
                helper.make_node("Relu", [f"s{i}"], [f"o{i}"], name=f"b{i}_relu_b")]
        cur = f"o{i}"
    graph = helper.make_graph(out, "residual_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def renamed(m: onnx.ModelProto) -> onnx.ModelProto:
    r = copy.deepcopy(m)
    for i, n in enumerate(r.graph.node):
        n.name = f"n{len(r.graph.node) - i:06d}"
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--html", action="store_true", help="also time render_graph_html")
    args = ap.parse_args()
    print(f"{'nodes':>6} {'weights':>8} {'diff s':>8} {'matched':>8} {'renamed':>8} {'added':>6} {'removed':>7} {'correct':>8}"
          + (f" {'html s':>7} {'html MB':>8}" if args.html else ""))
    for size in args.sizes:
        for shared in (False, True):
            a = residual_chain(size, shared)
            b = renamed(a)
            t0 = time.perf_counter()
            d = diff_models(a, b)
            dt = time.perf_counter() - t0
            want = {n.name: f"n{len(a.graph.node) - i:06d}" for i, n in enumerate(a.graph.node)}
            correct = sum(want[ka] == kb for ka, kb, _ in d.pairs)
            row = (f"{d.a_nodes:>6} {'shared' if shared else 'unique':>8} {dt:>8.3f} {sum(d.matched.values()):>8} "
                   f"{len(d.nodes['renamed']):>8} {len(d.nodes['added']):>6} {len(d.nodes['removed']):>7} {correct:>8}")
            if args.html and not shared:
                t0 = time.perf_counter()
                html = render_graph_html(a)
                row += f" {time.perf_counter() - t0:>7.3f} {len(html) / 1e6:>8.2f}"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
