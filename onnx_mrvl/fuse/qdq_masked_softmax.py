"""A float attention mask between int8 scores and the quantized probabilities:

    DQ(scores codes) -> Add(., M) -> Softmax -> Q -> DQ        (M a float constant)

as one int8 Softmax (``requant`` "float") that adds the constant ``mask`` M to the dequantized
codes in fp32 before its fp32 Softmax (MLAS's, sim/mlas_softmax.py) and the Q, which is what
onnxruntime runs for this group (the Add and the Softmax stay float between the DQ and the Q).

The form comes from quantizers that keep a mask of float32's lowest float (``convert(quantize=
"int8")``, quantize/nonfinite.py: a causal mask's Add and the Softmax are excluded, their
calibrated scale would be ~1.3e36): as fp16 layers (a Sum2D with the mask as -32768, an fp16
Softmax) the probabilities were ~73 dB from onnxruntime's and the Q after them moved codes (a
Llama block: 88-92% of the output identical). Conditions: the Add reads a DQ of an activation's
pair and a float constant M that broadcasts to the scores (any values: -inf, lowest, 0, -1e4),
its output is read by the Softmax alone, the Softmax's by one Q -> DQ pair.
"""
from __future__ import annotations

from typing import Union

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .groups import Group
from .qdq import activation_input, qparams
from .qdq_transformer import build_requantize


def _mask_operand(g: GraphIndex, add: onnx.NodeProto):
    """(the scores tensor, the constant mask) of ``Add(scores, M)`` / ``Add(M, scores)``, or None."""
    if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
        return None
    for k in (0, 1):
        c, x = add.input[1 - k], add.input[k]
        if g.is_const(c) and not g.is_const(x) and g.is_float(c):
            v = g.const(c)
            return (x, np.asarray(v, np.float32)) if v is not None else None
    return None


def build(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    """The int8 masked Softmax of ``n`` (see the module docstring), None when ``n`` is not in that
    form (the other Softmax builders take it), or the reason it cannot be one."""
    from .transformer import build_softmax
    if n.op_type != "Softmax":
        return None
    add = g.producer.get(n.input[0])
    found = _mask_operand(g, add) if add is not None else None
    if found is None or len(g.consumers.get(add.output[0], [])) != 1 or add.output[0] in g.output_set:
        return None
    scores, mask = found
    act = activation_input(g, scores)
    if act is None or isinstance(act[1], str):
        return None
    dq, qin = act
    shape = g.shape(scores)
    if not shape or g.shape(n.input[0]) != shape:
        return "the mask broadcasts the scores to another shape"
    try:
        full = np.broadcast_to(mask, shape)
    except ValueError:
        return f"a mask of shape {list(mask.shape)} does not broadcast to the scores {shape}"
    users = g.consumers.get(n.output[0], [])
    if len(users) != 1 or users[0].op_type != "QuantizeLinear" or n.output[0] in g.output_set:
        return None
    grp = build_softmax(g, n, target)
    if isinstance(grp, str) or grp.nodes != [n]:
        return grp if isinstance(grp, str) else None
    pair = build_requantize(g, users[0], target)
    if isinstance(pair, str):
        return pair
    in_front = []
    q = g.producer.get(dq.input[0])
    if q is not None and q.op_type == "QuantizeLinear" and len(g.consumers.get(dq.output[0], [])) == 1 \
            and len(g.consumers.get(q.output[0], [])) == 1 and qparams(g, q) == qin \
            and g.is_float(q.input[0]) and not g.is_const(q.input[0]) and q.input[0] not in g.inputs \
            and not {q.name, dq.name} & (set(claimed) | set(g.excluded)):
        in_front, x = [q, dq], q.input[0]   # the layer quantizes the scores itself
    else:
        x = dq.output[0]   # the codes an int8 layer (which took the pair) writes
    nodes = [n, add] + pair.nodes + in_front
    if {m.name for m in nodes} & (set(claimed) | set(g.excluded)):
        return "its nodes are excluded by the user or taken by another layer"
    s, z, t = qin
    attrs = dict(grp.attrs, **{k: v for k, v in pair.attrs.items() if k.startswith(("out_", "precision"))},
                 in_scale=s, in_zero_point=z, in_type=t, requant="float")
    return Group("Softmax", grp.composite, nodes, [x], pair.output, attrs,
                 {"mask": np.ascontiguousarray(full, np.float32)})
