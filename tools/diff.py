#!/usr/bin/env python3
"""Compare two ONNX models: ``python tools/diff.py A.onnx B.onnx [--json] [--html OUT.html]``.

Thin wrapper around ``onnx-mrvl diff`` (same options, same exit codes).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from onnx_mrvl.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["diff", *sys.argv[1:]]))
