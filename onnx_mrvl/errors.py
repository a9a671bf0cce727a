"""The one exception family of onnx_mrvl.

Every error names what it is about (a node, a region, a file), the original ONNX node names it
came from, and what the user can do about it.
"""
from __future__ import annotations

from typing import Iterable, Optional


class MrvlError(Exception):
    """Base of every error onnx_mrvl raises on purpose."""

    def __init__(self, message: str, *, node: Optional[str] = None,
                 origin: Iterable[str] = (), hint: Optional[str] = None):
        self.message = message
        self.node = node
        self.origin = tuple(origin or ())
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.node:
            parts.append(f"[{self.node}]")
        parts.append(self.message)
        text = " ".join(parts)
        if self.origin:
            text += f" (original nodes: {', '.join(self.origin)})"
        if self.hint:
            text += f". Fix: {self.hint}"
        return text


class ModelError(MrvlError):
    """The input model cannot be read or is not a valid ONNX model."""


class UsageError(MrvlError):
    """An option or input file the user gave does not fit the model: a node name that matches
    nothing, an input of the wrong shape or dtype, a size that is not positive, ..."""


class ShapeError(ModelError):
    """A tensor has no static shape (symbolic or unknown dimensions)."""


class UnsupportedError(MrvlError):
    """Something the flow cannot handle and cannot fall back for."""


class CompileError(MrvlError):
    """A Nodes-JSON / Constants-JSON pair is malformed or cannot be compiled."""


class ArtifactError(MrvlError):
    """A model binary (or other artifact) is missing, corrupted, tampered with or unsafe."""


class MrvlRuntimeError(MrvlError):
    """Running a region failed (wrong input shape or dtype, numeric trouble, ...)."""


__all__ = ["MrvlError", "ModelError", "UsageError", "ShapeError", "UnsupportedError", "CompileError",
           "ArtifactError", "MrvlRuntimeError"]
