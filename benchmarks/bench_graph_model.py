#!/usr/bin/env python3
"""The graph model measurement behind docs/architecture.md ("Graph model"): our two graph layers
against onnx-graphsurgeon and onnx-ir on ``models.branchy_chain(n, branchy=True)``.

``python benchmarks/bench_graph_model.py [--sizes 1000 4000 16000 64000]``
Per library and size: CPU seconds to build the graph from a ModelProto, to walk every node's
consumers and to write a ModelProto back, and whether that round trip gives the same bytes.
A library that is not installed (neither third-party IR is a dependency) is reported as such.
"""
import argparse
import os
import sys
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from onnx_mrvl.testing.models import branchy_chain  # noqa: E402
from onnx_mrvl.graph_index import GraphIndex  # noqa: E402
from onnx_mrvl.legalize.graph import Graph  # noqa: E402


def ours_index(m):
    g = GraphIndex(m)
    t = time.process_time()
    k = sum(len(g.consumers.get(o, ())) for n in g.nodes for o in n.output)
    return g, time.process_time() - t, k, lambda: m          # read-only: nothing to write back


def ours_editable(m):
    c = onnx.ModelProto()
    c.CopyFrom(m)
    g = Graph(c)
    t = time.process_time()
    k = sum(len(g.users(o)) for n in list(g.nodes.values()) for o in n.output)
    return g, time.process_time() - t, k, g.commit


def graphsurgeon(m):
    import onnx_graphsurgeon as gs
    g = gs.import_onnx(m)
    t = time.process_time()
    k = sum(len(o.outputs) for n in g.nodes for o in n.outputs)
    return g, time.process_time() - t, k, lambda: gs.export_onnx(g)


def onnx_ir(m):
    import onnx_ir as ir
    g = ir.serde.deserialize_model(m)
    t = time.process_time()
    k = sum(len(list(o.uses())) for n in g.graph for o in n.outputs)
    return g, time.process_time() - t, k, lambda: ir.serde.serialize_model(g)


LIBS = {"GraphIndex (ours, read-only)": ours_index, "legalize Graph (ours, editable)": ours_editable,
        "onnx-graphsurgeon": graphsurgeon, "onnx-ir": onnx_ir}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    args = ap.parse_args()
    print("| library | nodes | import s | walk s | export s | total CPU s | same bytes |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    totals = {}
    small = branchy_chain(50, branchy=True)
    for fn in LIBS.values():          # warm-up: module imports and first-call costs stay out of the table
        try:
            fn(small)[3]()
        except ImportError:
            pass
    for n in args.sizes:
        m = branchy_chain(n, branchy=True)
        ref = m.SerializeToString()
        for name, fn in LIBS.items():
            t0 = time.process_time()
            try:
                _, walk, _, export = fn(m)
            except ImportError as exc:
                print(f"| {name} | {n} | not installed ({exc.name}) | | | | |")
                continue
            t1 = time.process_time()
            out = export()
            t2 = time.process_time()
            imp = t1 - t0 - walk
            same = out.SerializeToString() == ref
            totals.setdefault(name, []).append((n, t2 - t0))
            print(f"| {name} | {n} | {imp:.3f} | {walk:.3f} | {t2 - t1:.3f} | {t2 - t0:.3f} | {'yes' if same else 'no'} |",
                  flush=True)
    for name, pts in totals.items():
        if len(pts) >= 2:
            xs, ys = np.log([p[0] for p in pts]), np.log([max(p[1], 1e-6) for p in pts])
            print(f"- {name}: log-log slope {np.polyfit(xs, ys, 1)[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
