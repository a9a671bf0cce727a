"""``emit()``, the emit stage's entry point: a region model -> ``EmitResult`` (the JSON pair)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import onnx

from ..stage import StageResult, as_model
from .nodes_json import emit_json


@dataclass
class EmitResult(StageResult):
    """``model``: the region model read; ``nodes_json``/``consts_json``: the contract (docs/json-format.md)."""
    nodes_json: dict = field(default_factory=dict)
    consts_json: dict = field(default_factory=dict)

    def __iter__(self):
        # emit() returned the pair (nodes_json, consts_json) before the stage contract
        warnings.warn("emit() returns an EmitResult: use .nodes_json and .consts_json", DeprecationWarning,
                      stacklevel=2)
        return iter((self.nodes_json, self.consts_json))


def emit(region: onnx.ModelProto, name: str = None, *, arrays=None) -> EmitResult:
    """The Nodes-JSON and Constants-JSON of a region model whose nodes are all Mrvl ops (``name``:
    the subgraph name, else the region graph's name). The argument is not modified. ``arrays``:
    initializer name -> a read-only array of its values (``FuseResult.arrays``), read instead of
    decoding those initializers again."""
    region = as_model(region, "emit")
    nodes_json, consts_json = emit_json(region, name, arrays)
    steps = [(n["attrs"]["layer_name"][0], list(n["attrs"].get("origin_nodes", [[]])[0]), n["name"])
             for n in nodes_json["nodes"] if n.get("op") == "tvm_op"]
    return EmitResult(region, None, steps, nodes_json, consts_json)
