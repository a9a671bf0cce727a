"""Provenance: which original ONNX nodes a node came from.

Every node a pass creates records the original node names in ``metadata_props`` under
``mrvl.origin``. Nodes of the original model are their own origin. One encoding of the list
everywhere: a JSON list of names (:func:`encode_origin` / :func:`decode_origin`), in the node
metadata, in the Subgraph node's ``origin`` attribute and (as the list itself) in a Nodes-JSON
layer's ``origin_nodes``.
"""
from __future__ import annotations

import json
from typing import Iterable, List

import onnx

ORIGIN_KEY = "mrvl.origin"
COMPOSITE_KEY = "mrvl.composite"


def _get_prop(node: onnx.NodeProto, key: str):
    for p in node.metadata_props:
        if p.key == key:
            return p.value
    return None


def _set_prop(node: onnx.NodeProto, key: str, value: str) -> None:
    for p in node.metadata_props:
        if p.key == key:
            p.value = value
            return
    entry = node.metadata_props.add()
    entry.key, entry.value = key, value


def encode_origin(names: Iterable[str]) -> str:
    """The one text form of a list of original node names: a JSON list."""
    return json.dumps(list(names))


def decode_origin(raw) -> List[str]:
    """Names from :func:`encode_origin`'s text (or bytes, or a list as it stands); text that is
    not a JSON list is one name."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        try:
            names = json.loads(raw)
        except ValueError:
            return [raw]
    else:
        names = raw
    return [str(n) for n in names] if isinstance(names, (list, tuple)) else [str(names)]


def get_origin(node: onnx.NodeProto) -> List[str]:
    """Original node names of ``node`` (its own name when it carries no record)."""
    raw = _get_prop(node, ORIGIN_KEY)
    if raw is None:
        return [node.name] if node.name else []
    return decode_origin(raw)


def has_origin(node: onnx.NodeProto) -> bool:
    """Whether ``node`` carries a provenance record (a node a pass created or replaced)."""
    return _get_prop(node, ORIGIN_KEY) is not None


def set_origin(node: onnx.NodeProto, names: Iterable[str]) -> onnx.NodeProto:
    seen: List[str] = []
    for n in names:
        if n and n not in seen:
            seen.append(n)
    _set_prop(node, ORIGIN_KEY, encode_origin(seen))
    return node


def merge_origin(*nodes: onnx.NodeProto) -> List[str]:
    out: List[str] = []
    for n in nodes:
        for name in get_origin(n):
            if name not in out:
                out.append(name)
    return out


def get_composite(node: onnx.NodeProto):
    return _get_prop(node, COMPOSITE_KEY)


def set_composite(node: onnx.NodeProto, name: str) -> None:
    _set_prop(node, COMPOSITE_KEY, name)
