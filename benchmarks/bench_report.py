#!/usr/bin/env python3
"""Benchmark of the inspection tools on converted ``branchy_chain`` models (onnx_mrvl/testing/models.py).

``python benchmarks/bench_report.py [--sizes 500 1000 2000] [--compare]``
Per size: convert once (not timed as a tool), then time ``diff`` original -> deployable and
original -> fused stage, ``report`` (report.json + binaries + performance model) with its HTML
page (original graph coloured), and with ``--compare`` the per-tensor ``compare`` (two
onnxruntime runs + simulator captures). The target is under 5 s for diff and for report at 2,000 nodes.
"""
import argparse
import os
import sys
import tempfile
import time

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import onnx_mrvl  # noqa: E402
from onnx_mrvl.testing.models import branchy_chain  # noqa: E402
from onnx_mrvl.inspection.compare import compare_models  # noqa: E402
from onnx_mrvl.inspection.diff import diff_models  # noqa: E402
from onnx_mrvl.inspection.graphview import write_html  # noqa: E402
from onnx_mrvl.inspection.offload import offload_report  # noqa: E402
from onnx_mrvl.inspection.report_html import render_report_html  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--compare", action="store_true", help="also time onnx-mrvl compare")
    args = ap.parse_args(argv)
    print(f"{'nodes':>6} {'convert s':>9} {'diff->deploy s':>14} {'diff->fuse s':>12} {'report s':>8} "
          f"{'html s':>7} {'html MB':>7} {'regions':>7} {'layers':>7}" + (f" {'compare s':>9} {'tensors':>7}"
                                                                        if args.compare else ""))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            d = os.path.join(tmp, str(size))
            m = branchy_chain(size, branchy=True)
            os.makedirs(d)
            orig = os.path.join(d, "orig.onnx")
            onnx.save(m, orig)
            _, t_conv = timed(lambda: onnx_mrvl.convert(m).save(os.path.join(d, "out"), stages=True))
            model = os.path.join(d, "out", "model.onnx")
            _, t_dd = timed(lambda: diff_models(orig, model))
            _, t_df = timed(lambda: diff_models(orig, os.path.join(d, "out", "stage-fuse.onnx")))
            rep, t_rep = timed(lambda: offload_report(os.path.join(d, "out")))
            html, t_html = timed(lambda: render_report_html(rep, original=orig))
            write_html(os.path.join(d, "report.html"), html)
            row = (f"{size:>6} {t_conv:>9.2f} {t_dd:>14.3f} {t_df:>12.3f} {t_rep:>8.3f} {t_html:>7.3f} "
                   f"{len(html) / 1e6:>7.2f} {len(rep.regions):>7} {sum(r['layers'] for r in rep.regions):>7}")
            if args.compare:
                res, t_cmp = timed(lambda: compare_models(orig, model))
                row += f" {t_cmp:>9.2f} {len(res.rows):>7}"
            print(row, flush=True)
            if size <= 2000:
                ok &= max(t_dd, t_df) < 5.0 and t_rep + t_html < 5.0
    print("target (diff < 5 s, report + html < 5 s up to 2,000 nodes):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
