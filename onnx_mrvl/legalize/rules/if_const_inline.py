"""An ``If`` whose condition is known once the shapes are static -> the nodes of the branch it takes.

PyTorch's exports test shapes at run time (``if x.dim() == 3``, ``if state.size(0) == ...``): Silero
VAD v4 / v5's ``Shape -> Gather -> Equal -> If`` around a Squeeze and around its LSTM, Hugging Face's
batch-size checks. With static input shapes (``input_shapes=``) the condition is a constant; the If
kept both branches and cut the model on the CPU, and onnxruntime's type inference of a converted
model rejected the branch it never takes (a Squeeze of an axis that is not 1). The taken branch's
nodes and initializers join the graph where the If stood, the branch's outputs written under the
If's output names (an Identity when the output is an outer tensor or a constant). The condition is computed here (Shape / Size of static shapes, constants, then the
ops on them), never folded into the graph (fold_constants leaves condition cones alone). Left alone:
conditions that depend on data, a condition that is an initializer itself (onnxruntime inlines that
If at load), a branch defining a tensor name the graph already has."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import numpy_helper

from .base import Match, bypass_reason
from .fold_constants import evaluate, shape_values
from ...graph_index import subgraph_reads

NAME = "if_const_inline"
OPS = ("If",)
MAX_CONE = 64     # nodes computing a condition: shape arithmetic is small


def value(g, name: str, budget: list) -> Optional[np.ndarray]:
    """The value of tensor ``name`` when constants and static shapes determine it, else None."""
    c = g.const(name)
    if c is not None:
        return c
    p = g.producer.get(name)
    if p is None or p.domain not in ("", "ai.onnx") or budget[0] <= 0 or \
            any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in p.attribute):
        return None
    budget[0] -= 1
    if p.op_type in ("Shape", "Size"):
        s = g.shape(p.input[0])
        return None if s is None else np.asarray(shape_values(p, s)[0])
    vals = {}
    for i in p.input:
        if i and i not in vals:
            v = value(g, i, budget)
            if v is None:
                return None
            vals[i] = v
    try:
        outs = evaluate(p, g, vals)
    except Exception:   # noqa: BLE001 - an op the evaluators refuse: the If stays
        return None
    return np.asarray(outs[[o for o in p.output if o].index(name)])


def match(node, g) -> Optional[Match]:
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    if node.input[0] not in g.producer:   # an initializer (or input): onnxruntime inlines that one itself
        return None
    cond = value(g, node.input[0], [MAX_CONE])
    if cond is None or cond.size != 1:
        return None
    return Match([node], {"cond": bool(cond.reshape(-1)[0])})


def _branch(node, taken: bool) -> onnx.GraphProto:
    want = "then_branch" if taken else "else_branch"
    return next(a.g for a in node.attribute if a.name == want)


def check(m: Match, g, target) -> Optional[str]:
    body = _branch(m.node, m.data["cond"])
    defined = {o for n in body.node for o in n.output if o} | {t.name for t in body.initializer}
    clash = sorted(defined & g.tensor_names)
    if clash:
        return f"the branch defines tensor names the graph has ({clash[:3]})"
    if len(body.output) != len(m.node.output):
        return "the branch's outputs do not match the If's"
    return None


def rewrite(m: Match, g) -> str:
    node, taken = m.node, m.data["cond"]
    body = _branch(node, taken)
    made = {o for n in body.node for o in n.output if o}
    nested = subgraph_reads(body.node)
    outs = [b.name for b in body.output]
    # a branch output its nodes compute is written under the If's output name (no Identity between)
    rename = {b: out for b, out in zip(outs, node.output)
              if out and b in made and outs.count(b) == 1 and b not in nested}
    g.remove(node)
    for t in body.initializer:
        g.set_const(t.name, numpy_helper.to_array(t))
    added = []
    for n in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        for k, t in enumerate(copy.input):
            if t in rename:
                copy.input[k] = rename[t]
        for k, t in enumerate(copy.output):
            if t in rename:
                copy.output[k] = rename[t]
        added.append(g.add(copy, near=node, origin=m.origin))
    # the names the removed If's bodies read are no longer pinned (unless another body reads them)
    g.pinned = set(g.outputs) | subgraph_reads(g.node_list())
    for out, b in zip(node.output, outs):
        if out and b not in rename:
            added.append(g.make("Identity", [b], [out], near=node, origin=m.origin, name=f"{node.name}/{b}"))
    for n in added:   # a branch that only passes a tensor on (``else: x``) leaves no Identity behind
        if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and bypass_reason(Match([n]), g) is None:
            g.bypass(n, n.input[0], n.output[0])
    return f"condition {taken} for the static shapes: the {'then' if taken else 'else'} branch inlined"
