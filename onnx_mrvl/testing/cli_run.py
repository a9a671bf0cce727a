"""The ``onnx-mrvl`` command line run as a user runs it: a child process (``python -m
onnx_mrvl.cli.main``) with this checkout on its path, for tests of exit codes, stdout and stderr."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=ROOT)


def run_cli(*args: str, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """``onnx-mrvl ARGS`` in ``cwd``; the completed process (text stdout / stderr, returncode)."""
    return subprocess.run([sys.executable, "-m", "onnx_mrvl.cli.main", *args], capture_output=True, text=True,
                          env=_env(), cwd=cwd)


def start_cli(*args: str, prelude: str = "", cwd: Optional[str] = None) -> subprocess.Popen:
    """``onnx-mrvl ARGS`` started in a child process after the Python statements ``prelude`` (e.g. a
    patch that makes the save wait, for a test that signals the child mid-save); text pipes."""
    code = f"{prelude}\nimport sys\nfrom onnx_mrvl.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=cwd)
