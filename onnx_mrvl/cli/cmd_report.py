"""``onnx-mrvl report OUT_DIR_OR_MODEL``: what a converted model offloads, and at what simulated cost.

Exit code 0 on success, 3 when the model, report.json or a region binary cannot be read, when the
folder's files do not belong together (manifest.json), or when ``--original`` is not the model the
folder was converted from (its sha256, recorded by convert).
``--json`` prints only JSON on stdout; ``--html OUT.html`` also writes a self-contained page.
"""
from __future__ import annotations

import logging
import sys

from ..errors import UsageError
from .common import print_json

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="regions, layers, MACs offloaded, CPU nodes with reasons, simulated cycles",
        description="Reads a `onnx-mrvl convert` output folder (model.onnx, report.json, <region>.bin) or a "
                    "converted model.onnx alone (then CPU reasons are unknown and the MAC total is estimated "
                    "from shapes) and prints per region its layers with MACs and simulated cycles (the "
                    "simulator's performance model), the fraction of MACs offloaded and every CPU node "
                    "with its reason. Exit code 0: done, 3: an input cannot be read or does not belong "
                    "with the folder (manifest.json, --original).")
    p.add_argument("path", metavar="OUT_DIR_OR_MODEL", help="convert output folder, or a converted model.onnx")
    p.add_argument("--html", metavar="OUT.html", help="also write a self-contained HTML page (graph + tables)")
    p.add_argument("--original", metavar="ORIG.onnx",
                   help="draw the original model coloured by placement in the HTML (needs report.json; "
                        "must be the model the folder was converted from: its sha256 is checked)")
    p.add_argument("--no-layers", action="store_true", help="text mode: omit the per-layer tables")
    p.add_argument("--json", action="store_true", help="print the report as JSON (and nothing else) on stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..inspection.offload import offload_report

    if args.original and not args.html:
        raise UsageError(f"--original {args.original} is used only to draw the original graph in the HTML page, "
                         f"and no --html was given", hint="add --html OUT.html, or leave --original out")
    rep = offload_report(args.path)
    if args.html:
        from ..inspection.graphview import write_html
        from ..inspection.report_html import render_report_html
        write_html(args.html, render_report_html(rep, original=args.original))
        log.info("wrote %s", args.html)
    if args.json:
        print_json(rep.to_dict())
    else:
        sys.stdout.write(rep.to_text(layers=not args.no_layers))
        if args.html:
            sys.stdout.write(f"html: {args.html}\n")
    return 0
