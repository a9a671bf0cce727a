"""Provenance: which original ONNX nodes a node came from.

Every node a pass creates records the original node names in ``metadata_props`` under
``mrvl.origin`` (a JSON list). Nodes of the original model are their own origin.
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


def get_origin(node: onnx.NodeProto) -> List[str]:
    """Original node names of ``node`` (its own name when it carries no record)."""
    raw = _get_prop(node, ORIGIN_KEY)
    if raw is None:
        return [node.name] if node.name else []
    try:
        names = json.loads(raw)
    except ValueError:
        return [raw]
    return [str(n) for n in names] if isinstance(names, list) else [str(names)]


def set_origin(node: onnx.NodeProto, names: Iterable[str]) -> onnx.NodeProto:
    seen: List[str] = []
    for n in names:
        if n and n not in seen:
            seen.append(n)
    _set_prop(node, ORIGIN_KEY, json.dumps(seen))
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
