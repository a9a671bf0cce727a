#!/usr/bin/env python3
"""Offload report: ``python tools/report.py OUT_DIR_OR_MODEL [--html OUT.html] [--json]``.

Thin wrapper around ``onnx-mrvl report`` (same options, same exit codes).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_mrvl.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["report", *sys.argv[1:]]))
