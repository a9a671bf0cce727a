"""A copy of a model without its graph's nodes, initializers and value_info."""
from __future__ import annotations

import onnx


def model_shell(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without the graph's nodes, initializers and value_info (which would be
    copied only to be thrown away: the weights of a large model are hundreds of MB)."""
    out = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            if _repeated(fd):
                getattr(out, fd.name).extend(value)
            elif fd.message_type is not None:
                getattr(out, fd.name).CopyFrom(value)
            else:
                setattr(out, fd.name, value)
    for fd, value in model.graph.ListFields():
        if fd.name in ("node", "initializer", "value_info"):
            continue
        if _repeated(fd):
            getattr(out.graph, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out.graph, fd.name).CopyFrom(value)
        else:
            setattr(out.graph, fd.name, value)
    return out


def _repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)   # protobuf >= 5.x; older ones only have ``label``
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED
