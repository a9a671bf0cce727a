"""The ``onnx-mrvl`` command line run as a user runs it: a child process (``python -m
onnx_mrvl.cli.main``) with this checkout on its path, for tests of exit codes, stdout and stderr."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_cli(*args: str, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """``onnx-mrvl ARGS`` in ``cwd``; the completed process (text stdout / stderr, returncode)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "onnx_mrvl.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=cwd)
