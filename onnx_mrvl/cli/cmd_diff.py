"""``onnx-mrvl diff A.onnx B.onnx``: what changed between two ONNX models.

Exit code 0 when the models are identical, 1 when they differ (like ``diff``), 3 when a model
cannot be read. ``--json`` prints only JSON on stdout; ``--html OUT.html`` also writes the
side-by-side picture.
"""
from __future__ import annotations

import logging
import sys

from .common import nonnegative_int, print_json

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = subparsers.add_parser("diff", help="compare two ONNX models (nodes aligned by provenance, "
                                           "name, structure, position)",
                              description="Compare two ONNX models. Exit code 0: identical, 1: they differ, "
                                          "3: a model cannot be read.")
    p.add_argument("a", metavar="A.onnx", help="the old model")
    p.add_argument("b", metavar="B.onnx", help="the new model")
    p.add_argument("--json", action="store_true", help="print the diff as JSON (and nothing else) on stdout")
    p.add_argument("--html", metavar="OUT.html", help="also write a self-contained HTML picture of both graphs")
    p.add_argument("--limit", type=nonnegative_int, default=20, metavar="N", help="items shown per section in text mode")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..inspection.diff import diff_models, load_model

    a, b = load_model(args.a), load_model(args.b)
    diff = diff_models(a, b)
    diff.a_label, diff.b_label = args.a, args.b
    if args.html:
        from ..inspection.graphview import render_diff_html, write_html
        write_html(args.html, render_diff_html(a, b, diff))
        log.info("wrote %s", args.html)
    if args.json:
        print_json(diff.to_dict())
    else:
        sys.stdout.write(diff.to_text(limit=args.limit))
        if args.html:
            sys.stdout.write(f"html: {args.html}\n")
    return 0 if diff.is_empty() else 1
