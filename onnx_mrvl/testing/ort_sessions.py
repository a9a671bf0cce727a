"""onnxruntime sessions for tests that compare onnxruntime with itself (sim/mlas_u8s8.py's host note)."""
from __future__ import annotations

PRECISION_KEY = "session.x64quantprecision"   # onnxruntime's config: U8U8 kernels where U8S8 would clamp


def exact_session(model, providers=("CPUExecutionProvider",)):
    """An onnxruntime session (``model``: a path or serialized bytes) whose integer kernels sum
    exactly on any CPU: ``session.x64quantprecision=1`` makes onnxruntime, where its U8S8 kernel
    clamps (AVX2 / AVX-512 without VNNI), turn int8 weights to uint8 and run its U8U8 kernels; a no-op
    elsewhere. For comparing onnxruntime with itself (a model and our reference bodies of it, which
    it may fuse onto other kernels) with the same exact sums on every host."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.add_session_config_entry(PRECISION_KEY, "1")
    return ort.InferenceSession(model, so, providers=list(providers))
