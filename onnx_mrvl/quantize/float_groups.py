"""Groups of float ops that ``quantize="int8"`` keeps float as a whole (``nodes_to_exclude``), so the
import takes each as one accelerator layer instead of leaving its pieces on the CPU:

- ``signed_permutations``: a Concat whose inputs are ``Slice(t)`` or ``Neg(Slice(t))`` of one tensor
  ``t`` (rotary ``rotate_half``: ``cat(-x[..., d/2:], x[..., :d/2])``). Quantized, the Concat put a
  Q -> DQ pair after the float Neg, which no int8 layer absorbs (the Neg reads a float Slice): the
  Neg stayed on the CPU and cut the region (Llama / Qwen2: 3 regions). Float, legalize's
  ``signed_permute`` makes the group one MatMul by a +-1 permutation (exact); its int8 reader
  quantizes the result.
- ``rms_norms``: the ReduceMean of a square (``Pow(x, 2)`` / ``Mul(x, x)``), its ``+ eps`` and the
  ``* gamma`` after the normalisation (``x * rsqrt`` / ``x / sqrt``) of an RMSNorm. Quantized, the
  mean and the eps Add got Q -> DQ pairs that split the form fuse's ``rmsnorm`` takes (Pow /
  ReduceMean / Sqrt / Reciprocal on the CPU); float, the norm is one fp16 Mrvl ``LayerNorm``
  (``rms`` = 1) whose int8 readers quantize its output.
- ``written_norms_softmaxes``: every node of a layer norm written from its moments (flax's
  ``E[x^2] - E[x]^2``, jax2tf / tf2onnx; the hand-written PyTorch one) and of a softmax written out
  with its max subtracted (``jax.nn.softmax``; PyTorch / Keras by hand): the nodes legalize's
  ``layernorm_moments`` / ``softmax_expanded`` match on the float model (their own ``match``, so the
  two stay the same forms). Quantized, the eps Add and the softmax's Sub got Q -> DQ pairs that
  split both forms (magika: the pieces on the CPU, 3 regions); float, legalize makes them one
  ``LayerNormalization`` / ``Softmax`` (fp16) whose int8 readers quantize the result.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np
import onnx
from onnx import numpy_helper

from .. import file_weights


def _index(model: onnx.ModelProto):
    consts: Dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    producer = {o: n for n in model.graph.node for o in n.output}
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    return consts, producer, readers


def signed_permutations(model: onnx.ModelProto) -> Set[str]:
    """Names of the Concats of ``Slice(t)`` / ``Neg(Slice(t))`` pieces of one tensor, with one Neg
    at least (see the module docstring)."""
    _, producer, readers = _index(model)
    out = set()
    for n in model.graph.node:
        if n.op_type != "Concat" or len(n.input) < 2:
            continue
        srcs, negs = set(), 0
        for i in n.input:
            p = producer.get(i)
            if p is not None and p.op_type == "Neg" and len(readers.get(i, [])) == 1:
                negs += 1
                p = producer.get(p.input[0])
            if p is None or p.op_type != "Slice":
                srcs.add(None)
                break
            srcs.add(p.input[0])
        if negs and len(srcs) == 1 and None not in srcs:
            out.add(n.name)
    return out


def _square_of(n: Optional[onnx.NodeProto], consts) -> Optional[str]:
    """x when ``n`` is Pow(x, 2) or Mul(x, x)."""
    if n is None:
        return None
    if n.op_type == "Pow" and n.input[1] in consts and np.asarray(consts[n.input[1]]).size == 1 \
            and float(np.asarray(consts[n.input[1]]).reshape(-1)[0]) == 2.0:
        return n.input[0]
    if n.op_type == "Mul" and n.input[0] == n.input[1]:
        return n.input[0]
    return None


def rms_norms(model: onnx.ModelProto) -> Set[str]:
    """Names of the ReduceMean, ``+ eps`` Add and ``* gamma`` Mul of each RMSNorm (see the module
    docstring); a form that does not continue as an RMSNorm contributes nothing."""
    consts, producer, readers = _index(model)

    def only(t: str, *ops: str) -> Optional[onnx.NodeProto]:
        rs = readers.get(t, [])
        return rs[0] if len(rs) == 1 and rs[0].op_type in ops else None

    out = set()
    for m in model.graph.node:
        if m.op_type != "ReduceMean":
            continue
        x = _square_of(producer.get(m.input[0]), consts)
        add = only(m.output[0], "Add")
        if x is None or add is None or not any(i in consts for i in add.input):
            continue
        sq = only(add.output[0], "Sqrt")
        if sq is None:
            continue
        r = only(sq.output[0], "Reciprocal", "Div")
        if r is None:
            continue
        if r.op_type == "Div" and r.input[1] == sq.output[0] and r.input[0] == x:
            y = r                                       # x / sqrt(v)
        else:
            if r.op_type == "Div" and not (r.input[1] == sq.output[0] and r.input[0] in consts):
                continue
            y = only(r.output[0], "Mul")                # x * rsqrt(v)
            if y is None or x not in y.input:
                continue
        names = {m.name, add.name}
        g = only(y.output[0], "Mul")
        if g is not None and any(i in consts for i in g.input):
            names.add(g.name)
        out |= names
    return out


def written_norms_softmaxes(model: onnx.ModelProto, feed: Optional[Dict[str, np.ndarray]] = None) -> Set[str]:
    """Names of every node of a moments layer norm or a written-out softmax (module docstring), as
    legalize's ``layernorm_moments`` / ``softmax_expanded`` match and accept them on ``model`` (float, with
    static shapes from onnx's shape inference, the inputs' dims those of ``feed``, one calibration
    input, when given; a form with unknown shapes contributes nothing)."""
    from ..legalize import shapes
    from ..legalize.graph import Graph
    from ..legalize.rules import layernorm_moments, softmax_expanded
    from ..target import DEFAULT_TARGET
    ops = {"ReduceSum", "ReduceMean", "ReduceMax"}
    if not any(n.op_type in ops for n in model.graph.node):
        return set()
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for vi in copy.graph.input:
        if feed and vi.name in feed and vi.type.HasField("tensor_type"):
            dims = vi.type.tensor_type.shape.dim
            if len(dims) == np.ndim(feed[vi.name]):
                for d, v in zip(dims, np.shape(feed[vi.name])):
                    d.Clear()
                    d.dim_value = int(v)
    del copy.graph.value_info[:]
    try:
        copy = onnx.shape_inference.infer_shapes(file_weights.inline(copy))
    except Exception:   # noqa: BLE001 - no shapes: no group (the model quantizes as before)
        return set()
    consts, _, _ = _index(copy)
    known = {t.name for t in copy.graph.initializer}
    copy.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()
                                  if k not in known)   # Constant nodes as the rules' constants
    view = onnx.ModelProto()
    view.CopyFrom(copy)
    g = Graph(view)   # takes view's nodes; copy stays whole for the probe
    g.target = DEFAULT_TARGET
    for vi in list(copy.graph.input) + list(copy.graph.value_info) + list(copy.graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            g.set_shape(vi.name, [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim],
                        tt.elem_type)
    missing = [o for n in copy.graph.node for o in n.output if o and g.shape(o) is None]
    open_reduction = any(n.op_type in ops and g.shape(n.input[0]) is None for n in copy.graph.node if n.input)
    if missing and open_reduction and feed and all(d.HasField("dim_value") for vi in copy.graph.input
                                for d in vi.type.tensor_type.shape.dim):
        shapes.ort_fill(copy, missing, g)   # data-dependent Reshapes (jax2tf): measured once
    out: Set[str] = set()
    for n in g.node_list():
        if n.op_type not in ops or n.domain not in ("", "ai.onnx"):
            continue
        for rule in (layernorm_moments, softmax_expanded):
            if n.op_type in rule.OPS:
                mt = rule.match(n, g)
                if mt is not None and rule.check(mt, g, DEFAULT_TARGET) is None:   # what legalize rewrites
                    out |= {m.name for m in mt.data["all"] if m.name}
    return out
