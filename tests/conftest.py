import os
import sys

# The work tree's package first (an installed copy of onnx_mrvl must not shadow it).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# onnxruntime-extensions' import sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python for every child
# process; imported once here through the package's guard, a test importing it directly cannot leak
# it into the command-line runs of later tests in the same worker.
from onnx_mrvl.ep.kernel import extensions  # noqa: E402

extensions()
