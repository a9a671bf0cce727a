"""A float16 model (PyTorch ``model.half()`` exports, onnxconverter-common's float16 conversion) is
computed in float32 inside: its float16 weights and constants become float32 (exact), a float16 graph
input is cast to float32 once, a float16 graph output is cast back, and ``Cast`` / ``ConstantOfShape``
/ dtype attributes naming float16 name float32. The accelerator computes in fp16 anyway and takes
float32 models; without this every node stayed on the CPU ("not float32"). The graph interface
(names, types, shapes) is unchanged; results differ from a float16 run by float16 rounding only.
Graphs with control-flow subgraphs are left alone."""
from __future__ import annotations

import logging
from typing import Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import provenance
from .fresh_arena import tensor_bytes

logger = logging.getLogger(__name__)
F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
FRESH_BYTES = 1 << 20   # float16 weight bytes from which a consumed model is converted into a new one
_DTYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype"}


def _elem(vi) -> int:
    return vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0


def _to_f32(t: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)


def _rename_reads(g: onnx.GraphProto, old: str, new: str) -> None:
    for n in g.node:
        for k, x in enumerate(n.input):
            if x == old:
                n.input[k] = new


def to_float32(model: onnx.ModelProto) -> int:
    """Rewrite ``model`` in place (see the module doc); returns how many float16 items changed."""
    return float32(model)[1]


def float32(model: onnx.ModelProto, fresh: bool = False) -> Tuple[onnx.ModelProto, int]:
    """(the model computed in float32 inside, how many float16 items changed): ``model`` rewritten in
    place, or with ``fresh`` (legalize consumes ``model``) and float16 weights of at least
    ``FRESH_BYTES`` that outweigh the others, a new model whose initializers are converted into it
    one at a time: upb frees a model's memory only as a whole, so converted in place the float16
    bytes stayed beside their float32 copies (fresh_arena.py). The same model either way."""
    g = model.graph
    has_f16 = any(t.data_type == F16 for t in g.initializer) or \
        any(_elem(v) == F16 for v in list(g.input) + list(g.output))
    if not has_f16:
        return model, 0
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in g.node for a in n.attribute):
        logger.info("legalize: float16 model with control flow kept in float16 (its nodes stay on the CPU)")
        return model, 0
    changed = sum(1 for t in g.initializer if t.data_type == F16)
    half = sum(tensor_bytes(t) for t in g.initializer if t.data_type == F16)
    if fresh and half >= FRESH_BYTES and 2 * half >= sum(tensor_bytes(t) for t in g.initializer):
        model = _converted_into_new(model)
        g = model.graph
    else:
        for i, t in enumerate(g.initializer):
            if t.data_type == F16:
                g.initializer[i].CopyFrom(_to_f32(t))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == F16:
                a.t.CopyFrom(_to_f32(a.t))
                changed += 1
            elif a.type == onnx.AttributeProto.INT and a.name == _DTYPE_ATTRS.get(n.op_type) and a.i == F16:
                a.i = F32
                changed += 1
    inits = {t.name for t in g.initializer}
    casts = []
    for vi in g.input:
        if _elem(vi) != F16 or vi.name in inits:
            continue
        new = f"{vi.name}__fp32"
        _rename_reads(g, vi.name, new)
        cast = helper.make_node("Cast", [vi.name], [new], name=f"{vi.name}/to_fp32", to=F32)
        provenance.set_origin(cast, [])
        casts.append(cast)
        changed += 1
    producers = {o: n for n in g.node for o in n.output}
    tail = []
    for vi in g.output:
        p = producers.get(vi.name)
        if _elem(vi) != F16 or p is None:
            continue
        new = f"{vi.name}__fp32"
        p.output[list(p.output).index(vi.name)] = new
        _rename_reads(g, vi.name, new)
        cast = helper.make_node("Cast", [new], [vi.name], name=f"{vi.name}/to_fp16", to=F16)
        provenance.set_origin(cast, [p.name])
        tail.append(cast)
        changed += 1
    nodes = casts + list(g.node) + tail
    del g.node[:]
    g.node.extend(nodes)
    g.ClearField("value_info")
    logger.info("legalize: float16 model computed in float32 inside (%d items converted)", changed)
    return model, changed


def _converted_into_new(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s initializers (float16 ones as float32) as standalone tensors, then ``model``
    without them copied into a new model and the tensors moved in, each freed once copied."""
    tensors = []
    for t in model.graph.initializer:
        if t.data_type == F16:
            tensors.append(_to_f32(t))
        else:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            tensors.append(copy)
    del model.graph.initializer[:]
    out = onnx.ModelProto()
    out.CopyFrom(model)
    tensors.reverse()
    while tensors:
        out.graph.initializer.add().CopyFrom(tensors.pop())
    return out
