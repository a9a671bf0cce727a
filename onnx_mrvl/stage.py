"""The one contract of the rewriting stages (legalize, fuse, split, emit).

Each stage is ``stage(model, target, **options) -> <Stage>Result``: it takes a ModelProto (or the
result of the stage before it), never mutates its arguments and returns a :class:`StageResult`
subclass: the model it produced, a decision per original node (``None`` where the stage decides
nothing yet) and its log, one :data:`LogEntry` per step (a rewrite, a group, a region, a layer).
Stage-specific data (fuse's groups, split's regions, emit's JSON pair) are further fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

import onnx

from .decisions import Decisions
from .errors import ModelError

LogEntry = Tuple[str, List[str], str]   # (what ran: rule / composite / "region" / layer op, node names, detail)


@dataclass
class StageResult:
    model: onnx.ModelProto
    decisions: Optional[Decisions] = None
    log: List[LogEntry] = field(default_factory=list)


def as_model(model: Union[onnx.ModelProto, StageResult], stage: str) -> onnx.ModelProto:
    """The ModelProto a stage works on: ``model`` itself or the ``.model`` of an earlier stage's result."""
    if isinstance(model, StageResult):
        return model.model
    if not isinstance(model, onnx.ModelProto):
        raise ModelError(f"{stage} expects an onnx.ModelProto (or an earlier stage's result), not "
                         f"{type(model).__name__}",
                         hint="load the model with onnx.load first")
    return model
