"""``float x -> MaxPool / GlobalMaxPool -> Q -> DQ`` (no DQ in front: x comes from a float op such as
LRN, as in quantize_static's AlexNet / ZFNet) as an int8 max pool that quantizes its input.

onnxruntime's QDQ propagation moves that Q above the pool and runs the pool on the codes; either
order gives the same codes, as Q is monotone (``Q(max(x)) == max(Q(x))``). A float pool instead
rounds x to fp16 (region storage) before the Q, which moves codes that lie near a rounding boundary
(AlexNet: 1284 of 173056 after its second LRN). As an int8 layer the pool's input is quantized in
fp32 on the host when it is a region input (docs/simulator.md "int8 layers"), as onnxruntime does.
"""
from __future__ import annotations

from typing import Union

import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .groups import Group
from .patterns import build_pool as build_float_pool
from .qdq import output_pair, qattrs

ANCHORS = ("MaxPool", "GlobalMaxPool")


def build(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    """The int8 group (the pool, its Q and DQ; the float input quantized with the Q's parameters),
    a reason, or None when the pattern does not apply (no float input, no Q -> DQ after)."""
    if n.op_type not in ANCHORS or not g.is_float(n.input[0]) or len([o for o in n.output if o]) != 1:
        return None
    found = output_pair(g, n.output[0], claimed, also=(n.name,))
    if found is None or isinstance(found, str):
        return found
    q_out, dq_out, qout = found
    grp = build_float_pool(g, n, target)
    if isinstance(grp, str) or grp is None:
        return grp
    if grp.output != n.output[0]:
        return None   # the float pattern took more than the pool (an activation after it)
    return Group(grp.op, grp.composite, grp.nodes + [q_out, dq_out], [n.input[0]], dq_out.output[0],
                 dict(grp.attrs, **qattrs(qout, qout)), {})
