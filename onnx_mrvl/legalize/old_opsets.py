"""Shapes for onnx's version converter on opset 1-6 models.

Some of the converter's adapters (BatchNormalization 5 -> 6, Gemm 6 -> 7, the broadcast adapters) need the
sizes of their inputs, and ONNX shape inference stops at old ops that have none (BatchNormalization-1,
Reshape-1 with its ``shape`` attribute): "assertInputsAvailable: Shape of input 0 is not available".
``seed_shapes`` infers node by node: each node alone at its own opset, else alone at opset 7 with the
attributes opset 7 no longer knows (``consumed_inputs``, ``is_test``, ...) left out, else -- for ops
that keep their input's shape -- the input's shape. The results go into ``graph.value_info``.
"""
from __future__ import annotations

import logging
from typing import Dict

import onnx
from onnx import defs, helper
from .. import file_weights

logger = logging.getLogger(__name__)

# ops whose output 0 has the shape of input 0 in every opset
SAME_SHAPE = {"BatchNormalization", "Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "Tanh", "Dropout", "Softmax",
              "LogSoftmax", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Clip", "PRelu",
              "HardSigmoid", "Softplus", "Softsign", "InstanceNormalization", "LRN", "Cast", "Identity"}


def _alone(node: onnx.NodeProto, known: Dict[str, onnx.ValueInfoProto], version: int, filtered: bool):
    """The inferred value infos of ``node``'s outputs when it runs alone at ``version`` (``filtered``:
    without the attributes that version does not know)."""
    n = onnx.NodeProto()
    n.CopyFrom(node)
    if filtered:
        try:
            allowed = set(defs.get_schema(node.op_type, version, node.domain).attributes)
        except Exception:
            return {}
        keep = [a for a in n.attribute if a.name in allowed]
        del n.attribute[:]
        n.attribute.extend(keep)
    ins = [known[i] for i in dict.fromkeys(x for x in node.input if x)]
    g = helper.make_graph([n], "one", ins, [helper.make_empty_tensor_value_info(o) for o in node.output if o])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", version)])
    m.ir_version = 7
    try:
        inferred = onnx.shape_inference.infer_shapes(file_weights.inline(m), strict_mode=True)
    except Exception:
        return {}
    return {vi.name: vi for vi in inferred.graph.output
            if vi.type.tensor_type.HasField("shape") and vi.type.tensor_type.elem_type}



def _reshape_1(node: onnx.NodeProto, known: Dict[str, onnx.ValueInfoProto]):
    """Reshape-1 (``shape`` attribute; 0 copies a dimension, -1 takes the rest)."""
    shape = next((list(a.ints) for a in node.attribute if a.name == "shape"), None)
    t = known[node.input[0]].type.tensor_type
    if node.op_type != "Reshape" or shape is None or not t.HasField("shape"):
        return {}
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if None in dims:
        return {}
    out = [dims[k] if v == 0 else v for k, v in enumerate(shape)]
    total = 1
    for d in dims:
        total *= d
    rest = 1
    for d in out:
        rest *= d if d != -1 else 1
    out = [total // rest if d == -1 else d for d in out]
    return {node.output[0]: helper.make_tensor_value_info(node.output[0], t.elem_type, out)}


def seed_shapes(model: onnx.ModelProto, opset: int) -> int:
    """Put the shapes of ``model``'s intermediate tensors into ``graph.value_info`` (see the module
    docstring); returns how many were found."""
    g = model.graph
    known: Dict[str, onnx.ValueInfoProto] = {vi.name: vi for vi in g.input}
    for t in g.initializer:
        known.setdefault(t.name, helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    found = 0
    for node in g.node:
        if node.domain not in ("", "ai.onnx") or any(i and i not in known for i in node.input):
            continue
        out = _alone(node, known, opset, False) or _alone(node, known, 7, True) or _reshape_1(node, known)
        if not out and node.op_type in SAME_SHAPE and node.input and node.output:
            src = known[node.input[0]]
            vi = onnx.ValueInfoProto()
            vi.CopyFrom(src)
            vi.name = node.output[0]
            out = {vi.name: vi}
        for name, vi in out.items():
            if name not in known:
                known[name] = vi
                g.value_info.append(vi)
                found += 1
    logger.info("legalize: %d tensor shapes of the opset %d model found for the version converter", found, opset)
    return found
