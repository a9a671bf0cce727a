"""An ``If`` whose condition the static shapes decide -> the nodes of the branch it takes.

PyTorch's exports test shapes at run time: TorchScript writes ``x.squeeze(dim)`` of an axis whose
size it does not know as ``If(Equal(Gather(Shape(x), dim), 1), then: Squeeze(x, dim), else:
Identity(x))`` (akiki's GRU VAD: 2 such Ifs cut it into 2 regions); Silero VAD v4 / v5 test the
state's batch and the sample rate's branch the same way, nested. With the shapes static (a model
input of fixed size, or ``input_shapes=``) the condition is a constant: its cone (constants,
``Shape`` / ``Size`` of tensors of static shape, and small deterministic ops on them) is evaluated
here and the If replaced by the branch it takes (exact: the branch onnxruntime runs for these
shapes; onnxruntime's own type inference of a static model may even reject the branch not taken).
The branch's nodes keep their names and tensors (renamed only where the graph has the name), its
results are written under the If's output names, a pass-through branch (``else: x``) leaves no
Identity, and an If nested in the branch is inlined on a later sweep when its condition is static too.

Left alone: a condition that reads data (a run-time value) or no shape at all (a constant condition,
as the model states it: onnxruntime inlines that If at load), a cone of more than ``MAX_CONE`` nodes,
an If whose results are all integer / boolean (shape bookkeeping: the ONNX AffineGrid function's
index Ifs, whose static branch hands onnxruntime's load-time checks a [1]-shaped size for Range),
or a branch that reads no run-time tensor (constant / shape bookkeeping such as torchvision's
empty-boxes test or the ONNX AffineGrid function's rank test: it cuts no data path, and a constant
branch output can break onnxruntime's static checks, tests/test_legalize_passthrough.py).
fold_constants does not fold the cone itself (an If's condition stays a tensor: see its docstring)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx
from onnx import numpy_helper

from ...graph_index import subgraph_reads
from .base import Match, attr, bypass_reason
from .fold_constants import NON_DETERMINISTIC, evaluate

NAME = "if_static_branch"
OPS = ("If",)
MAX_CONE = 64


def match(node, g) -> Optional[Match]:
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    return Match([node])


def _value(name: str, g, memo: dict, budget: list):
    """The value of tensor ``name`` from constants and static shapes, or a reason (str); ``budget``:
    [nodes left to evaluate, Shape / Size nodes read so far]."""
    if name in memo:
        return memo[name]
    if g.is_const(name):
        memo[name] = g.const(name)
        return memo[name]
    p = g.producer.get(name)
    if p is None:
        return f"'{name}' is a graph input"
    budget[0] -= 1
    if budget[0] < 0:
        return f"the condition's cone has more than {MAX_CONE} nodes"
    if p.op_type in ("Shape", "Size"):
        budget[1] += 1
        s = g.shape(p.input[0])
        if s is None:
            return f"'{p.input[0]}' has no static shape"
        dims = np.asarray(s, np.int64)
        if p.op_type == "Size":
            val = np.asarray(int(np.prod(dims)), np.int64)
        else:
            r = len(dims)
            lo, hi = attr(p, "start", 0), attr(p, "end", r)
            lo, hi = (max(0, min(r, v + r if v < 0 else v)) for v in (lo, hi))
            val = dims[lo:hi]
        memo[name] = val
        return val
    if p.domain not in ("", "ai.onnx") or p.op_type in NON_DETERMINISTIC or subgraph_reads([p]):
        return f"'{name}' comes from {p.op_type}, which is not evaluated here"
    ins = {}
    for i in p.input:
        if i:
            v = _value(i, g, memo, budget)
            if isinstance(v, str):
                return v
            ins[i] = v
    try:
        outs = evaluate(p, g, ins)
    except Exception as exc:   # noqa: BLE001 - a reason, not a crash
        return f"cannot evaluate {p.op_type} '{p.name}': {exc}"
    for o, v in zip([o for o in p.output if o], outs):
        memo[o] = np.asarray(v)
    return memo[name]


def check(m: Match, g, target) -> Optional[str]:
    node, budget = m.node, [MAX_CONE, 0]   # nodes left to evaluate, Shape / Size nodes read
    cond = _value(node.input[0], g, {}, budget)
    if isinstance(cond, str):
        return f"the condition is not static: {cond}"
    if not budget[1]:
        return "the condition reads no shape (a constant condition is left to onnxruntime)"
    if cond.size != 1:
        return f"the condition has {cond.size} elements"
    branch = attr(node, "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    if len(branch.output) != len(node.output):
        return "the branch has another number of outputs than the If"
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)
    types = [g.dtype(o) or b.type.tensor_type.elem_type for o, b in zip(node.output, branch.output)]
    if not any(t in floats for t in types):
        # integer / boolean results are shape bookkeeping (the ONNX AffineGrid function's index and
        # size Ifs): no data path to join, and the branch's static shapes can trip onnxruntime's
        # load-time checks the If hid (a [1]-shaped size into Range: conformance affine_grid_*_expanded)
        return "the If computes no floating-point tensor (shape bookkeeping: left to onnxruntime)"
    inner = {o for n in branch.node for o in n.output if o} | {t.name for t in branch.initializer}
    outer = {i for n in branch.node for i in n.input if i} | {b.name for b in branch.output}
    if all(g.is_const(t) or (g.producer.get(t) is not None and g.producer[t].op_type == "Constant")
           for t in outer - inner):
        return ("the branch reads no run-time tensor (constant / shape bookkeeping, which cuts no data "
                "path: left to onnxruntime)")
    m.data["branch"], m.data["cond"] = branch, bool(cond.reshape(-1)[0])
    return None


def _rename_reads(graph: onnx.GraphProto, rename: dict) -> None:
    """Rename the outer names a nested body reads (ONNX names are unique across scopes)."""
    for n in graph.node:
        for k, t in enumerate(n.input):
            n.input[k] = rename.get(t, t)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_reads(sub, rename)
    for o in graph.output:
        o.name = rename.get(o.name, o.name)


def rewrite(m: Match, g) -> str:
    node, branch = m.node, m.data["branch"]
    origin = m.origin
    consts = {t.name for t in branch.initializer}
    internal = {o for n in branch.node for o in n.output if o} | consts
    rename = {}
    for b, o in zip(branch.output, node.output):   # a branch result written straight to the If's output
        if o and b.name in internal and b.name not in rename and b.name not in consts:
            rename[b.name] = o
    for t in sorted(internal - set(rename)):       # a name the graph has already: a fresh one
        if t in g.tensor_names:
            rename[t] = g.fresh(f"{node.name}/{t}")
    g.remove(node)
    for t in branch.initializer:
        g.set_const(rename.get(t.name, t.name), numpy_helper.to_array(t))
    added = []
    for n in branch.node:
        new = onnx.NodeProto()
        new.CopyFrom(n)
        if not new.name or new.name in g.names:
            new.name = g.fresh_node_name(f"{node.name}/{n.name or n.op_type}")
        for k, i in enumerate(new.input):
            new.input[k] = rename.get(i, i)
        for k, o in enumerate(new.output):
            new.output[k] = rename.get(o, o)
        for a in new.attribute:   # a nested If / Loop reading a renamed tensor
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_reads(sub, rename)
        added.append(g.add(new, near=node, origin=origin))
    for b, o in zip(branch.output, node.output):   # an outer value, a constant, or a result read twice
        if o and rename.get(b.name) != o:
            added.append(g.make("Identity", [rename.get(b.name, b.name)], [o], near=node, origin=origin,
                                name=f"{node.name}/{o}/out"))
    g.pinned = set(g.outputs) | subgraph_reads(g.node_list())
    for n in added:   # a branch that only passes a tensor on (``else: x``) leaves no Identity behind
        if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and bypass_reason(Match([n]), g) is None:
            g.bypass(n, n.input[0], n.output[0])
    return (f"If with a static condition ({m.data['cond']}): the {'then' if m.data['cond'] else 'else'} "
            f"branch's {len(branch.node)} nodes inlined")
