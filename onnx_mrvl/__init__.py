"""onnx_mrvl: prepare ONNX models for the Marvell ML/AI inference accelerator (MLIP).

``convert(model)`` legalizes, fuses, splits, emits and compiles; ``InferenceSession`` runs the
result in onnxruntime with each accelerator region executed by the simulator.
"""
from .errors import (ArtifactError, CompileError, ModelError, MrvlError, MrvlRuntimeError,  # noqa: F401
                     ShapeError, UnsupportedError)
from .target import DEFAULT_TARGET, ArchProfile, Target  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):  # lazy: importing the package stays cheap
    if name in ("convert", "ConvertResult"):
        from . import pipeline
        return getattr(pipeline, name)
    if name == "InferenceSession":
        from .ep import InferenceSession
        return InferenceSession
    raise AttributeError(f"module 'onnx_mrvl' has no attribute {name!r}")
