"""Constant folding: a node whose inputs are all initializers becomes initializers.

Also folds ``Shape``/``Size`` of a statically shaped tensor and turns ``Constant`` nodes into
initializers. Outputs that expand a small constant into a huge tensor (ConstantOfShape, Expand,
Tile, Range) are not folded unless they feed a weight input, which must be an initializer.

The nodes computing a control-flow condition (``If`` cond, ``Loop`` trip count / cond) are not
folded (``Constant`` nodes apart): if_static_branch inlines the branch a static condition takes
(evaluating the cone itself); folding it here would make
onnxruntime inline it at load time and re-check the branch with static shapes, which fails on
graphs it otherwise runs (the ONNX AffineGrid function feeds ``Range`` 1-element tensors).
"""
from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import onnx
from onnx import helper

from ... import file_weights
from .base import Match, attr, inp, origin_of
from .qdq_split_pair import grid_of

NAME = "fold_constants"
OPS = None  # every node
logger = logging.getLogger(__name__)

MAX_EXPANDED_BYTES = 16 << 20
EXPANDERS = {"ConstantOfShape", "Expand", "Tile", "Range"}
NON_DETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli"}
# op -> input indices that are weights (must be constant for the accelerator)
WEIGHT_INPUTS = {"Conv": (1, 2), "ConvTranspose": (1, 2), "Gemm": (1, 2), "MatMul": (1,),
                 "BatchNormalization": (1, 2, 3, 4), "PRelu": (1,), "InstanceNormalization": (1, 2)}


def _has_subgraph(node) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
               for a in node.attribute)


CONDITION_INPUTS = {"If": (0,), "Loop": (0, 1)}
MAX_CONDITION_CONE = 256  # nodes: condition arithmetic is small
SHAPE_READERS = {"Constant", "Shape", "Size"}


def condition_cone(g) -> set:
    """Tensors that (transitively) compute a control-flow condition of the top-level graph, for
    the conditions that folding could make static: a condition whose cone reads the values of a
    graph input (hey_jarvis' ``If(score >= threshold)``) is data-dependent whatever folds, so its cone
    (the whole model in front of it) folds as any other graph."""
    cone = set()
    for op, idx in CONDITION_INPUTS.items():
        for n in g.nodes_of((op,)):
            for t in (inp(n, k) for k in idx if inp(n, k)):
                part = _cone_of(g, t)
                if part is not None:
                    cone |= part
    return cone


def _cone_of(g, cond: str):
    """The cone of one condition tensor; None when it reads a graph input's values."""
    cone, todo, seen_nodes = set(), [cond], 0
    while todo and seen_nodes < MAX_CONDITION_CONE:
        name = todo.pop()
        if name in cone:
            continue
        cone.add(name)
        p = g.producer.get(name)
        if p is None:
            if name in g.inputs and name not in g.inits:
                return None           # data-dependent: no fold can make it static
            continue
        if p.op_type in SHAPE_READERS or _has_subgraph(p):
            continue                  # Shape/Size read no values: the data feeding them is not in the cone
        seen_nodes += 1
        todo.extend(i for i in p.input if i)
    return cone


def _in_condition_cone(node, g) -> bool:
    count = len(g.by_op.get("If", {})) + len(g.by_op.get("Loop", {}))
    if not count:
        return False
    key = (count, id(g.shapes))  # shape inference makes a new dict each sweep: recomputed
    cached = getattr(g, "_condition_cone", None)
    if cached is None or cached[0] != key:
        cached = (key, condition_cone(g))
        g._condition_cone = cached
    return any(o in cached[1] for o in node.output)


def in_condition_cone(node, g) -> bool:
    """Whether ``node`` computes an If condition / a Loop trip count or condition (never folded)."""
    return _in_condition_cone(node, g)


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or node.op_type in NON_DETERMINISTIC \
            or _has_subgraph(node) or any(o in g.outputs for o in node.output):
        return None
    if node.op_type != "Constant" and _in_condition_cone(node, g):
        return None
    if node.op_type in ("Shape", "Size") and node.input:
        s = g.shape(node.input[0])
        if s is not None:
            return Match([node], {"shape": s})
        return None
    ins = [i for i in node.input if i]
    if all(g.is_const(i) for i in ins) and (ins or node.op_type == "Constant"):
        if node.op_type == "DequantizeLinear" and quantized_weight(node, g):
            return None
        if node.op_type == "DequantizeLinear" and _in_const_groups(node, g):
            return None   # qdq_const_group folds the group as onnxruntime computes it
        if node.op_type == "QuantizeLinear" and _double_pair_head(node, g):
            return None   # qdq_double_pair merges the two pairs first, as onnxruntime does
        if node.op_type == "DequantizeLinear" and _layer_readers(node, g):
            return Match([node], {"keep_for": _layer_readers(node, g)})
        return Match([node])
    return None


def _double_pair_head(node, g) -> bool:
    from .qdq_double_pair import double_pair_head
    return double_pair_head(node, g)


def _in_const_groups(node, g) -> bool:
    from .qdq_const_group import const_group
    users = g.users(node.output[0])
    return bool(users) and node.output[0] not in g.outputs and all(const_group(u, g) is not None for u in users)


QDQ_LAYERS = {"Conv": (1, 2), "Gemm": (1, 2), "MatMul": (1,), "ConvTranspose": (1, 2),   # (qdq_convtranspose)
              "LSTM": (1, 2), "GRU": (1, 2), "RNN": (1, 2)}   # W, R of an int8 recurrent layer (fuse/qdq_recurrent.py)
QDQ_ELEMENTWISE = ("Mul", "Add", "Sub", "Div")


def quantized_weight(node, g, elementwise: bool = True) -> bool:
    """A DequantizeLinear of an integer constant that is the weight or bias of a QDQ layer (its
    data input is a DequantizeLinear too): kept, so fuse sees the int8 weights and their scales
    (docs/fusion.md, "int8"). With ``elementwise`` also the constant operand of a QDQ Mul / Add /
    Sub / Div (onnxruntime's QLinearMul / QLinearAdd read its codes as they are)."""
    if not node.input or g.dtype(node.input[0]) not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8,
                                                       onnx.TensorProto.INT32):
        return False
    users = _through_moves(g, node.output[0])
    return bool(users) and all(_int8_reader(g, c, name, elementwise) for c, name in users)


def _int8_reader(g, c, name: str, elementwise: bool = True) -> bool:
    """``c`` reads ``name`` as the weight / bias of a QDQ layer (or, with ``elementwise``, as the
    constant operand of a QDQ Mul / Add / Sub / Div) beside a dequantized activation."""
    if elementwise and c.op_type in QDQ_ELEMENTWISE and len(c.input) == 2:
        # a QDQ Mul / Add with a quantized constant: onnxruntime fuses DQ(x) * DQ(c) -> Q into
        # QLinearMul, and fuse's int8 Lookup asks onnxruntime for that group's table
        src = g.producer.get(c.input[1] if c.input[0] == name else c.input[0])
    elif name in [inp(c, k) for k in QDQ_LAYERS.get(c.op_type, ())]:
        src = g.producer.get(inp(c, 0))
        if c.op_type in ("Conv", "Gemm", "MatMul") and name != inp(c, 0) and grid_of(g, inp(c, 0)) is not None:
            return True   # moved dequantized values of one grid: qdq_split_pair puts the pair in front
    else:
        return False
    # no activation beside it (a DQ of a constant too): the op folds
    return src is not None and src.op_type == "DequantizeLinear" and not all(g.is_const(i) for i in src.input if i)


def _layer_readers(node, g) -> list:
    """The direct readers of a weight DequantizeLinear that are int8 layers, when others read it too
    (SEW-D / DeBERTa share a projection's weights between the hidden states and the constant
    relative-position embeddings): the DQ stays for them and the others read a folded copy."""
    if not node.input or g.dtype(node.input[0]) not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8,
                                                       onnx.TensorProto.INT32):
        return []
    users = g.users(node.output[0])
    keep = [c for c in users if _int8_reader(g, c, node.output[0])]
    return keep if keep and len(keep) < len(users) and node.output[0] not in g.outputs else []


# ops that only move a weight's values (tf2onnx: DQ -> Transpose -> MatMul / Conv): qdq_weight_moves
# moves the integer codes instead
WEIGHT_MOVES = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _through_moves(g, name, depth: int = 4):
    """(reader, the tensor it reads) of ``name``, looking through single-reader weight moves."""
    users = g.users(name)
    if depth and len(users) == 1 and users[0].op_type in WEIGHT_MOVES and users[0].input[0] == name \
            and all(g.is_const(i) for i in users[0].input[1:] if i):
        return _through_moves(g, users[0].output[0], depth - 1)
    return [(c, name) for c in users]


def _feeds_weight(g, name) -> bool:
    for c in g.users(name):
        idx = WEIGHT_INPUTS.get(c.op_type, ())
        if any(inp(c, k) == name for k in idx):
            return True
    return False


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if node.op_type in EXPANDERS:
        shape = g.shape(node.output[0])
        if shape is None and node.op_type == "ConstantOfShape":
            shape = tuple(int(d) for d in g.const(node.input[0]).reshape(-1))
        n = int(np.prod(shape)) if shape is not None else None
        if (n is None or n * 4 > MAX_EXPANDED_BYTES) and not _feeds_weight(g, node.output[0]):
            return (f"output of {node.op_type} would be "
                    f"{'unknown' if n is None else n * 4 >> 20} MB, larger than "
                    f"{MAX_EXPANDED_BYTES >> 20} MB, and feeds no weight input")
    try:
        m.data["values"] = (shape_values(node, m.data["shape"]) if "shape" in m.data
                            else evaluate(node, g))
    except Exception as exc:
        return f"cannot evaluate {node.op_type} on its constants: {exc}"
    return None


def shape_values(node, shape):
    """The outputs of Shape / Size on a tensor of static ``shape``."""
    dims = np.asarray(shape, dtype=np.int64)
    if node.op_type == "Size":
        return [np.asarray(int(np.prod(dims)), dtype=np.int64)]
    r = len(dims)
    start = attr(node, "start", 0)
    end = attr(node, "end", r)
    start = max(0, min(r, start + r if start < 0 else start))
    end = max(0, min(r, end + r if end < 0 else end))
    return [dims[start:end]]


def evaluate(node, g, values=None):
    """Run one node on constant inputs (onnx.reference, onnxruntime as fallback); ``values``: input
    name -> array for inputs that are not initializers (a computed condition, if_static_branch)."""
    model = onnx.ModelProto()
    model.ir_version = 8
    model.opset_import.extend(g.model.opset_import)
    gr = model.graph
    gr.name = "fold"
    n = gr.node.add()
    n.CopyFrom(node)
    del n.metadata_props[:]
    feeds = {}
    for i in node.input:
        if i and i not in feeds:
            feeds[i] = values[i] if values is not None and i in values else g.const(i)
            gr.input.append(helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(feeds[i].dtype),
                                                          list(feeds[i].shape)))
    for o in node.output:
        if o:
            gr.output.append(helper.make_empty_tensor_value_info(o))
    outs = [o for o in node.output if o]
    try:
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(file_weights.inline(model)).run(outs, feeds)
    except Exception as exc:  # fall back to onnxruntime
        logger.debug("reference evaluator failed on %s (%s); trying onnxruntime", node.name, exc)
    import onnxruntime as ort
    sess = ort.InferenceSession(file_weights.serialized(model), providers=["CPUExecutionProvider"])
    return sess.run(outs, feeds)


def _dequantized_weight_note(node, g) -> Optional[str]:
    """Why a folded DequantizeLinear's weight is not int8 (its reader becomes a layer on dequantized
    weights): int4 / int16 codes, block-wise scales, a ConvTranspose weight. None otherwise."""
    if node.op_type != "DequantizeLinear" or not node.input:
        return None
    readers = [c for c, t in _through_moves(g, node.output[0]) if t in [inp(c, k) for k in WEIGHT_INPUTS.get(c.op_type, ())]]
    if not readers:
        return None
    dt = g.dtype(node.input[0])
    if dt not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32):
        why = f"{onnx.TensorProto.DataType.Name(dt).lower() if dt else 'non-8-bit'} weights: the MLIP has no such mode"
    elif attr(node, "block_size", 0):
        why = "block-wise weight scales: int8 layers take one scale per output channel"
    else:
        return None
    return f"{{precision}} with dequantized weights ({why}; DequantizeLinear '{node.name}')"


def rewrite(m: Match, g) -> str:
    node = m.node
    values = m.data["values"]
    if m.data.get("keep_for"):   # the int8 layers keep the DQ, the other readers take the folded value
        keep = {id(c) for c in m.data["keep_for"]}
        copy = g.add_const(f"{node.output[0]}/folded", np.asarray(values[0]))
        for c in g.users(node.output[0]):
            if id(c) not in keep:
                for k, t in enumerate(c.input):
                    if t == node.output[0]:
                        g.set_input(c, k, copy)
        return f"DequantizeLinear kept for its int8 layers, folded for its other readers ({copy})"
    note = _dequantized_weight_note(node, g)
    if note:
        for c, _ in _through_moves(g, node.output[0]):
            for o in origin_of(c):
                g.notes.setdefault(o, note)
    outs = [o for o in node.output if o]
    g.remove(node)
    for name, v in zip(outs, values):
        g.set_const(name, np.asarray(v))
    return f"{node.op_type} -> initializer {', '.join(outs)}"
