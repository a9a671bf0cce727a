"""The onnxruntime shim: converted models run in a standard onnxruntime session; each ``Subgraph``
node executes its region's binary on the simulator. Knows nothing of fusion."""
from .kernel import register  # noqa: F401
from .session import InferenceSession, runtime_model  # noqa: F401
