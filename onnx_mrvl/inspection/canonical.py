"""Canonical, hashable views of ONNX pieces shared by the inspection tools: model loading,
attribute values, tensor digests, provenance records, value infos."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Union

import numpy as np
import onnx

from .. import file_weights
from ..errors import ModelError
from ..provenance import ORIGIN_KEY

MRVL_DOMAIN = "mrvl"
REGION_PREFIX = "Subgraph"

ModelLike = Union[onnx.ModelProto, str, "os.PathLike[str]"]


def load_model(model: ModelLike) -> onnx.ModelProto:
    """A ModelProto as is, or the model at a path (ModelError when it cannot be read)."""
    if isinstance(model, onnx.ModelProto):
        return model
    path = os.fspath(model)
    if os.path.isdir(path):
        raise ModelError(f"cannot read model {path!r}: a folder, not a model file",
                         hint="pass the .onnx file itself (of a `onnx-mrvl convert` output folder: OUT_DIR/model.onnx)")
    if not os.path.isfile(path):
        raise ModelError(f"cannot read model {path!r}: no such file", hint="check the path")
    try:
        loaded = onnx.load(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure means "not a readable model"
        raise ModelError(f"cannot read model {path!r}: {type(exc).__name__}: {exc}",
                         hint="pass a valid .onnx file") from exc
    if not loaded.HasField("graph") and not loaded.opset_import:
        raise ModelError(f"{path!r} is not an ONNX model (no graph, no opset)", hint="pass a valid .onnx file")
    return loaded



def dtype_name(elem_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def _tensor_bytes(t: onnx.TensorProto) -> bytes:
    if t.data_type == onnx.TensorProto.STRING:
        return b"\0".join(t.string_data)
    try:
        return np.ascontiguousarray(file_weights.array(t)).tobytes()
    except Exception:  # noqa: BLE001 - e.g. external data not loaded: hash the proto instead
        return t.SerializeToString(deterministic=True)


def tensor_sha256(t: onnx.TensorProto) -> str:
    return hashlib.sha256(_tensor_bytes(t)).hexdigest()


def _f32(v: float) -> float:
    return float(str(np.float32(v)))


def attr_value(a: onnx.AttributeProto) -> Any:
    """A hashable, JSON-friendly value for one attribute (tensors and graphs as digests)."""
    if a.ref_attr_name:
        return f"@{a.ref_attr_name}"
    T = onnx.AttributeProto
    if a.type == T.FLOAT:
        return _f32(a.f)
    if a.type == T.INT:
        return a.i
    if a.type == T.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == T.FLOATS:
        return tuple(_f32(v) for v in a.floats)
    if a.type == T.INTS:
        return tuple(a.ints)
    if a.type == T.STRINGS:
        return tuple(s.decode("utf-8", "replace") for s in a.strings)
    if a.type == T.TENSOR:
        return _tensor_text(a.t)
    if a.type == T.TENSORS:
        return tuple(_tensor_text(t) for t in a.tensors)
    if a.type == T.GRAPH:
        return _graph_text(a.g)
    if a.type == T.GRAPHS:
        return tuple(_graph_text(g) for g in a.graphs)
    return "sha256:" + hashlib.sha256(a.SerializeToString(deterministic=True)).hexdigest()[:16]


def _tensor_text(t: onnx.TensorProto) -> str:
    return f"tensor {dtype_name(t.data_type)}{list(t.dims)} sha256:{tensor_sha256(t)[:16]}"


def _graph_text(g: onnx.GraphProto) -> str:
    digest = hashlib.sha256(g.SerializeToString(deterministic=True)).hexdigest()[:16]
    return f"graph {g.name!r} ({len(g.node)} nodes) sha256:{digest}"


def jsonable(v: Any) -> Any:
    return [jsonable(x) for x in v] if isinstance(v, (tuple, list)) else v


def _parse_origin(raw: str) -> List[str]:
    try:
        names = json.loads(raw)
    except ValueError:
        return [raw]
    return [str(n) for n in names] if isinstance(names, list) else [str(names)]


def is_region_node(node: onnx.NodeProto) -> bool:
    return node.domain == MRVL_DOMAIN and node.op_type.startswith(REGION_PREFIX)


def explicit_origin(node: onnx.NodeProto) -> Optional[List[str]]:
    """Original node names recorded on ``node`` (None when it carries no record)."""
    if is_region_node(node):
        for a in node.attribute:
            if a.name == "origin" and a.type == onnx.AttributeProto.STRING:
                return _parse_origin(a.s.decode("utf-8", "replace"))
    for p in node.metadata_props:
        if p.key == ORIGIN_KEY:
            return _parse_origin(p.value)
    return None


def meta_props(node: onnx.NodeProto) -> Dict[str, str]:
    return {p.key: p.value for p in node.metadata_props}


def value_info(vi: onnx.ValueInfoProto) -> Dict[str, Any]:
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        return {"type": kind or "unknown"}
    tt = vi.type.tensor_type
    shape = None
    if tt.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    return {"dtype": dtype_name(tt.elem_type), "shape": shape}
