#!/usr/bin/env python3
"""Per-tensor comparison: ``python tools/compare.py A.onnx B.onnx [--inputs F.npz] [--json]``.

Thin wrapper around ``onnx-mrvl compare`` (same options, same exit codes).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_mrvl.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
