import os
import sys

# The work tree's package first (an installed copy of onnx_mrvl must not shadow it).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
